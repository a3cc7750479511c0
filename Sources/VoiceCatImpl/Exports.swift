// The C ABI of libvoicecat: every `vc_*` function of include/voicecat.h, as
// @_cdecl exports over VoiceCatClient. This file only checks arguments, converts
// between C and Swift types and maps errors to VC_ERR_* codes.
import Glibc
import VoiceCatABI
import VoiceCatAudio
import VoiceCatClient
import VoiceCatDevices
import VoiceCatProtocol
import VoiceCatSystem

// MARK: - handles

/// Per-handle state: the engine plus the C callbacks it was given.
final class ClientBox {
    let client: VoiceClient
    var eventFn: vc_event_fn?
    var eventUser: UnsafeMutableRawPointer?
    var sinkFn: vc_pcm_sink_fn?
    var sinkUser: UnsafeMutableRawPointer?
    init(_ c: VoiceClient) { client = c }
}

/// Live handles. A pointer not in here (NULL, destroyed, garbage) is refused
/// without being dereferenced.
enum Registry {
    static let lock = Lock()
    nonisolated(unsafe) static var live: [UnsafeMutableRawPointer: ClientBox] = [:]

    static func box(_ p: OpaquePointer?) -> ClientBox? {
        guard let p else { return nil }
        return lock.withLock { live[UnsafeMutableRawPointer(p)] }
    }
}

let VC_OK_: Int32 = 0
let ERR_INVALID_ARG: Int32 = -1
let ERR_STATE: Int32 = -2
let ERR_NOT_FOUND: Int32 = -3
let ERR_BUFFER_TOO_SMALL: Int32 = -14

func code(_ e: Error) -> Int32 {
    if let c = e as? ClientError { return VoiceClient.code(c) }
    return -6
}

/// Runs `body` with the live client for `p`; maps thrown errors to codes.
@inline(__always)
func withClient(_ p: OpaquePointer?, _ body: (ClientBox) throws -> Int32) -> Int32 {
    guard let b = Registry.box(p) else { return ERR_INVALID_ARG }
    do { return try body(b) } catch { return code(error) }
}

func copyString(_ s: String, into buf: UnsafeMutablePointer<CChar>, capacity: Int) {
    guard capacity > 0 else { return }
    var n = 0
    for byte in s.utf8 {
        if n >= capacity - 1 { break }
        buf[n] = CChar(bitPattern: byte)
        n += 1
    }
    buf[n] = 0
}

func copyStringTuple<T>(_ s: String, into tuple: inout T) {
    withUnsafeMutableBytes(of: &tuple) { raw in
        copyString(s, into: raw.baseAddress!.assumingMemoryBound(to: CChar.self), capacity: raw.count)
    }
}

// MARK: - global

@_cdecl("vc_version_number")
public func vc_version_number() -> UInt32 { (0 << 16) | (2 << 8) | 0 }

let versionString: StaticString = "0.2.0"
@_cdecl("vc_version_string")
public func vc_version_string() -> UnsafePointer<CChar> {
    UnsafeRawPointer(versionString.utf8Start).assumingMemoryBound(to: CChar.self)
}

let errorTexts: [Int32: StaticString] = [
    0: "success",
    -1: "invalid argument",
    -2: "not allowed in the current state",
    -3: "not found",
    -4: "network error",
    -5: "timed out",
    -6: "protocol error",
    -7: "protocol version mismatch",
    -8: "authentication failed",
    -9: "rejected by the server",
    -10: "audio device error",
    -11: "codec error",
    -12: "out of memory or capacity",
    -13: "not supported",
    -14: "buffer too small",
]
let unknownError: StaticString = "unknown error"

@_cdecl("vc_strerror")
public func vc_strerror(_ c: Int32) -> UnsafePointer<CChar> {
    let s = errorTexts[c] ?? unknownError
    return UnsafeRawPointer(s.utf8Start).assumingMemoryBound(to: CChar.self)
}

