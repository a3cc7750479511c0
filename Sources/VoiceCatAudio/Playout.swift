// One frame period of a received stream, as the receive path plays it: the jitter
// buffer decides, the decoder makes the audio (a packet, a lost frame rebuilt from
// its successor's in-band FEC or DRED, PLC, comfort noise, or silence). Written once
// for the client's receive slots and the quality bench's simulated listener.

/// Where a decoded frame goes: int16 (`opus_decode`, soft-clipped to full scale) or
/// float (`opus_decode_float`, full scale ±1.0, not clipped; cheaper).
public enum DecodedFrame {
    case int16(UnsafeMutablePointer<Int16>)
    case float(UnsafeMutablePointer<Float>)
}

extension OpusDecoderBox {
    /// Asks `jitter` for the next period at `nowMs` and decodes it into `out`
    /// (`frames` samples of the decoder's `channels`). `dred`: the stream's DRED state when the channel
    /// and the loaded libopus both have DRED. The jitter buffer's statistics count
    /// what was rebuilt and what was concealed; `jitter.talkEdge` tells talkspurts.
    /// Returns the jitter buffer's decision (a `.fec` slot is still held).
    @discardableResult
    public func playNext(from jitter: JitterBuffer, dred: DREDRecovery?, frames n: Int, nowMs: Double,
                         into out: UnsafeMutablePointer<Int16>) -> JitterBuffer.Playout {
        playNext(from: jitter, dred: dred, frames: n, nowMs: nowMs, into: .int16(out))
    }

    /// The same into either sample type.
    @discardableResult
    public func playNext(from jitter: JitterBuffer, dred: DREDRecovery?, frames n: Int, nowMs: Double,
                         into out: DecodedFrame) -> JitterBuffer.Playout {
        let playout = jitter.next(atMs: nowMs)
        switch playout {
        case .packet(let slot):
            let ok = decode(jitter.payload(slot), fec: false, frames: n, into: out)
            jitter.release(slot)
            if !ok { jitter.countConcealed(); conceal(frames: n, into: out) }
        case .fec(let slot):
            if let dred, recover(dred, packet: jitter.payload(slot), frames: n, into: out) {
                jitter.fecWasDRED()
            } else if !decode(jitter.payload(slot), fec: true, frames: n, into: out) {
                jitter.fecFailed()
                conceal(frames: n, into: out)
            }
        case .conceal, .comfortNoise:
            // A lost frame, or a DTX pause: the decoder's PLC / comfort noise, not digital silence.
            conceal(frames: n, into: out)
        case .silence:
            zero(frames: n, out)
        }
        return playout
    }

    /// False when the decoder failed. A packet shorter than the frame (a sender's
    /// 10 ms packet on a 20 ms stream) decodes fewer samples: the rest is silence, not
    /// what the buffer held before (the receive path decodes every stream into one).
    private func decode(_ packet: UnsafeRawBufferPointer?, fec: Bool, frames n: Int, into out: DecodedFrame) -> Bool {
        let got: Int?
        switch out {
        case .int16(let p): got = try? decode(packet, fec: fec, frames: n, into: p)
        case .float(let p): got = try? decode(packet, fec: fec, frames: n, into: p)
        }
        guard let got else { return false }
        if got < n { zero(from: got, frames: n, out) }
        return true
    }

    private func recover(_ dred: DREDRecovery, packet: UnsafeRawBufferPointer, frames n: Int, into out: DecodedFrame) -> Bool {
        let got: Int
        switch out {
        case .int16(let p): got = dred.recover(decoder: self, packet: packet, frames: n, into: p)
        case .float(let p): got = dred.recover(decoder: self, packet: packet, frames: n, into: p)
        }
        guard got > 0 else { return false }
        if got < n { zero(from: got, frames: n, out) }
        return true
    }

    /// Silence in frames `from..<frames` (of `channels`).
    private func zero(from: Int = 0, frames n: Int, _ out: DecodedFrame) {
        let c = channels
        switch out {
        case .int16(let p): (p + from * c).update(repeating: 0, count: (n - from) * c)
        case .float(let p): (p + from * c).update(repeating: 0, count: (n - from) * c)
        }
    }

    private func conceal(frames n: Int, into out: DecodedFrame) {
        if !decode(nil, fec: false, frames: n, into: out) { zero(frames: n, out) }
    }
}
