// The C ABI of libvoicecat: every `vc_*` function of include/voicecat.h, as
// @_cdecl exports over VoiceCatClient. This file only checks arguments, converts
// between C and Swift types and maps errors to VC_ERR_* codes.
import Glibc
import Synchronization
import VoiceCatABI
import VoiceCatAudio
import VoiceCatClient
import VoiceCatDevices
import VoiceCatProtocol
import VoiceCatSystem

// MARK: - handles

/// Per-handle state: the engine.
final class ClientBox {
    let client: VoiceClient
    init(_ c: VoiceClient) { client = c }
}

/// Live handles, validated without a process-wide lock. A handle is a word naming
/// an entry of a fixed table (low 16 bits: index + 1) and the entry's generation
/// (above; odd while live), so NULL, a destroyed handle or garbage is refused
/// without being dereferenced. A call registers itself on the entry (`users`) before
/// it checks the generation; destroy retires the generation, makes blocking calls
/// return (VoiceClient.shutdown) and waits for the calls in flight before it frees
/// the client. Only create and destroy take `allocLock`.
final class HandleEntry: @unchecked Sendable {
    let generation = Atomic<UInt32>(0)
    let users = Atomic<Int>(0)
    /// Written only while no call can read it (free, or retired with no users).
    var box: ClientBox?
    /// Guarded by Registry.allocLock.
    var allocated = false
}

enum Registry {
    static let capacity = 4096
    static let entries: [HandleEntry] = (0..<capacity).map { _ in HandleEntry() }
    static let allocLock = Lock()

    static func decode(_ p: OpaquePointer?) -> (index: Int, generation: UInt32)? {
        guard let p else { return nil }
        let v = UInt(bitPattern: p)
        let index = Int(v & 0xffff) - 1
        let gen = UInt32(truncatingIfNeeded: v >> 16)
        guard index >= 0, index < capacity, gen & 1 == 1, v >> 48 == 0 else { return nil }
        return (index, gen)
    }

    /// Registers a call on a live handle; nil for anything else. Pair with `leave`.
    static func enter(_ p: OpaquePointer?) -> (ClientBox, HandleEntry)? {
        guard let (index, gen) = decode(p) else { return nil }
        let e = entries[index]
        e.users.wrappingAdd(1, ordering: .sequentiallyConsistent)
        guard e.generation.load(ordering: .sequentiallyConsistent) == gen, let box = e.box else {
            e.users.wrappingSubtract(1, ordering: .sequentiallyConsistent)
            return nil
        }
        return (box, e)
    }

    static func leave(_ e: HandleEntry) { e.users.wrappingSubtract(1, ordering: .sequentiallyConsistent) }

    static func add(_ box: ClientBox) -> OpaquePointer? {
        allocLock.withLock {
            guard let index = entries.indices.first(where: { !entries[$0].allocated }) else { return nil }
            let e = entries[index]
            e.allocated = true
            e.box = box
            let gen = e.generation.load(ordering: .relaxed) &+ 1   // even (free) → odd (live)
            e.generation.store(gen, ordering: .sequentiallyConsistent)
            return OpaquePointer(bitPattern: UInt(gen) << 16 | UInt(index + 1))
        }
    }

    /// Retires a live handle (later calls are refused); false when it already was.
    static func retire(_ p: OpaquePointer?) -> HandleEntry? {
        guard let (index, gen) = decode(p) else { return nil }
        let e = entries[index]
        return allocLock.withLock {
            guard e.generation.load(ordering: .relaxed) == gen else { return nil }
            e.generation.store(gen &+ 1, ordering: .sequentiallyConsistent)
            return e
        }
    }

    /// Frees a retired entry once no call is in flight on it.
    static func free(_ e: HandleEntry) {
        var spins = 0
        while e.users.load(ordering: .sequentiallyConsistent) != 0 {
            spins += 1
            if spins < 100 { sched_yield() } else { sleepMilliseconds(1) }
        }
        let box = e.box
        e.box = nil
        allocLock.withLock { e.allocated = false }
        _ = box
    }
}

/// A failed argument check: the text names the function and the argument.
func invalid(_ text: String) -> ClientError { .invalidArgument(text) }

/// Runs `body` with the live client for `p`. A thrown ClientError becomes its code and
/// the client's last error (every failing call on a client records why it failed).
@inline(__always)
func withClient(_ p: OpaquePointer?, _ body: (ClientBox) throws -> Int32) -> Int32 {
    guard let (b, entry) = Registry.enter(p) else { return VC_ERR_INVALID_ARG }
    defer { Registry.leave(entry) }
    do { return try body(b) } catch let e as ClientError {
        b.client.recordError(e.description)
        return e.code
    } catch {
        b.client.recordError("\(error)")
        return VC_ERR_PROTOCOL
    }
}

/// Why the functions that take no client failed: vc_last_error(NULL, ...).
let processErrors = ErrorRecord()