@_cdecl("vc_struct_size")
public func vc_struct_size(_ name: UnsafePointer<CChar>?) -> Int {
    guard let name else { return 0 }
    switch String(cString: name) {
    case "vc_client_config": return MemoryLayout<vc_client_config>.size
    case "vc_connect_params": return MemoryLayout<vc_connect_params>.size
    case "vc_audio_config": return MemoryLayout<vc_audio_config>.size
    case "vc_stream_desc": return MemoryLayout<vc_stream_desc>.size
    case "vc_remote_stream": return MemoryLayout<vc_remote_stream>.size
    case "vc_remote_stream_info": return MemoryLayout<vc_remote_stream_info>.size
    case "vc_stream_stats": return MemoryLayout<vc_stream_stats>.size
    case "vc_connection_stats": return MemoryLayout<vc_connection_stats>.size
    case "vc_event": return MemoryLayout<vc_event>.size
    case "vc_device_info": return MemoryLayout<vc_device_info>.size
    case "vc_send_processing": return MemoryLayout<vc_send_processing>.size
    default: return 0
    }
}

@_cdecl("vc_set_log_callback")
public func vc_set_log_callback(_ fn: vc_log_fn?, _ user: UnsafeMutableRawPointer?) {
    guard let fn else { ClientLog.setSink(nil); return }
    ClientLog.setSink { level, message in
        message.withCString { fn(user, level, $0) }
    }
}

// MARK: - lifecycle

@_cdecl("vc_client_config_default")
public func vc_client_config_default() -> vc_client_config {
    vc_client_config(client_name: nil, keepalive_ms: 5000, max_remote_streams: 32, event_queue_size: 256,
                     external_playback: 0, playback_device: nil)
}

@_cdecl("vc_client_create")
public func vc_client_create(_ cfg: UnsafePointer<vc_client_config>?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    guard let out else { return ERR_INVALID_ARG }
    out.pointee = nil
    var c = ClientConfig()
    if let cfg {
        if let n = cfg.pointee.client_name { c.clientName = String(cString: n) }
        c.keepaliveMs = cfg.pointee.keepalive_ms
        c.maxRemoteStreams = Int(cfg.pointee.max_remote_streams)
        c.eventQueueSize = Int(cfg.pointee.event_queue_size)
        c.externalPlayback = cfg.pointee.external_playback != 0
        if let d = cfg.pointee.playback_device { c.playbackDevice = String(cString: d) }
    }
    let client: VoiceClient
    do { client = try VoiceClient(config: c) } catch { return code(error) }
    let box = ClientBox(client)
    let p = Unmanaged.passRetained(box).toOpaque()
    Registry.lock.withLock { Registry.live[p] = box }
    out.pointee = OpaquePointer(p)
    return VC_OK_
}

@_cdecl("vc_client_destroy")
public func vc_client_destroy(_ p: OpaquePointer?) {
    guard let p, let box = Registry.box(p) else { return }
    if box.client.onOwnThread {
        ClientLog.log(0, "vc_client_destroy called from inside a callback of the same client; ignored")
        return
    }
    let removed = Registry.lock.withLock { Registry.live.removeValue(forKey: UnsafeMutableRawPointer(p)) != nil }
    guard removed else { return }
    box.client.setEventHandler(nil)
    box.client.shutdown()
    Unmanaged<ClientBox>.fromOpaque(UnsafeMutableRawPointer(p)).release()
}

@_cdecl("vc_connect")
public func vc_connect(_ p: OpaquePointer?, _ params: UnsafePointer<vc_connect_params>?) -> Int32 {
    withClient(p) { b in
        guard let params, let host = params.pointee.host, let user = params.pointee.username else { return ERR_INVALID_ARG }
        let pw = params.pointee.password.map { String(cString: $0) }
        let fp = params.pointee.server_fingerprint.map { String(cString: $0) }
        let t = params.pointee.timeout_ms == 0 ? 5000 : Int(params.pointee.timeout_ms)
        try b.client.connect(host: String(cString: host), port: params.pointee.port, username: String(cString: user),
                             password: pw, pinnedFingerprint: fp, timeoutMs: t)
        return VC_OK_
    }
}

