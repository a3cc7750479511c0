// One frame period of a received stream, as the receive path plays it: the jitter
// buffer decides, the decoder makes the audio (a packet, a lost frame rebuilt from
// its successor's in-band FEC or DRED, PLC, comfort noise, or silence). Written once
// for the client's receive slots and the quality bench's simulated listener.

extension OpusDecoderBox {
    /// Asks `jitter` for the next period at `nowMs` and decodes it into `out`
    /// (`frames` stereo samples). `dred`: the stream's DRED state when the channel
    /// and the loaded libopus both have DRED. The jitter buffer's statistics count
    /// what was rebuilt and what was concealed; `jitter.talkEdge` tells talkspurts.
    /// Returns the jitter buffer's decision (a `.fec` slot is still held).
    @discardableResult
    public func playNext(from jitter: JitterBuffer, dred: DREDRecovery?, frames n: Int, nowMs: Double,
                         into out: UnsafeMutablePointer<Int16>) -> JitterBuffer.Playout {
        let playout = jitter.next(atMs: nowMs)
        switch playout {
        case .packet(let slot):
            let ok = (try? decode(jitter.payload(slot), frames: n, into: out)) != nil
            jitter.release(slot)
            if !ok { jitter.countConcealed(); conceal(frames: n, into: out) }
        case .fec(let slot):
            if let dred, dred.recover(decoder: self, packet: jitter.payload(slot), frames: n, into: out) {
                jitter.fecWasDRED()
            } else if (try? decode(jitter.payload(slot), fec: true, frames: n, into: out)) == nil {
                jitter.fecFailed()
                conceal(frames: n, into: out)
            }
        case .conceal, .comfortNoise:
            // A lost frame, or a DTX pause: the decoder's PLC / comfort noise, not digital silence.
            conceal(frames: n, into: out)
        case .silence:
            out.update(repeating: 0, count: n * 2)
        }
        return playout
    }

    private func conceal(frames n: Int, into out: UnsafeMutablePointer<Int16>) {
        if (try? decode(nil, frames: n, into: out)) == nil { out.update(repeating: 0, count: n * 2) }
    }
}