/// Runs a function that takes no client (`name` prefixes the reason). A thrown
/// ClientError becomes its code and the calling thread's reason in `processErrors`,
/// logged as a warning (these were only logged before vc_last_error(NULL) said them).
func withoutClient(_ name: String, _ body: () throws -> Int32) -> Int32 {
    do { return try body() } catch {
        let e = error as? ClientError ?? .noMemory("\(error)")
        processErrors.record("\(name): \(e.description)")
        ClientLog.log(1, "\(name): \(e.description)")
        return e.code
    }
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
public func vc_version_number() -> UInt32 {
    UInt32(VC_VERSION_MAJOR) << 16 | UInt32(VC_VERSION_MINOR) << 8 | UInt32(VC_VERSION_PATCH)
}

/// "major.minor.patch" of the header the library was built with, made once.
let versionCString = makeStaticCString("\(VC_VERSION_MAJOR).\(VC_VERSION_MINOR).\(VC_VERSION_PATCH)")

@_cdecl("vc_version_string")
public func vc_version_string() -> UnsafePointer<CChar> { versionCString }

/// The one table of result texts (the codes are the header's).
let errorTexts: [Int32: StaticString] = [
    VC_OK: "success",
    VC_ERR_INVALID_ARG: "invalid argument",
    VC_ERR_STATE: "not allowed in the current state",
    VC_ERR_NOT_FOUND: "not found",
    VC_ERR_NETWORK: "network error",
    VC_ERR_TIMEOUT: "timed out",
    VC_ERR_PROTOCOL: "protocol error",
    VC_ERR_VERSION: "protocol version mismatch",
    VC_ERR_AUTH: "authentication failed",
    VC_ERR_REJECTED: "rejected by the server",
    VC_ERR_DEVICE: "audio device error",
    VC_ERR_CODEC: "codec error",
    VC_ERR_NO_MEMORY: "out of memory or capacity",
    VC_ERR_UNSUPPORTED: "not supported",
    VC_ERR_BUFFER_TOO_SMALL: "buffer too small",
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
    case "vc_send_stats": return MemoryLayout<vc_send_stats>.size
    case "vc_playback_stats": return MemoryLayout<vc_playback_stats>.size
    case "vc_event": return MemoryLayout<vc_event>.size
    case "vc_device_info": return MemoryLayout<vc_device_info>.size
    case "vc_send_processing": return MemoryLayout<vc_send_processing>.size
    case "vc_user_info": return MemoryLayout<vc_user_info>.size
    case "vc_user_stream": return MemoryLayout<vc_user_stream>.size
    case "vc_channel_info": return MemoryLayout<vc_channel_info>.size
    default: return 0
    }
}

/// The header's names of the event types, made once (static C strings).
let eventTypeNames: [UInt32: UnsafePointer<CChar>] = {
    let names: [(vc_event_type, String)] = [
        (VC_EVENT_NONE, "VC_EVENT_NONE"), (VC_EVENT_CONNECTED, "VC_EVENT_CONNECTED"),
        (VC_EVENT_DISCONNECTED, "VC_EVENT_DISCONNECTED"), (VC_EVENT_CHANNEL_JOINED, "VC_EVENT_CHANNEL_JOINED"),
        (VC_EVENT_USER_JOINED, "VC_EVENT_USER_JOINED"), (VC_EVENT_USER_LEFT, "VC_EVENT_USER_LEFT"),
        (VC_EVENT_REMOTE_STREAM_ADDED, "VC_EVENT_REMOTE_STREAM_ADDED"),
        (VC_EVENT_REMOTE_STREAM_REMOVED, "VC_EVENT_REMOTE_STREAM_REMOVED"), (VC_EVENT_TALK_START, "VC_EVENT_TALK_START"),
        (VC_EVENT_TALK_STOP, "VC_EVENT_TALK_STOP"), (VC_EVENT_VOICE_DISCONNECTED, "VC_EVENT_VOICE_DISCONNECTED"),
        (VC_EVENT_VOICE_RECONNECTED, "VC_EVENT_VOICE_RECONNECTED"), (VC_EVENT_SERVER_MUTE_STATE, "VC_EVENT_SERVER_MUTE_STATE"),
        (VC_EVENT_STREAM_STATE_UPDATE, "VC_EVENT_STREAM_STATE_UPDATE"), (VC_EVENT_ERROR, "VC_EVENT_ERROR"),
        (VC_EVENT_DEVICE_RESTORED, "VC_EVENT_DEVICE_RESTORED"), (VC_EVENT_RECONNECTING, "VC_EVENT_RECONNECTING"),
        (VC_EVENT_RECONNECTED, "VC_EVENT_RECONNECTED"), (VC_EVENT_GATE_OPENED, "VC_EVENT_GATE_OPENED"),
        (VC_EVENT_GATE_CLOSED, "VC_EVENT_GATE_CLOSED"), (VC_EVENT_USER_CONNECTED, "VC_EVENT_USER_CONNECTED"),
        (VC_EVENT_USER_UPDATED, "VC_EVENT_USER_UPDATED"), (VC_EVENT_USER_DISCONNECTED, "VC_EVENT_USER_DISCONNECTED"),
        (VC_EVENT_CHANNELS_CHANGED, "VC_EVENT_CHANNELS_CHANGED"), (VC_EVENT_PROTECTION_CHANGED, "VC_EVENT_PROTECTION_CHANGED"),
        (VC_EVENT_EVENTS_DROPPED, "VC_EVENT_EVENTS_DROPPED"),
    ]
    var table: [UInt32: UnsafePointer<CChar>] = [:]
    for (t, name) in names { table[t.rawValue] = makeStaticCString(name) }
    return table
}()
let unknownEventTypeName = makeStaticCString("VC_EVENT_UNKNOWN")

/// A C string that lives as long as the process.
func makeStaticCString(_ s: String) -> UnsafePointer<CChar> {
    let p = UnsafeMutablePointer<CChar>.allocate(capacity: s.utf8.count + 1)
    copyString(s, into: p, capacity: s.utf8.count + 1)
    return UnsafePointer(p)
}

@_cdecl("vc_event_type_name")
public func vc_event_type_name(_ type: vc_event_type) -> UnsafePointer<CChar> {
    eventTypeNames[type.rawValue] ?? unknownEventTypeName
}

@_cdecl("vc_set_log_callback")
public func vc_set_log_callback(_ fn: vc_log_fn?, _ user: UnsafeMutableRawPointer?) {
    guard let fn else { ClientLog.setSink(nil); return }
    ClientLog.setSink(ClientLog.Sink { level, message in message.withCString { fn(user, level, $0) } })
}

// MARK: - lifecycle

@_cdecl("vc_client_config_default")
public func vc_client_config_default() -> vc_client_config {
    let d = ClientConfig()
    return vc_client_config(client_name: nil, keepalive_ms: d.keepaliveMs, max_remote_streams: UInt32(d.maxRemoteStreams),
                            event_queue_size: UInt32(d.eventQueueSize), external_playback: d.externalPlayback ? 1 : 0,
                            playback_device: nil, talk_hangover_ms: d.talkHangoverMs, known_servers_path: nil,
                            auto_reconnect: d.autoReconnect ? 1 : 0, resampler_quality: Int32(d.resamplerQuality),
                            loss_report_ms: d.lossReportMs)
}