@_cdecl("vc_disconnect")
public func vc_disconnect(_ p: OpaquePointer?) -> Int32 {
    withClient(p) { b in try b.client.disconnect(); return VC_OK_ }
}

@_cdecl("vc_get_server_fingerprint")
public func vc_get_server_fingerprint(_ p: OpaquePointer?, _ buf: UnsafeMutablePointer<CChar>?, _ len: Int) -> Int32 {
    withClient(p) { b in
        guard let buf else { return ERR_INVALID_ARG }
        guard let fp = b.client.serverFingerprint else { return ERR_STATE }
        guard len >= fp.utf8.count + 1 else { return ERR_BUFFER_TOO_SMALL }
        copyString(fp, into: buf, capacity: len)
        return VC_OK_
    }
}

@_cdecl("vc_join_channel")
public func vc_join_channel(_ p: OpaquePointer?, _ name: UnsafePointer<CChar>?) -> Int32 {
    withClient(p) { b in
        guard let name else { return ERR_INVALID_ARG }
        try b.client.joinChannel(String(cString: name))
        return VC_OK_
    }
}

func toC(_ a: AudioConfig) -> vc_audio_config {
    vc_audio_config(codec: a.codec, mode: vc_channel_mode(rawValue: a.mode.rawValue), sample_rate: a.sampleRate,
                    bitrate_bps: a.bitrate, frame_us: a.frameMicros,
                    application: vc_opus_application(rawValue: a.application.rawValue), fec: a.fec ? 1 : 0,
                    expected_packet_loss: a.expectedPacketLoss, dtx: a.dtx ? 1 : 0, complexity: a.complexity,
                    dred: a.dred ? 1 : 0)
}

@_cdecl("vc_get_channel_audio")
public func vc_get_channel_audio(_ p: OpaquePointer?, _ out: UnsafeMutablePointer<vc_audio_config>?) -> Int32 {
    withClient(p) { b in
        guard let out else { return ERR_INVALID_ARG }
        guard let a = b.client.currentChannelAudio else { return ERR_STATE }
        out.pointee = toC(a)
        return VC_OK_
    }
}

// MARK: - streams

@_cdecl("vc_stream_start")
public func vc_stream_start(_ p: OpaquePointer?, _ d: UnsafePointer<vc_stream_desc>?, _ outID: UnsafeMutablePointer<UInt32>?) -> Int32 {
    withClient(p) { b in
        guard let d, let outID else { return ERR_INVALID_ARG }
        guard let kind = StreamKind(rawValue: d.pointee.kind.rawValue) else { return ERR_INVALID_ARG }
        outID.pointee = try b.client.startStream(kind: kind, externalFeed: d.pointee.external_feed != 0, channels: Int(d.pointee.channels),
                                                 device: d.pointee.device.map { String(cString: $0) })
        return VC_OK_
    }
}

@_cdecl("vc_stream_stop")
public func vc_stream_stop(_ p: OpaquePointer?, _ id: UInt32) -> Int32 {
    withClient(p) { b in try b.client.stopStream(id); return VC_OK_ }
}

@_cdecl("vc_stream_feed_pcm")
public func vc_stream_feed_pcm(_ p: OpaquePointer?, _ id: UInt32, _ pcm: UnsafePointer<Int16>?, _ frames: UInt32, _ channels: UInt32) -> Int32 {
    withClient(p) { b in
        guard let pcm, channels == 1 || channels == 2 else { return ERR_INVALID_ARG }
        if frames == 0 { return VC_OK_ }
        try b.client.feed(streamID: id, pcm: pcm, frames: Int(frames), channels: Int(channels))
        return VC_OK_
    }
}

