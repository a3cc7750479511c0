// libopus encoder and decoder wrappers. Pure computation; created on the control
// path, used on the audio path without allocating.
import COpus
import VoiceCatProtocol

public struct CodecError: Error, Equatable, CustomStringConvertible {
    public let call: String
    public let code: Int32
    public init(_ call: String, _ code: Int32) { self.call = call; self.code = code }
    public var description: String { "\(call): \(String(cString: opus_strerror(code)))" }
}

/// Maps AudioConfig.sampleRate to the encoder's bandwidth cap (seed §3).
public func opusMaxBandwidth(forSampleRate rate: UInt32) -> Int32 {
    switch rate {
    case ...8000: return 1101      // OPUS_BANDWIDTH_NARROWBAND
    case ...12000: return 1102     // MEDIUMBAND
    case ...16000: return 1103     // WIDEBAND
    case ...24000: return 1104     // SUPERWIDEBAND
    default: return 1105           // FULLBAND
    }
}

public func opusApplication(_ a: AudioConfig.Application) -> Int32 {
    switch a {
    case .voip: return 2048        // OPUS_APPLICATION_VOIP
    case .audio: return 2049       // OPUS_APPLICATION_AUDIO
    case .lowDelay: return 2051    // OPUS_APPLICATION_RESTRICTED_LOWDELAY
    }
}

public enum OpusPacket {
    /// True when `packet` carries in-band FEC (LBRR) for the frame before it: what the
    /// header's FEC flag says. An encoder with FEC on leaves it out of CELT-mode
    /// packets, after inactive frames and at a loss percentage of 0.
    public static func carriesFEC(_ packet: UnsafeRawBufferPointer) -> Bool {
        guard let base = packet.baseAddress, packet.count > 0 else { return false }
        return vcshim_opus_packet_has_lbrr(base.assumingMemoryBound(to: UInt8.self), Int32(packet.count)) == 1
    }
}

/// An Opus encoder at 48 kHz configured from every AudioConfig field.
public final class OpusEncoderBox {
    let enc: OpaquePointer
    public let channels: Int
    public let frameSamples: Int
    /// True when the last encoded frame was DTX (nothing worth sending).
    public private(set) var lastWasDTX = false
    /// True when the last encoded packet carries in-band FEC for the frame before it.
    public private(set) var lastCarriesFEC = false
    /// True when DRED could be enabled in the loaded libopus.
    public private(set) var dredEnabled = false
    /// The loss protection in force: OPUS_SET_INBAND_FEC and OPUS_SET_PACKET_LOSS_PERC.
    public private(set) var fecEnabled: Bool
    public private(set) var packetLossPercent: Int

    public init(config: AudioConfig) throws {
        if let why = config.validationError() { throw CodecError("AudioConfig: \(why)", -1) }
        channels = config.channels
        frameSamples = config.frameSamples
        fecEnabled = config.fec
        packetLossPercent = Int(config.expectedPacketLoss)
        var err: Int32 = 0
        guard let e = opus_encoder_create(48000, Int32(channels), opusApplication(config.application), &err), err == 0 else {
            throw CodecError("opus_encoder_create", err)
        }
        enc = e
        func check(_ name: String, _ rc: Int32) throws { if rc != 0 { opus_encoder_destroy(e); throw CodecError(name, rc) } }
        try check("OPUS_SET_BITRATE", vcshim_opus_set_bitrate(e, Int32(config.bitrate)))
        try check("OPUS_SET_COMPLEXITY", vcshim_opus_set_complexity(e, Int32(config.complexity)))
        try check("OPUS_SET_INBAND_FEC", vcshim_opus_set_inband_fec(e, config.fec ? 1 : 0))
        try check("OPUS_SET_PACKET_LOSS_PERC", vcshim_opus_set_packet_loss_perc(e, Int32(config.expectedPacketLoss)))
        try check("OPUS_SET_DTX", vcshim_opus_set_dtx(e, config.dtx ? 1 : 0))
        try check("OPUS_SET_MAX_BANDWIDTH", vcshim_opus_set_max_bandwidth(e, opusMaxBandwidth(forSampleRate: config.sampleRate)))
        if config.application == .voip { _ = vcshim_opus_set_signal(e, 3001) }  // OPUS_SIGNAL_VOICE
        if config.dred {
            // 100 ms of redundancy; libopus without DRED answers with an error (FEC/PLC remain).
            dredEnabled = vcshim_opus_set_dred_duration(e, 10) == 0
        }
    }

    deinit { opus_encoder_destroy(enc) }

    /// Changes the loss protection from the next frame on (no allocation; callable
    /// between frames by the encoder's owner).
    public func setProtection(fec: Bool, lossPercent: Int) throws {
        let loss = min(max(lossPercent, 0), 100)
        if fec != fecEnabled {
            let rc = vcshim_opus_set_inband_fec(enc, fec ? 1 : 0)
            guard rc == 0 else { throw CodecError("OPUS_SET_INBAND_FEC", rc) }
            fecEnabled = fec
        }
        if loss != packetLossPercent {
            let rc = vcshim_opus_set_packet_loss_perc(enc, Int32(loss))
            guard rc == 0 else { throw CodecError("OPUS_SET_PACKET_LOSS_PERC", rc) }
            packetLossPercent = loss
        }
    }