@_cdecl("vc_connect_params_default")
public func vc_connect_params_default() -> vc_connect_params {
    vc_connect_params()
}

@_cdecl("vc_stream_desc_default")
public func vc_stream_desc_default() -> vc_stream_desc {
    vc_stream_desc(kind: VC_STREAM_MIC, external_feed: 1, device: nil, channels: 1, max_queue_ms: 0, sample_rate: 0)
}

@_cdecl("vc_client_create")
public func vc_client_create(_ cfg: UnsafePointer<vc_client_config>?, _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    withoutClient("vc_client_create") {
        guard let out else { throw invalid("out is NULL") }
        out.pointee = nil
        var c = ClientConfig()
        if let cfg {
            if let n = cfg.pointee.client_name {
                guard let name = String(validatingCString: n) else { throw invalid("client_name is not valid UTF-8") }
                c.clientName = name
            }
            c.keepaliveMs = cfg.pointee.keepalive_ms
            c.maxRemoteStreams = Int(cfg.pointee.max_remote_streams)
            c.eventQueueSize = Int(cfg.pointee.event_queue_size)
            c.externalPlayback = cfg.pointee.external_playback != 0
            // NULL plays on "default"; "" is no name.
            if let d = cfg.pointee.playback_device { c.playbackDevice = try nonEmptyString(d, nil, "playback_device") }
            c.talkHangoverMs = cfg.pointee.talk_hangover_ms
            if let k = cfg.pointee.known_servers_path {
                guard let path = String(validatingCString: k) else { throw invalid("known_servers_path is not valid UTF-8") }
                c.knownServersPath = path
            }
            c.autoReconnect = cfg.pointee.auto_reconnect != 0
            c.resamplerQuality = Int(cfg.pointee.resampler_quality)
            c.lossReportMs = cfg.pointee.loss_report_ms
            guard c.lossReportMs == 0 || (100...60_000).contains(c.lossReportMs) else {
                throw invalid("loss_report_ms must be 0 or 100..60000 (got \(c.lossReportMs))")
            }
        }
        let client = try VoiceClient(config: c)
        guard let handle = Registry.add(ClientBox(client)) else {
            throw ClientError.noMemory("\(Registry.capacity) clients are alive in this process")
        }
        out.pointee = handle
        return VC_OK
    }
}

@_cdecl("vc_client_destroy")
public func vc_client_destroy(_ p: OpaquePointer?) {
    guard let (box, entry) = Registry.enter(p) else { return }
    let inside = box.client.destroyWouldWaitForCaller
    if inside {
        // Logged (dropped when this is the log callback) and kept for vc_last_error.
        let why = box.client.onOwnThread
            ? "vc_client_destroy called from inside a callback of the same client; ignored"
            : "vc_client_destroy called from inside a per-speaker sink (of another client); ignored"
        box.client.recordError(why)
        ClientLog.log(0, why)
    }
    Registry.leave(entry)
    if inside { return }
    guard let retired = Registry.retire(p) else { return }
    box.client.clearEventHandlerForDestroy()   // not called for the DISCONNECTED the teardown raises
    box.client.shutdown()
    Registry.free(retired)
}

@_cdecl("vc_connect")
public func vc_connect(_ p: OpaquePointer?, _ params: UnsafePointer<vc_connect_params>?) -> Int32 {
    withClient(p) { b in
        guard let params else { throw invalid("vc_connect: params is NULL") }
        guard let host = params.pointee.host else { throw invalid("vc_connect: params->host is NULL") }
        guard let userPtr = params.pointee.username else { throw invalid("vc_connect: params->username is NULL") }
        guard let user = String(validatingCString: userPtr) else { throw invalid("vc_connect: params->username is not valid UTF-8") }
        let pw = params.pointee.password.map { String(cString: $0) }
        let fp = params.pointee.server_fingerprint.map { String(cString: $0) }
        let t = params.pointee.timeout_ms == 0 ? 5000 : Int(params.pointee.timeout_ms)
        try b.client.connect(host: String(cString: host), port: params.pointee.port, username: user,
                             password: pw, pinnedFingerprint: fp, allowUnverified: params.pointee.allow_unverified != 0, timeoutMs: t)
        return VC_OK
    }
}

@_cdecl("vc_disconnect")
public func vc_disconnect(_ p: OpaquePointer?) -> Int32 {
    withClient(p) { b in try b.client.disconnect(); return VC_OK }
}

@_cdecl("vc_get_server_fingerprint")
public func vc_get_server_fingerprint(_ p: OpaquePointer?, _ buf: UnsafeMutablePointer<CChar>?, _ len: Int) -> Int32 {
    withClient(p) { b in
        guard let buf else { throw invalid("vc_get_server_fingerprint: buf is NULL") }
        guard let fp = b.client.serverFingerprint else { throw ClientError.state("no handshake has happened yet") }
        guard len >= fp.utf8.count + 1 else {
            b.client.recordError("vc_get_server_fingerprint: the buffer needs \(fp.utf8.count + 1) bytes, got \(len)")
            return VC_ERR_BUFFER_TOO_SMALL
        }
        copyString(fp, into: buf, capacity: len)
        return VC_OK
    }
}

@_cdecl("vc_join_channel")
public func vc_join_channel(_ p: OpaquePointer?, _ name: UnsafePointer<CChar>?) -> Int32 {
    withClient(p) { b in
        guard let name else { throw invalid("vc_join_channel: name is NULL") }
        guard let n = String(validatingCString: name) else { throw invalid("vc_join_channel: name is not valid UTF-8") }
        try b.client.joinChannel(n)
        return VC_OK
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
        guard let out else { throw invalid("vc_get_channel_audio: out is NULL") }
        guard let a = b.client.currentChannelAudio else { throw ClientError.state("not in a channel") }
        out.pointee = toC(a)
        return VC_OK
    }
}