// MARK: - receiving

@_cdecl("vc_set_remote_stream")
public func vc_set_remote_stream(_ p: OpaquePointer?, _ ssrc: UInt32, _ s: UnsafePointer<vc_remote_stream>?) -> Int32 {
    withClient(p) { b in
        guard let s else { return ERR_INVALID_ARG }
        try b.client.setRemote(ssrc: ssrc, RemoteSettings(gain: s.pointee.gain, muted: s.pointee.muted != 0,
                                                          noiseReduction: s.pointee.noise_reduction != 0))
        return VC_OK_
    }
}

@_cdecl("vc_get_remote_stream")
public func vc_get_remote_stream(_ p: OpaquePointer?, _ ssrc: UInt32, _ out: UnsafeMutablePointer<vc_remote_stream>?) -> Int32 {
    withClient(p) { b in
        guard let out else { return ERR_INVALID_ARG }
        let s = try b.client.remote(ssrc: ssrc)
        out.pointee = vc_remote_stream(gain: s.gain, muted: s.muted ? 1 : 0, noise_reduction: s.noiseReduction ? 1 : 0)
        return VC_OK_
    }
}

@_cdecl("vc_list_remote_streams")
public func vc_list_remote_streams(_ p: OpaquePointer?, _ out: UnsafeMutablePointer<vc_remote_stream_info>?, _ cap: Int,
                                   _ count: UnsafeMutablePointer<Int>?) -> Int32 {
    withClient(p) { b in
        guard let count, cap == 0 || out != nil else { return ERR_INVALID_ARG }
        let list = b.client.remoteStreams()
        count.pointee = list.count
        for (i, r) in list.prefix(cap).enumerated() {
            var info = vc_remote_stream_info()
            info.ssrc = r.ssrc; info.user_id = r.userID; info.stream_id = r.streamID
            info.kind = vc_stream_kind(rawValue: r.kind.rawValue)
            info.channels = UInt32(r.channels)
            info.talking = r.talking ? 1 : 0
            info.settings = vc_remote_stream(gain: r.settings.gain, muted: r.settings.muted ? 1 : 0,
                                             noise_reduction: r.settings.noiseReduction ? 1 : 0)
            copyStringTuple(r.username, into: &info.username)
            out![i] = info
        }
        return VC_OK_
    }
}

@_cdecl("vc_get_stream_stats")
public func vc_get_stream_stats(_ p: OpaquePointer?, _ ssrc: UInt32, _ out: UnsafeMutablePointer<vc_stream_stats>?) -> Int32 {
    withClient(p) { b in
        guard let out else { return ERR_INVALID_ARG }
        let s = try b.client.streamStats(ssrc: ssrc)
        out.pointee = vc_stream_stats(packets_received: s.jitter.packetsReceived, packets_lost: s.jitter.packetsLost,
                                      duplicates: s.jitter.duplicates, late: s.jitter.late, underruns: s.jitter.underruns,
                                      fec_recovered: s.jitter.fecRecovered, plc_frames: s.jitter.plcFrames,
                                      dred_recovered: s.jitter.dredRecovered, target_depth_ms: s.targetDepthMs,
                                      current_depth_ms: s.currentDepthMs, talking: s.talking ? 1 : 0)
        return VC_OK_
    }
}

@_cdecl("vc_get_connection_stats")
public func vc_get_connection_stats(_ p: OpaquePointer?, _ out: UnsafeMutablePointer<vc_connection_stats>?) -> Int32 {
    withClient(p) { b in
        guard let out else { return ERR_INVALID_ARG }
        let s = b.client.connectionStats()
        out.pointee = vc_connection_stats(media_rtt_ms: s.mediaRttMs, control_rtt_ms: s.controlRttMs, bytes_in: s.bytesIn,
                                          bytes_out: s.bytesOut, packets_in: s.packetsIn, packets_out: s.packetsOut,
                                          auth_failures: s.authFailures, voice_connected: s.voiceConnected ? 1 : 0)
        return VC_OK_
    }
}