    /// The header flags of the packet just encoded (`length` bytes), or nil when it
    /// need not be sent: DTX's empty frames (a TOC byte) are not sent, its sparse
    /// comfort-noise updates are, flagged DTX; a `last` frame is always sent.
    /// `marker`: the frame starts a talkspurt (a comfort-noise update never does).
    public func headerFlags(length: Int, marker: Bool, last: Bool) -> FrameFlags? {
        if lastWasDTX && length <= 2 && !last { return nil }
        var flags: FrameFlags = []
        if marker && !lastWasDTX { flags.insert(.marker) }
        if lastCarriesFEC { flags.insert(.fec) }
        if lastWasDTX { flags.insert(.dtx) }
        if last { flags.insert(.lastFrame) }
        return flags
    }

    /// Encodes one frame of `frameSamples * channels` interleaved samples into `out`.
    /// Returns the packet length.
    public func encode(_ pcm: UnsafePointer<Int16>, into out: UnsafeMutableRawBufferPointer) throws -> Int {
        let n = opus_encode(enc, pcm, Int32(frameSamples), out.baseAddress!.assumingMemoryBound(to: UInt8.self), Int32(out.count))
        guard n >= 0 else { throw CodecError("opus_encode", n) }
        var dtx: Int32 = 0
        _ = vcshim_opus_get_in_dtx(enc, &dtx)
        // A packet of 1-2 bytes carries no audio: DTX says it need not be sent.
        lastWasDTX = dtx != 0 || n <= 2
        lastCarriesFEC = OpusPacket.carriesFEC(UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(out)[0..<Int(n)]))
        return Int(n)
    }
}

/// An Opus decoder at 48 kHz, stereo output (a mono stream decodes to L = R) unless
/// set to mono for a mono stream (`setChannels(1)`: a quarter or so cheaper, and one
/// sample per frame). Its state is sized for stereo once, so either fits.
public final class OpusDecoderBox {
    let dec: OpaquePointer
    /// Output channels: every decode writes `frames × channels` samples.
    public private(set) var channels = 2

    public init() throws {
        let raw = UnsafeMutableRawPointer.allocate(byteCount: Int(opus_decoder_get_size(2)), alignment: 16)
        dec = OpaquePointer(raw)
        let err = opus_decoder_init(dec, 48000, 2)
        guard err == 0 else { raw.deallocate(); throw CodecError("opus_decoder_init", err) }
    }

    deinit { UnsafeMutableRawPointer(dec).deallocate() }

    public func reset() { _ = vcshim_opus_decoder_reset(dec) }

    /// Starts over with `channels` (1 or 2) output channels (a new stream; no allocation).
    public func setChannels(_ channels: Int) {
        let c = channels == 1 ? 1 : 2
        if c != self.channels {
            // Does not fail for 48 kHz and 1 or 2 channels in a state sized for 2; if it
            // did, the state is made stereo again (as created) rather than left half set.
            if opus_decoder_init(dec, 48000, Int32(c)) == 0 {
                self.channels = c
            } else {
                _ = opus_decoder_init(dec, 48000, 2)
                self.channels = 2
            }
        } else {
            reset()
        }
    }

    /// Decodes a packet (or conceals a lost frame when `packet` is nil) into
    /// `frames` samples of `channels` channels at `out`. With `fec`, decodes the in-band FEC copy of
    /// the previous frame carried by `packet`. Returns samples per channel.
    public func decode(_ packet: UnsafeRawBufferPointer?, fec: Bool = false, frames: Int, into out: UnsafeMutablePointer<Int16>) throws -> Int {
        try decode(packet, fec: fec, "opus_decode") { opus_decode(dec, $0, $1, out, Int32(frames), $2) }
    }

    /// The same as float (`opus_decode_float`): full scale ±1.0, not clipped. Cheaper
    /// than the int16 API, which decodes to float and then soft-clips and converts.
    public func decode(_ packet: UnsafeRawBufferPointer?, fec: Bool = false, frames: Int, into out: UnsafeMutablePointer<Float>) throws -> Int {
        try decode(packet, fec: fec, "opus_decode_float") { opus_decode_float(dec, $0, $1, out, Int32(frames), $2) }
    }

    /// Calls `call(data, length, decode_fec)` with the packet, or with no data (PLC).
    private func decode(_ packet: UnsafeRawBufferPointer?, fec: Bool, _ name: String,
                        _ call: (UnsafePointer<UInt8>?, Int32, Int32) -> Int32) throws -> Int {
        let n: Int32
        if let p = packet, p.count > 0 {
            n = call(p.baseAddress!.assumingMemoryBound(to: UInt8.self), Int32(p.count), fec ? 1 : 0)
        } else {
            n = call(nil, 0, 0)
        }
        guard n >= 0 else { throw CodecError(name, n) }
        return Int(n)
    }
}