// MARK: - streams

@_cdecl("vc_stream_start")
public func vc_stream_start(_ p: OpaquePointer?, _ d: UnsafePointer<vc_stream_desc>?, _ outID: UnsafeMutablePointer<UInt32>?) -> Int32 {
    withClient(p) { b in
        guard let d else { throw invalid("vc_stream_start: desc is NULL") }
        guard let outID else { throw invalid("vc_stream_start: out_stream_id is NULL") }
        guard let kind = StreamKind(rawValue: d.pointee.kind.rawValue) else {
            throw invalid("vc_stream_start: unknown stream kind \(Int32(bitPattern: d.pointee.kind.rawValue)) (VC_STREAM_MIC, VC_STREAM_SCREEN_AUDIO or VC_STREAM_AUX_DEVICE)")
        }
        guard d.pointee.external_feed == 0 || d.pointee.external_feed == 1 else {
            throw invalid("vc_stream_start: external_feed must be 0 (a capture device) or 1 (the host feeds) (got \(d.pointee.external_feed))")
        }
        // A capture device's name, as vc_set_capture_device takes it (a fed stream has none).
        var device: String? = nil
        if d.pointee.external_feed == 0, let p = d.pointee.device { device = try nonEmptyString(p, "vc_stream_start", "device") }
        outID.pointee = try b.client.startStream(kind: kind, externalFeed: d.pointee.external_feed == 1, channels: Int(d.pointee.channels),
                                                 device: device, maxQueueMs: Int(d.pointee.max_queue_ms),
                                                 sampleRate: Int(d.pointee.sample_rate))
        return VC_OK
    }
}

@_cdecl("vc_stream_queued_ms")
public func vc_stream_queued_ms(_ p: OpaquePointer?, _ id: UInt32, _ out: UnsafeMutablePointer<UInt32>?) -> Int32 {
    withClient(p) { b in
        guard let out else { throw invalid("vc_stream_queued_ms: out_ms is NULL") }
        out.pointee = try b.client.queuedMs(streamID: id)
        return VC_OK
    }
}

@_cdecl("vc_stream_drain")
public func vc_stream_drain(_ p: OpaquePointer?, _ id: UInt32, _ timeoutMs: Int32) -> Int32 {
    withClient(p) { b in
        try b.client.drain(streamID: id, timeoutMs: timeoutMs < 0 ? Int.max / 2 : Int(timeoutMs))
        return VC_OK
    }
}

@_cdecl("vc_stream_flush")
public func vc_stream_flush(_ p: OpaquePointer?, _ id: UInt32) -> Int32 {
    withClient(p) { b in try b.client.flush(streamID: id); return VC_OK }
}

@_cdecl("vc_stream_stop")
public func vc_stream_stop(_ p: OpaquePointer?, _ id: UInt32) -> Int32 {
    withClient(p) { b in try b.client.stopStream(id); return VC_OK }
}

/// The checks both feeds share: PCM present (NULL only for 0 frames, as a read of 0
/// frames may pass NULL), 1 or 2 channels. A feed of 0 frames still goes to the client,
/// which checks the stream and feeds nothing (helper-95: it returned VC_OK for any id).
func feedArguments<T>(_ pcm: UnsafePointer<T>?, _ frames: UInt32, _ channels: UInt32, _ function: String) throws {
    guard pcm != nil || frames == 0 else { throw invalid("\(function): pcm is NULL") }
    guard channels == 1 || channels == 2 else { throw invalid("\(function): channels must be 1 or 2 (got \(channels))") }
}

@_cdecl("vc_stream_feed_pcm")
public func vc_stream_feed_pcm(_ p: OpaquePointer?, _ id: UInt32, _ pcm: UnsafePointer<Int16>?, _ frames: UInt32, _ channels: UInt32) -> Int32 {
    withClient(p) { b in
        try feedArguments(pcm, frames, channels, "vc_stream_feed_pcm")
        var none: Int16 = 0   // (0 frames with NULL: nothing is read)
        try withUnsafePointer(to: &none) { try b.client.feed(streamID: id, pcm: pcm ?? $0, frames: Int(frames), channels: Int(channels)) }
        return VC_OK
    }
}

@_cdecl("vc_stream_feed_pcm_f32")
public func vc_stream_feed_pcm_f32(_ p: OpaquePointer?, _ id: UInt32, _ pcm: UnsafePointer<Float>?, _ frames: UInt32,
                                   _ channels: UInt32) -> Int32 {
    withClient(p) { b in
        try feedArguments(pcm, frames, channels, "vc_stream_feed_pcm_f32")
        var none: Float = 0   // (0 frames with NULL: nothing is read)
        try withUnsafePointer(to: &none) { try b.client.feedFloat(streamID: id, pcm: pcm ?? $0, frames: Int(frames), channels: Int(channels)) }
        return VC_OK
    }
}

@_cdecl("vc_get_input_level")
public func vc_get_input_level(_ p: OpaquePointer?, _ id: UInt32, _ rms: UnsafeMutablePointer<Float>?,
                               _ peak: UnsafeMutablePointer<Float>?) -> Int32 {
    withClient(p) { b in
        guard rms != nil || peak != nil else { throw invalid("vc_get_input_level: rms_dbfs and peak_dbfs are both NULL") }
        let l = try b.client.inputLevel(streamID: id)
        rms?.pointee = l.rmsDBFS
        peak?.pointee = l.peakDBFS
        return VC_OK
    }
}

// MARK: - receiving

@_cdecl("vc_set_remote_stream")
public func vc_set_remote_stream(_ p: OpaquePointer?, _ ssrc: UInt32, _ s: UnsafePointer<vc_remote_stream>?) -> Int32 {
    withClient(p) { b in
        guard let s else { throw invalid("vc_set_remote_stream: settings is NULL") }
        try b.client.setRemote(ssrc: ssrc, RemoteSettings(gain: s.pointee.gain, muted: s.pointee.muted != 0,
                                                          noiseReduction: s.pointee.noise_reduction != 0))
        return VC_OK
    }
}

