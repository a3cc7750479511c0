// A published stream: reframer, send processing, input gate, Opus encoder, header
// flags, seal, send. Driven by the thread that feeds it (vc_stream_feed_pcm or its
// capture thread) under its slot's lock, the only lock a sent frame takes (see
// SendPath.swift). Nothing here allocates per frame.
import VoiceCatAudio
import VoiceCatProtocol
import VoiceCatSystem

final class LocalStream {
    let streamID: UInt32
    let ssrc: UInt32
    let kind: StreamKind
    let externalFeed: Bool
    let audio: AudioConfig
    var inputChannels: Int
    let reframer: Reframer
    let encoder: OpusEncoderBox
    private let opusBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1500, alignment: 16)
    private let sealBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1500 + MediaCrypto.overhead, alignment: 16)
    private let silence: UnsafeMutablePointer<Int16>
    /// Scratch for the processed copy of a frame.
    private let processed: UnsafeMutablePointer<Int16>
    private(set) var seq: UInt64 = 0
    private(set) var timestamp: UInt32 = 0
    private var needMarker = true
    private var inDTX = false
    /// The slot it lives in (its lock guards everything here) and the table's shared parts.
    unowned let slot: StreamSlot
    unowned let table: StreamTable
    /// MIC streams only: VAD / push-to-talk.
    private var gate = InputGate()
    /// The device capture feeding this stream (nil for external feed).
    var capture: CaptureWorker?
    var device: String?
    /// Talker-side processing (MIC streams on mono channels); swapped under the slot lock.
    var apm: SpeexApm?
    /// This stream's read position in the played mix (echo cancellation).
    var farCursor = FarEndRing.Cursor()
    private let farBlock = UnsafeMutablePointer<Int16>.allocate(capacity: 480)

    init(streamID: UInt32, ssrc: UInt32, kind: StreamKind, externalFeed: Bool, inputChannels: Int, audio: AudioConfig,
         slot: StreamSlot, table: StreamTable) throws {
        self.streamID = streamID; self.ssrc = ssrc; self.kind = kind; self.externalFeed = externalFeed
        self.slot = slot; self.table = table
        self.inputChannels = inputChannels
        self.audio = audio
        do { encoder = try OpusEncoderBox(config: audio) } catch { throw ClientError.codec("\(error)") }
        reframer = Reframer(frameSamples: audio.frameSamples, channels: audio.channels)
        silence = .allocate(capacity: audio.frameSamples * audio.channels)
        silence.initialize(repeating: 0, count: audio.frameSamples * audio.channels)
        processed = .allocate(capacity: audio.frameSamples * audio.channels)
        processed.initialize(repeating: 0, count: audio.frameSamples * audio.channels)
    }

    deinit { opusBuffer.deallocate(); sealBuffer.deallocate(); silence.deallocate(); processed.deallocate(); farBlock.deallocate() }

    /// Reframes, encodes and sends (slot lock held by caller).
    func feed(_ pcm: UnsafePointer<Int16>, frames: Int, channels: Int) throws {
        var failure: Error? = nil
        reframer.push(pcm, frames: frames, inChannels: channels) { frame in
            guard failure == nil else { return }
            do { try gateAndSend(frame) } catch { failure = error }
        }
        if let f = failure { throw f }
    }

    /// Send processing (NS / AGC / AEC), then the input gate (MIC streams only), then encode and send.
    private func gateAndSend(_ input: UnsafePointer<Int16>) throws {
        let frame: UnsafePointer<Int16>
        if let apm {
            // Process a copy in the stream's scratch: the reframer owns `input`.
            let work = processed
            work.update(from: input, count: audio.frameSamples)
            var off = 0
            while off + apm.blockSize <= audio.frameSamples {
                let far: UnsafePointer<Int16>? = apm.settings.echoCancellation && apm.blockSize == 480
                    && table.farEnd.pop(into: farBlock, cursor: &farCursor) ? UnsafePointer(farBlock) : nil
                apm.process(work + off, farEnd: far)
                off += apm.blockSize
            }
            frame = UnsafePointer(work)
        } else {
            frame = input
        }
        guard kind == .mic else { return try encodeAndSend(frame, last: false) }
        switch gate.process(frame, frameSamples: audio.frameSamples, channels: audio.channels, settings: table.gate.settings) {
        case .open:
            try encodeAndSend(frame, last: false)
        case .closing:
            try encodeAndSend(frame, last: true)
            needMarker = true
        case .closed:
            // Gated frames are not encoded; time still passes for the receiver.
            timestamp &+= UInt32(audio.frameSamples)
            needMarker = true
        }
    }

    /// Sends what is pending (padded with silence) flagged as the last frame.
    func finish() {
        if reframer.pending > 0 {
            let missing = reframer.frameSamples - reframer.pending
            reframer.push(silence, frames: missing, inChannels: reframer.channels) { frame in
                try? encodeAndSend(frame, last: true)
            }
        } else {
            try? encodeAndSend(silence, last: true)
        }
    }

    private func encodeAndSend(_ frame: UnsafePointer<Int16>, last: Bool) throws {
        let n: Int
        do { n = try encoder.encode(frame, into: opusBuffer) } catch { throw ClientError.codec("\(error)") }
        defer { timestamp &+= UInt32(audio.frameSamples) }
        // DTX: the first silent frame is sent flagged DTX (so receivers know a pause,
        // not a loss, follows); the rest are not transmitted, and the next real frame
        // starts a new talkspurt with the marker.
        if encoder.lastWasDTX && !last {
            if inDTX { return }
            inDTX = true
        } else {
            inDTX = false
        }
        var flags: FrameFlags = []
        if needMarker { flags.insert(.marker) }
        if audio.fec { flags.insert(.fec) }
        if encoder.lastWasDTX { flags.insert(.dtx) }
        if last { flags.insert(.lastFrame) }
        let header = FrameHeader(type: .voice, flags: flags, ssrc: ssrc, seq: seq, timestamp: timestamp)
        guard send(header: header, opus: UnsafeRawBufferPointer(rebasing: opusBuffer[0..<n])) else {
            // Not sent (server-muted, media path down): the next sent frame is a new talkspurt.
            needMarker = true
            return
        }
        seq += 1
        needMarker = inDTX
    }

    /// Seals under the slot's snapshot and sends; false when nothing could be sent
    /// (not connected, server-muted, socket buffer full).
    private func send(header: FrameHeader, opus: UnsafeRawBufferPointer) -> Bool {
        guard let path = slot.path, !path.serverMuted else { return false }
        let n = MediaCrypto.seal(header: header, payload: opus, key: path.key, into: sealBuffer)
        guard (try? path.socket.sendTo(UnsafeRawBufferPointer(rebasing: sealBuffer[0..<n]), path.address)) != nil else { return false }
        slot.packetsOut += 1
        slot.bytesOut += UInt64(n)
        return true
    }
}
