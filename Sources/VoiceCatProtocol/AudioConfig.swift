// The per-channel Opus configuration (seed §3, PROTOCOL.md §2: AudioConfig plus
// `bool dred = 11`). Frame durations are kept in microseconds because Opus allows
// 2.5 ms frames; on the wire field 5 `frame_ms` carries whole milliseconds and
// field 12 `frame_us` the exact duration (docs/protocol.md).

public struct AudioConfig: Equatable, Sendable {
    public enum Mode: UInt32, Sendable { case mono = 0, stereo = 1 }
    public enum Application: UInt32, Sendable { case voip = 0, audio = 1, lowDelay = 2 }

    /// 0 = Opus, the only codec.
    public var codec: UInt32 = 0
    public var mode: Mode = .mono
    /// Caps the encoder's audio bandwidth; PCM always runs at 48 kHz (seed §3).
    public var sampleRate: UInt32 = 48000
    public var bitrate: UInt32 = 32000
    /// Frame duration in microseconds: 2500, 5000, 10000, 20000, 40000 or 60000.
    public var frameMicros: UInt32 = 20000
    public var application: Application = .voip
    public var fec: Bool = true
    public var expectedPacketLoss: UInt32 = 10
    public var dtx: Bool = true
    public var complexity: UInt32 = 10
    public var dred: Bool = false

    public init() {}

    /// The `Lobby` default: speech, mono, VOIP, 32 kbps, 20 ms, FEC on at 10 %, DTX on.
    public static let speech = AudioConfig()

    /// The `Music` default: stereo, AUDIO, 128 kbps, 20 ms, DTX off.
    public static var music: AudioConfig {
        var c = AudioConfig()
        c.mode = .stereo
        c.application = .audio
        c.bitrate = 128000
        c.fec = false
        c.expectedPacketLoss = 0
        c.dtx = false
        return c
    }

    public static let allowedFrameMicros: [UInt32] = [2500, 5000, 10000, 20000, 40000, 60000]
    public static let allowedSampleRates: [UInt32] = [8000, 12000, 16000, 24000, 48000]

    public var channels: Int { mode == .stereo ? 2 : 1 }
    /// Samples per channel in one frame at 48 kHz.
    public var frameSamples: Int { Int(frameMicros) * 48 / 1000 }

    /// nil when valid, else what is wrong.
    public func validationError() -> String? {
        if codec != 0 { return "codec \(codec) is not Opus (0)" }
        if !AudioConfig.allowedSampleRates.contains(sampleRate) { return "sample_rate \(sampleRate) is not one of 8000/12000/16000/24000/48000" }
        if !AudioConfig.allowedFrameMicros.contains(frameMicros) { return "frame duration \(frameMicros) us is not one of 2.5/5/10/20/40/60 ms" }
        if bitrate < 6000 || bitrate > 510000 { return "bitrate \(bitrate) is outside 6000..510000" }
        if expectedPacketLoss > 100 { return "expected_packet_loss \(expectedPacketLoss) is over 100" }
        if complexity > 10 { return "complexity \(complexity) is over 10" }
        return nil
    }

    public func encode(into w: inout ProtoWriter) {
        w.uint(1, codec)
        w.uint(2, mode.rawValue)
        w.uint(3, sampleRate)
        w.uint(4, bitrate)
        w.uint(5, frameMicros / 1000)
        w.uint(6, application.rawValue)
        w.bool(7, fec)
        w.uint(8, expectedPacketLoss)
        w.bool(9, dtx)
        w.uint(10, complexity)
        w.bool(11, dred)
        w.uint(12, frameMicros)
    }

    /// What an absent AudioConfig decodes to: proto3 zeros, not our defaults.
    public static var decodedEmpty: AudioConfig {
        var c = AudioConfig()
        c.mode = .mono; c.sampleRate = 0; c.bitrate = 0; c.application = .voip; c.fec = false
        c.expectedPacketLoss = 0; c.dtx = false; c.complexity = 0; c.frameMicros = 0
        return c
    }

    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> AudioConfig {
        var r = r
        var c = AudioConfig.decodedEmpty
        var frameMs: UInt32 = 0
        var frameUs: UInt32 = 0
        while let f = try r.next() {
            switch f.number {
            case 1: c.codec = try r.uint32(f)
            case 2:
                guard let m = Mode(rawValue: try r.uint32(f)) else { throw .valueOutOfRange(field: 2) }
                c.mode = m
            case 3: c.sampleRate = try r.uint32(f)
            case 4: c.bitrate = try r.uint32(f)
            case 5: frameMs = try r.uint32(f)
            case 6:
                guard let a = Application(rawValue: try r.uint32(f)) else { throw .valueOutOfRange(field: 6) }
                c.application = a
            case 7: c.fec = try r.bool(f)
            case 8: c.expectedPacketLoss = try r.uint32(f)
            case 9: c.dtx = try r.bool(f)
            case 10: c.complexity = try r.uint32(f)
            case 11: c.dred = try r.bool(f)
            case 12: frameUs = try r.uint32(f)
            default: break
            }
        }
        if frameUs != 0 {
            c.frameMicros = frameUs
        } else {
            let (us, overflow) = frameMs.multipliedReportingOverflow(by: 1000)
            guard !overflow else { throw .valueOutOfRange(field: 5) }
            c.frameMicros = us
        }
        return c
    }
}