@_cdecl("vc_get_remote_stream")
public func vc_get_remote_stream(_ p: OpaquePointer?, _ ssrc: UInt32, _ out: UnsafeMutablePointer<vc_remote_stream>?) -> Int32 {
    withClient(p) { b in
        guard let out else { throw invalid("vc_get_remote_stream: out is NULL") }
        let s = try b.client.remote(ssrc: ssrc)
        out.pointee = vc_remote_stream(gain: s.gain, muted: s.muted ? 1 : 0, noise_reduction: s.noiseReduction ? 1 : 0)
        return VC_OK
    }
}

@_cdecl("vc_list_remote_streams")
public func vc_list_remote_streams(_ p: OpaquePointer?, _ out: UnsafeMutablePointer<vc_remote_stream_info>?, _ cap: Int,
                                   _ count: UnsafeMutablePointer<Int>?) -> Int32 {
    withClient(p) { b in
        guard let count else { throw invalid("vc_list_remote_streams: count is NULL") }
        guard cap == 0 || out != nil else { throw invalid("vc_list_remote_streams: out is NULL with cap \(cap)") }
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
            info.level_rms_dbfs = r.levelRMSDBFS
            info.level_peak_dbfs = r.levelPeakDBFS
            out![i] = info
        }
        return VC_OK
    }
}

@_cdecl("vc_set_jitter_bounds")
public func vc_set_jitter_bounds(_ p: OpaquePointer?, _ ssrc: UInt32, _ minMs: UInt32, _ maxMs: UInt32) -> Int32 {
    withClient(p) { b in
        guard minMs <= JitterBounds.limitMs, maxMs <= JitterBounds.limitMs else {
            throw invalid("vc_set_jitter_bounds: bounds must be at most \(JitterBounds.limitMs) ms (got min_ms \(minMs), max_ms \(maxMs))")
        }
        guard maxMs == 0 || minMs <= maxMs else { throw invalid("vc_set_jitter_bounds: min_ms \(minMs) is above max_ms \(maxMs)") }
        try b.client.setJitterBounds(ssrc: ssrc, JitterBounds(minMs: minMs, maxMs: maxMs))
        return VC_OK
    }
}

@_cdecl("vc_get_stream_stats")
public func vc_get_stream_stats(_ p: OpaquePointer?, _ ssrc: UInt32, _ out: UnsafeMutablePointer<vc_stream_stats>?) -> Int32 {
    withClient(p) { b in
        guard let out else { throw invalid("vc_get_stream_stats: out is NULL") }
        let s = try b.client.streamStats(ssrc: ssrc)
        out.pointee = vc_stream_stats(packets_received: s.jitter.packetsReceived, packets_lost: s.jitter.packetsLost,
                                      duplicates: s.jitter.duplicates, late: s.jitter.late, underruns: s.jitter.underruns,
                                      fec_recovered: s.jitter.fecRecovered, plc_frames: s.jitter.plcFrames,
                                      dred_recovered: s.jitter.dredRecovered, target_depth_ms: s.targetDepthMs,
                                      current_depth_ms: s.currentDepthMs, talking: s.talking ? 1 : 0)
        return VC_OK
    }
}

@_cdecl("vc_get_connection_stats")
public func vc_get_connection_stats(_ p: OpaquePointer?, _ out: UnsafeMutablePointer<vc_connection_stats>?) -> Int32 {
    withClient(p) { b in
        guard let out else { throw invalid("vc_get_connection_stats: out is NULL") }
        let s = b.client.connectionStats()
        out.pointee = vc_connection_stats(media_rtt_ms: s.mediaRttMs, control_rtt_ms: s.controlRttMs, bytes_in: s.bytesIn,
                                          bytes_out: s.bytesOut, packets_in: s.packetsIn, packets_out: s.packetsOut,
                                          auth_failures: s.authFailures, voice_connected: s.voiceConnected ? 1 : 0,
                                          keepalives_sent: s.keepalivesSent, keepalives_lost: s.keepalivesLost)
        return VC_OK
    }
}

// MARK: - users, channels and administration

/// Checks the out / cap / count triple of a vc_list_* call.
func checkList<T>(_ fn: String, _ out: UnsafeMutablePointer<T>?, _ cap: Int, _ count: UnsafeMutablePointer<Int>?) throws
    -> UnsafeMutablePointer<Int> {
    guard let count else { throw invalid("\(fn): count is NULL") }
    guard cap == 0 || out != nil else { throw invalid("\(fn): out is NULL with cap \(cap)") }
    return count
}

/// A C int flag that must be 0 or 1.
func flag(_ fn: String, _ name: String, _ v: Int32) throws -> Bool {
    guard v == 0 || v == 1 else { throw invalid("\(fn): \(name) must be 0 or 1 (got \(v))") }
    return v == 1
}

@_cdecl("vc_list_users")
public func vc_list_users(_ p: OpaquePointer?, _ out: UnsafeMutablePointer<vc_user_info>?, _ cap: Int,
                          _ count: UnsafeMutablePointer<Int>?) -> Int32 {
    withClient(p) { b in
        let count = try checkList("vc_list_users", out, cap, count)
        let list = try b.client.users()
        count.pointee = list.count
        for (i, u) in list.prefix(cap).enumerated() {
            var info = vc_user_info()
            info.user_id = u.userID; info.channel_id = u.channelID
            info.server_muted = u.serverMuted ? 1 : 0; info.server_deafened = u.serverDeafened ? 1 : 0
            info.stream_count = UInt32(u.streams.count)
            info.stream_kinds = u.streams.reduce(0) { $0 | (1 << $1.kind.rawValue) }
            info.is_self = u.isSelf ? 1 : 0
            copyStringTuple(u.username, into: &info.username)
            out![i] = info
        }
        return VC_OK
    }
}