// MARK: - output

@_cdecl("vc_set_external_playback")
public func vc_set_external_playback(_ p: OpaquePointer?, _ enabled: Int32) -> Int32 {
    withClient(p) { b in try b.client.setExternalPlayback(enabled != 0); return VC_OK_ }
}

@_cdecl("vc_set_mixed_output_sink")
public func vc_set_mixed_output_sink(_ p: OpaquePointer?, _ fn: vc_pcm_sink_fn?, _ user: UnsafeMutableRawPointer?) -> Int32 {
    withClient(p) { b in
        if b.client.onOwnThread { return ERR_STATE }
        if let fn {
            b.client.setSink { pcm, frames in fn(user, pcm, UInt32(frames), 2) }
        } else {
            b.client.setSink(nil)
        }
        return VC_OK_
    }
}

@_cdecl("vc_read_mixed_pcm")
public func vc_read_mixed_pcm(_ p: OpaquePointer?, _ out: UnsafeMutablePointer<Int16>?, _ frames: UInt32) -> Int32 {
    withClient(p) { b in
        guard let out else { return ERR_INVALID_ARG }
        try b.client.readMixed(into: out, frames: Int(frames))
        return VC_OK_
    }
}

// MARK: - events

func toC(_ e: ClientEvent) -> vc_event {
    var c = vc_event()
    c.type = vc_event_type(rawValue: UInt32(e.type.rawValue))
    c.code = e.code
    c.user_id = e.userID; c.ssrc = e.ssrc; c.stream_id = e.streamID; c.channel_id = e.channelID
    c.kind = e.kind; c.channels = e.channels
    c.muted = e.muted ? 1 : 0; c.deafened = e.deafened ? 1 : 0; c.hold = e.hold ? 1 : 0
    copyStringTuple(e.text, into: &c.text)
    return c
}

@_cdecl("vc_poll_event")
public func vc_poll_event(_ p: OpaquePointer?, _ out: UnsafeMutablePointer<vc_event>?, _ timeoutMs: Int32) -> Int32 {
    withClient(p) { b in
        guard let out else { return ERR_INVALID_ARG }
        let t = (timeoutMs != 0 && b.client.onOwnThread) ? 0 : Int(timeoutMs)
        guard let e = b.client.pollEvent(timeoutMs: t) else { return 0 }
        out.pointee = toC(e)
        return 1
    }
}

@_cdecl("vc_set_event_callback")
public func vc_set_event_callback(_ p: OpaquePointer?, _ fn: vc_event_fn?, _ user: UnsafeMutableRawPointer?) -> Int32 {
    withClient(p) { b in
        if let fn {
            b.client.setEventHandler { e in
                var c = toC(e)
                fn(user, &c)
            }
        } else {
            b.client.setEventHandler(nil)
        }
        return VC_OK_
    }
}

@_cdecl("vc_last_error")
public func vc_last_error(_ p: OpaquePointer?, _ buf: UnsafeMutablePointer<CChar>?, _ len: Int) -> Int32 {
    withClient(p) { b in
        guard let buf, len > 0 else { return ERR_INVALID_ARG }
        copyString(b.client.lastError, into: buf, capacity: len)
        return VC_OK_
    }
}

// MARK: - devices and input gate

@_cdecl("vc_set_alsa_config")
public func vc_set_alsa_config(_ text: UnsafePointer<CChar>?) -> Int32 {
    do { try AlsaConfig.set(text.map { String(cString: $0) }) } catch {
        ClientLog.log(0, "vc_set_alsa_config: \(error)")
        return ERR_INVALID_ARG
    }
    return VC_OK_
}