@_cdecl("vc_list_user_streams")
public func vc_list_user_streams(_ p: OpaquePointer?, _ userID: UInt32, _ out: UnsafeMutablePointer<vc_user_stream>?, _ cap: Int,
                                 _ count: UnsafeMutablePointer<Int>?) -> Int32 {
    withClient(p) { b in
        let count = try checkList("vc_list_user_streams", out, cap, count)
        let users = try b.client.users()
        if userID != 0 && !users.contains(where: { $0.userID == userID }) {
            throw ClientError.notFound("vc_list_user_streams: no user \(userID) on the server")
        }
        let list = users.filter { userID == 0 || $0.userID == userID }.flatMap { u in u.streams.map { (u.userID, $0) } }
        count.pointee = list.count
        for (i, (uid, st)) in list.prefix(cap).enumerated() {
            out![i] = vc_user_stream(user_id: uid, stream_id: st.streamID, ssrc: st.ssrc, kind: vc_stream_kind(rawValue: st.kind.rawValue),
                                     muted: st.muted ? 1 : 0, hold: st.hold ? 1 : 0)
        }
        return VC_OK
    }
}

@_cdecl("vc_list_channels")
public func vc_list_channels(_ p: OpaquePointer?, _ out: UnsafeMutablePointer<vc_channel_info>?, _ cap: Int,
                             _ count: UnsafeMutablePointer<Int>?) -> Int32 {
    withClient(p) { b in
        let count = try checkList("vc_list_channels", out, cap, count)
        let list = try b.client.channels()
        count.pointee = list.count
        for (i, ch) in list.prefix(cap).enumerated() {
            var info = vc_channel_info()
            info.channel_id = ch.id
            info.member_count = UInt32(ch.memberCount)
            info.is_current = ch.isCurrent ? 1 : 0
            info.audio = toC(ch.audio)
            copyStringTuple(ch.name, into: &info.name)
            out![i] = info
        }
        return VC_OK
    }
}

@_cdecl("vc_set_stream_state")
public func vc_set_stream_state(_ p: OpaquePointer?, _ id: UInt32, _ muted: Int32, _ hold: Int32) -> Int32 {
    withClient(p) { b in
        let m = try flag("vc_set_stream_state", "muted", muted), h = try flag("vc_set_stream_state", "hold", hold)
        try b.client.setStreamState(streamID: id, muted: m, hold: h)
        return VC_OK
    }
}

/// The admin password argument of the vc_admin_* calls.
func adminPassword(_ fn: String, _ pw: UnsafePointer<CChar>?) throws -> String {
    guard let pw else { throw invalid("\(fn): admin_password is NULL") }
    guard let s = String(validatingCString: pw) else { throw invalid("\(fn): admin_password is not valid UTF-8") }
    return s
}

@_cdecl("vc_admin_set_server_mute")
public func vc_admin_set_server_mute(_ p: OpaquePointer?, _ userID: UInt32, _ muted: Int32, _ deafened: Int32,
                                     _ pw: UnsafePointer<CChar>?) -> Int32 {
    withClient(p) { b in
        let fn = "vc_admin_set_server_mute"
        let m = try flag(fn, "muted", muted), d = try flag(fn, "deafened", deafened)
        try b.client.adminSetServerMute(userID: userID, muted: m, deafened: d, adminPassword: try adminPassword(fn, pw))
        return VC_OK
    }
}

@_cdecl("vc_admin_kick")
public func vc_admin_kick(_ p: OpaquePointer?, _ userID: UInt32, _ reason: UnsafePointer<CChar>?, _ pw: UnsafePointer<CChar>?) -> Int32 {
    withClient(p) { b in
        let fn = "vc_admin_kick"
        var why = ""
        if let reason {
            guard let r = String(validatingCString: reason) else { throw invalid("\(fn): reason is not valid UTF-8") }
            why = r   // its length: VoiceClient.adminKick
        }
        try b.client.adminKick(userID: userID, reason: why, adminPassword: try adminPassword(fn, pw))
        return VC_OK
    }
}

@_cdecl("vc_get_send_stats")
public func vc_get_send_stats(_ p: OpaquePointer?, _ streamID: UInt32, _ out: UnsafeMutablePointer<vc_send_stats>?) -> Int32 {
    withClient(p) { b in
        guard let out else { throw invalid("vc_get_send_stats: out is NULL") }
        let s = try b.client.sendStats(streamID: streamID)
        out.pointee = vc_send_stats(ssrc: s.ssrc, packets_sent: s.packetsSent, bytes_sent: s.bytesSent, fec_packets: s.fecPackets,
                                    fec: s.protection.fec ? 1 : 0, packet_loss_perc: UInt32(s.protection.lossPercent),
                                    channel_fec: s.ceiling.fec ? 1 : 0, channel_expected_loss: UInt32(s.ceiling.lossPercent),
                                    feedback_received: s.feedbacks, protection_changes: s.changes, listeners: s.listeners,
                                    reported_expected: s.reported.expected, reported_lost: s.reported.lost,
                                    reported_isolated: s.reported.isolated, frames_dropped: s.framesDropped,
                                    frames_sent_path_lost: s.framesSentPathLost, device_overruns: s.deviceOverruns,
                                    device_failures: s.deviceFailures)
        return VC_OK
    }
}

@_cdecl("vc_get_playback_stats")
public func vc_get_playback_stats(_ p: OpaquePointer?, _ out: UnsafeMutablePointer<vc_playback_stats>?) -> Int32 {
    withClient(p) { b in
        guard let out else { throw invalid("vc_get_playback_stats: out is NULL") }
        let s = b.client.playbackStats()
        out.pointee = vc_playback_stats(device_underruns: s.deviceUnderruns, device_failures: s.deviceFailures,
                                        device_buffered_ms: UInt32(clamping: s.deviceBufferedUs / 1000))
        return VC_OK
    }
}

// MARK: - output

@_cdecl("vc_set_external_playback")
public func vc_set_external_playback(_ p: OpaquePointer?, _ enabled: Int32) -> Int32 {
    withClient(p) { b in try b.client.setExternalPlayback(enabled != 0); return VC_OK }
}

@_cdecl("vc_set_mixed_output_sink")
public func vc_set_mixed_output_sink(_ p: OpaquePointer?, _ fn: vc_pcm_sink_fn?, _ user: UnsafeMutableRawPointer?) -> Int32 {
    withClient(p) { b in
        try b.client.refuseInCallback("vc_set_mixed_output_sink")
        if let fn {
            try b.client.setMixedSink { pcm, frames, channels in fn(user, pcm, UInt32(frames), UInt32(channels)) }
        } else {
            try b.client.setMixedSink(nil)
        }
        return VC_OK
    }
}

@_cdecl("vc_set_mixed_output_block_ms")
public func vc_set_mixed_output_block_ms(_ p: OpaquePointer?, _ ms: UInt32) -> Int32 {
    withClient(p) { b in try b.client.setMixedOutputBlock(ms: Int(clamping: ms)); return VC_OK }
}

@_cdecl("vc_set_remote_stream_sink")
public func vc_set_remote_stream_sink(_ p: OpaquePointer?, _ fn: vc_remote_stream_sink_fn?, _ user: UnsafeMutableRawPointer?) -> Int32 {
    withClient(p) { b in
        if let fn {
            try b.client.setSpeakerSink { blk in
                fn(user, blk.ssrc, blk.userID, vc_stream_kind(rawValue: blk.kind.rawValue), blk.pcm, UInt32(blk.frames), UInt32(blk.channels))
            }
        } else {
            try b.client.setSpeakerSink(nil)
        }
        return VC_OK
    }
}

@_cdecl("vc_set_output_format")
public func vc_set_output_format(_ p: OpaquePointer?, _ sampleRate: UInt32, _ channels: UInt32) -> Int32 {
    withClient(p) { b in
        guard sampleRate >= 8000 && sampleRate <= 192_000 else {
            throw invalid("vc_set_output_format: sample_rate must be within 8000..192000 (got \(sampleRate))")
        }
        guard channels == 1 || channels == 2 else { throw invalid("vc_set_output_format: channels must be 1 or 2 (got \(channels))") }
        try b.client.setOutputFormat(sampleRate: Int(sampleRate), channels: Int(channels))
        return VC_OK
    }
}

@_cdecl("vc_read_mixed_pcm_f32")
public func vc_read_mixed_pcm_f32(_ p: OpaquePointer?, _ out: UnsafeMutablePointer<Float>?, _ frames: UInt32) -> Int32 {
    withClient(p) { b in
        guard let out else {
            guard frames == 0 else { throw invalid("vc_read_mixed_pcm_f32: out is NULL") }
            var none: Float = 0
            try b.client.readMixedFloat(into: &none, frames: 0)
            return VC_OK
        }
        try b.client.readMixedFloat(into: out, frames: Int(frames))
        return VC_OK
    }
}

@_cdecl("vc_start_recording")
public func vc_start_recording(_ p: OpaquePointer?, _ path: UnsafePointer<CChar>?, _ ssrc: UInt32) -> Int32 {
    withClient(p) { b in
        try b.client.startRecording(path: try nonEmptyString(path, "vc_start_recording", "path"), ssrc: ssrc)
        return VC_OK
    }
}

@_cdecl("vc_stop_recording")
public func vc_stop_recording(_ p: OpaquePointer?, _ ssrc: UInt32) -> Int32 {
    withClient(p) { b in try b.client.stopRecording(ssrc: ssrc); return VC_OK }
}

@_cdecl("vc_read_mixed_pcm")
public func vc_read_mixed_pcm(_ p: OpaquePointer?, _ out: UnsafeMutablePointer<Int16>?, _ frames: UInt32) -> Int32 {
    withClient(p) { b in
        guard let out else {
            // frames 0 renders nothing: no buffer is needed (the mode is still checked).
            guard frames == 0 else { throw invalid("vc_read_mixed_pcm: out is NULL") }
            var none: Int16 = 0
            try b.client.readMixed(into: &none, frames: 0)
            return VC_OK
        }
        try b.client.readMixed(into: out, frames: Int(frames))
        return VC_OK
    }
}

// MARK: - events

func toC(_ e: ClientEvent) -> vc_event {
    var c = vc_event()
    c.type = e.type
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
        guard let out else { throw invalid("vc_poll_event: out is NULL") }
        let t = (timeoutMs != 0 && b.client.insideAnyCallback) ? 0 : Int(timeoutMs)
        guard let e = b.client.pollEvent(timeoutMs: t) else { return 0 }
        out.pointee = toC(e)
        return 1
    }
}

@_cdecl("vc_set_event_callback")
public func vc_set_event_callback(_ p: OpaquePointer?, _ fn: vc_event_fn?, _ user: UnsafeMutableRawPointer?) -> Int32 {
    withClient(p) { b in
        if let fn {
            try b.client.setEventHandler { e in
                var c = toC(e)
                fn(user, &c)
            }
        } else {
            try b.client.setEventHandler(nil)
        }
        return VC_OK
    }
}

@_cdecl("vc_last_error")
public func vc_last_error(_ p: OpaquePointer?, _ buf: UnsafeMutablePointer<CChar>?, _ len: Int) -> Int32 {
    guard let buf, len > 0 else { return VC_ERR_INVALID_ARG }
    guard let p else {
        copyString(processErrors.text, into: buf, capacity: len)
        return VC_OK
    }
    guard let (b, entry) = Registry.enter(p) else { return VC_ERR_INVALID_ARG }
    defer { Registry.leave(entry) }
    copyString(b.client.lastError, into: buf, capacity: len)
    return VC_OK
}

// MARK: - devices and input gate

@_cdecl("vc_set_alsa_config")
public func vc_set_alsa_config(_ text: UnsafePointer<CChar>?) -> Int32 {
    withoutClient("vc_set_alsa_config") {
        do { try AlsaConfig.set(text.map { String(cString: $0) }) } catch { throw invalid("\(error)") }
        return VC_OK
    }
}