@_cdecl("vc_list_devices")
public func vc_list_devices(_ kind: vc_device_kind, _ out: UnsafeMutablePointer<vc_device_info>?, _ cap: Int,
                            _ count: UnsafeMutablePointer<Int>?) -> Int32 {
    guard let count, cap == 0 || out != nil else { return ERR_INVALID_ARG }
    let dir: DeviceDirection
    switch kind.rawValue {
    case 0: dir = .capture
    case 1: dir = .playback
    default: return ERR_INVALID_ARG
    }
    let list = listDevices(dir)
    count.pointee = list.count
    for (i, d) in list.prefix(cap).enumerated() {
        var info = vc_device_info()
        copyStringTuple(d.name, into: &info.name)
        copyStringTuple(d.description, into: &info.description)
        out![i] = info
    }
    return VC_OK_
}

@_cdecl("vc_set_capture_channels")
public func vc_set_capture_channels(_ p: OpaquePointer?, _ id: UInt32, _ channels: UInt32) -> Int32 {
    withClient(p) { b in try b.client.setCaptureChannels(streamID: id, channels: Int(channels)); return VC_OK_ }
}

@_cdecl("vc_set_input_mode")
public func vc_set_input_mode(_ p: OpaquePointer?, _ mode: vc_input_mode) -> Int32 {
    withClient(p) { b in
        guard let m = InputMode(rawValue: Int32(bitPattern: mode.rawValue)) else { return ERR_INVALID_ARG }
        b.client.setInputMode(m)
        return VC_OK_
    }
}

@_cdecl("vc_set_vad")
public func vc_set_vad(_ p: OpaquePointer?, _ threshold: Float, _ hangMs: UInt32) -> Int32 {
    withClient(p) { b in try b.client.setVAD(threshold: threshold, hangMs: hangMs); return VC_OK_ }
}

@_cdecl("vc_set_push_to_talk")
public func vc_set_push_to_talk(_ p: OpaquePointer?, _ active: Int32) -> Int32 {
    withClient(p) { b in b.client.setPushToTalk(active != 0); return VC_OK_ }
}

@_cdecl("vc_audio_suspend")
public func vc_audio_suspend(_ p: OpaquePointer?) -> Int32 {
    withClient(p) { b in try b.client.suspendAudio(); return VC_OK_ }
}

@_cdecl("vc_audio_restart")
public func vc_audio_restart(_ p: OpaquePointer?) -> Int32 {
    withClient(p) { b in try b.client.restartAudio(); return VC_OK_ }
}

// MARK: - send processing

@_cdecl("vc_send_processing_default")
public func vc_send_processing_default() -> vc_send_processing {
    vc_send_processing(noise_suppression: 0, agc: 0, echo_cancellation: 0, agc_level: 0.125)
}

@_cdecl("vc_set_send_processing")
public func vc_set_send_processing(_ p: OpaquePointer?, _ id: UInt32, _ sp: UnsafePointer<vc_send_processing>?) -> Int32 {
    withClient(p) { b in
        guard let sp else { return ERR_INVALID_ARG }
        var s = SendProcessing(noiseSuppression: sp.pointee.noise_suppression != 0, agc: sp.pointee.agc != 0,
                               echoCancellation: sp.pointee.echo_cancellation != 0)
        s.agcLevel = sp.pointee.agc_level
        try b.client.setSendProcessing(streamID: id, s)
        return VC_OK_
    }
}

@_cdecl("vc_get_send_processing")
public func vc_get_send_processing(_ p: OpaquePointer?, _ id: UInt32, _ out: UnsafeMutablePointer<vc_send_processing>?) -> Int32 {
    withClient(p) { b in
        guard let out else { return ERR_INVALID_ARG }
        let s = try b.client.sendProcessing(streamID: id)
        out.pointee = vc_send_processing(noise_suppression: s.noiseSuppression ? 1 : 0, agc: s.agc ? 1 : 0,
                                         echo_cancellation: s.echoCancellation ? 1 : 0, agc_level: s.agcLevel)
        return VC_OK_
    }
}