@_cdecl("vc_list_devices")
public func vc_list_devices(_ kind: vc_device_kind, _ out: UnsafeMutablePointer<vc_device_info>?, _ cap: Int,
                            _ count: UnsafeMutablePointer<Int>?) -> Int32 {
    withoutClient("vc_list_devices") { try listDevices(kind, out, cap, count) }
}

private func listDevices(_ kind: vc_device_kind, _ out: UnsafeMutablePointer<vc_device_info>?, _ cap: Int,
                         _ count: UnsafeMutablePointer<Int>?) throws -> Int32 {
    guard let count else { throw invalid("count is NULL") }
    guard cap == 0 || out != nil else { throw invalid("out is NULL with cap \(cap)") }
    let dir: DeviceDirection
    switch kind {
    case VC_DEVICE_CAPTURE: dir = .capture
    case VC_DEVICE_PLAYBACK: dir = .playback
    default: throw invalid("kind \(Int32(bitPattern: kind.rawValue)) is neither VC_DEVICE_CAPTURE nor VC_DEVICE_PLAYBACK")
    }
    let list = AlsaBackend.shared.listDevices(dir)
    count.pointee = list.count
    for (i, d) in list.prefix(cap).enumerated() {
        var info = vc_device_info()
        copyStringTuple(d.name, into: &info.name)
        copyStringTuple(d.description, into: &info.description)
        info.is_monitor = d.isMonitor ? 1 : 0
        out![i] = info
    }
    return VC_OK
}

/// A string argument that must be non-NULL, non-empty UTF-8 (a device name, a path).
/// `function`: the call to name in the message (nil inside withoutClient, which names it).
func nonEmptyString(_ p: UnsafePointer<CChar>?, _ function: String?, _ what: String) throws -> String {
    let call = function.map { "\($0): " } ?? ""
    guard let p else { throw invalid("\(call)\(what) is NULL") }
    guard let s = String(validatingCString: p), !s.isEmpty else { throw invalid("\(call)\(what) is empty or not UTF-8") }
    return s
}

@_cdecl("vc_set_playback_device")
public func vc_set_playback_device(_ p: OpaquePointer?, _ name: UnsafePointer<CChar>?) -> Int32 {
    withClient(p) { b in
        try b.client.setPlaybackDevice(try nonEmptyString(name, "vc_set_playback_device", "name"))
        return VC_OK
    }
}

@_cdecl("vc_set_capture_device")
public func vc_set_capture_device(_ p: OpaquePointer?, _ id: UInt32, _ name: UnsafePointer<CChar>?) -> Int32 {
    withClient(p) { b in
        try b.client.setCaptureDevice(streamID: id, device: try nonEmptyString(name, "vc_set_capture_device", "name"))
        return VC_OK
    }
}

@_cdecl("vc_set_capture_channels")
public func vc_set_capture_channels(_ p: OpaquePointer?, _ id: UInt32, _ channels: UInt32) -> Int32 {
    withClient(p) { b in try b.client.setCaptureChannels(streamID: id, channels: Int(channels)); return VC_OK }
}

@_cdecl("vc_set_input_mode")
public func vc_set_input_mode(_ p: OpaquePointer?, _ mode: vc_input_mode) -> Int32 {
    withClient(p) { b in
        guard let m = InputMode(rawValue: Int32(bitPattern: mode.rawValue)) else {
            throw invalid("vc_set_input_mode: unknown mode \(Int32(bitPattern: mode.rawValue)) (VC_INPUT_VAD, VC_INPUT_PTT or VC_INPUT_CONTINUOUS)")
        }
        b.client.setInputMode(m)
        return VC_OK
    }
}

@_cdecl("vc_set_vad")
public func vc_set_vad(_ p: OpaquePointer?, _ threshold: Float, _ hangMs: UInt32) -> Int32 {
    withClient(p) { b in try b.client.setVAD(threshold: threshold, hangMs: hangMs); return VC_OK }
}

@_cdecl("vc_set_push_to_talk")
public func vc_set_push_to_talk(_ p: OpaquePointer?, _ active: Int32) -> Int32 {
    withClient(p) { b in b.client.setPushToTalk(active != 0); return VC_OK }
}

@_cdecl("vc_audio_suspend")
public func vc_audio_suspend(_ p: OpaquePointer?) -> Int32 {
    withClient(p) { b in try b.client.suspendAudio(); return VC_OK }
}

@_cdecl("vc_audio_restart")
public func vc_audio_restart(_ p: OpaquePointer?) -> Int32 {
    withClient(p) { b in try b.client.restartAudio(); return VC_OK }
}

// MARK: - send processing

@_cdecl("vc_send_processing_default")
public func vc_send_processing_default() -> vc_send_processing {
    let d = SendProcessing()
    return vc_send_processing(noise_suppression: 0, agc: 0, echo_cancellation: 0, agc_level: d.agcLevel)
}

@_cdecl("vc_set_send_processing")
public func vc_set_send_processing(_ p: OpaquePointer?, _ id: UInt32, _ sp: UnsafePointer<vc_send_processing>?) -> Int32 {
    withClient(p) { b in
        guard let sp else { throw invalid("vc_set_send_processing: settings is NULL") }
        var s = SendProcessing(noiseSuppression: sp.pointee.noise_suppression != 0, agc: sp.pointee.agc != 0,
                               echoCancellation: sp.pointee.echo_cancellation != 0)
        s.agcLevel = sp.pointee.agc_level
        try b.client.setSendProcessing(streamID: id, s)
        return VC_OK
    }
}

@_cdecl("vc_get_send_processing")
public func vc_get_send_processing(_ p: OpaquePointer?, _ id: UInt32, _ out: UnsafeMutablePointer<vc_send_processing>?) -> Int32 {
    withClient(p) { b in
        guard let out else { throw invalid("vc_get_send_processing: out is NULL") }
        let s = try b.client.sendProcessing(streamID: id)
        out.pointee = vc_send_processing(noise_suppression: s.noiseSuppression ? 1 : 0, agc: s.agc ? 1 : 0,
                                         echo_cancellation: s.echoCancellation ? 1 : 0, agc_level: s.agcLevel)
        return VC_OK
    }
}
