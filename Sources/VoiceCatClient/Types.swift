// Public Swift-side types of the client engine. Codes and event types are the
// header's own (include/voicecat.h through VoiceCatABI); nothing here restates a
// number. The C layer (VoiceCatImpl) maps these structs one to one onto the header's.
import Glibc
import VoiceCatABI
import VoiceCatAudio
import VoiceCatDevices
import VoiceCatProtocol
import VoiceCatSystem

/// Failures of client calls; each maps to one VC_ERR_* code.
public enum ClientError: Error, Equatable, CustomStringConvertible {
    case invalidArgument(String)
    case state(String)
    case notFound(String)
    case network(String)
    case timeout(String)
    case protocolError(String)
    case version(String)
    case auth(String)
    case rejected(String)
    case device(String)
    case codec(String)
    case noMemory(String)
    case unsupported(String)

    public var description: String {
        switch self {
        case .invalidArgument(let s), .state(let s), .notFound(let s), .network(let s), .timeout(let s),
             .protocolError(let s), .version(let s), .auth(let s), .rejected(let s), .device(let s),
             .codec(let s), .noMemory(let s), .unsupported(let s):
            return s
        }
    }

    /// The header's VC_ERR_* code for this failure.
    public var code: Int32 {
        switch self {
        case .invalidArgument: return VC_ERR_INVALID_ARG
        case .state: return VC_ERR_STATE
        case .notFound: return VC_ERR_NOT_FOUND
        case .network: return VC_ERR_NETWORK
        case .timeout: return VC_ERR_TIMEOUT
        case .protocolError: return VC_ERR_PROTOCOL
        case .version: return VC_ERR_VERSION
        case .auth: return VC_ERR_AUTH
        case .rejected: return VC_ERR_REJECTED
        case .device: return VC_ERR_DEVICE
        case .codec: return VC_ERR_CODEC
        case .noMemory: return VC_ERR_NO_MEMORY
        case .unsupported: return VC_ERR_UNSUPPORTED
        }
    }
}

public struct ClientConfig {
    public var clientName = "libvoicecat"
    public var keepaliveMs: UInt32 = 5000
    public var maxRemoteStreams = 32
    public var eventQueueSize = 256
    /// True: no playback device; the host takes the mix (sink or pull).
    public var externalPlayback = false
    /// Playback device (a name of `backend`) when externalPlayback is false.
    public var playbackDevice = "default"
    /// TALK_STOP comes this long after a talkspurt's last frame was played.
    public var talkHangoverMs: UInt32 = 300
    /// Where devices come from: ALSA unless a host or test gives another backend.
    public var backend: AudioBackend = AlsaBackend.shared
    /// The known-servers file (trust on first use): nil = the per-user default
    /// (KnownServers.defaultPath), "" = none.
    public var knownServersPath: String? = nil
    /// Reconnect by itself after the control connection is lost (re-join, re-announce).
    public var autoReconnect = false
    /// SpeexDSP resampler quality (0..10) for every rate conversion of the client.
    public var resamplerQuality = FormatConverter.defaultQuality
    /// Ask the server for its roster (every user and channel, and the changes): the
    /// user and channel lists. Off, the server spends nothing on this client for it.
    public var presence = true
    /// Loss reports to the server every this many ms (0: never).
    public var lossReportMs: UInt32 = UInt32(LossAggregation.reportIntervalMs)
    public init() {}
}

/// Event types are the header's vc_event_type; these are its Swift spellings.
public typealias ClientEventType = vc_event_type

extension vc_event_type {
    public static let connected = VC_EVENT_CONNECTED
    public static let disconnected = VC_EVENT_DISCONNECTED
    public static let channelJoined = VC_EVENT_CHANNEL_JOINED
    public static let userJoined = VC_EVENT_USER_JOINED
    public static let userLeft = VC_EVENT_USER_LEFT
    public static let remoteStreamAdded = VC_EVENT_REMOTE_STREAM_ADDED
    public static let remoteStreamRemoved = VC_EVENT_REMOTE_STREAM_REMOVED
    public static let talkStart = VC_EVENT_TALK_START
    public static let talkStop = VC_EVENT_TALK_STOP
    public static let voiceDisconnected = VC_EVENT_VOICE_DISCONNECTED
    public static let voiceReconnected = VC_EVENT_VOICE_RECONNECTED
    public static let serverMuteState = VC_EVENT_SERVER_MUTE_STATE
    public static let streamStateUpdate = VC_EVENT_STREAM_STATE_UPDATE
    public static let error = VC_EVENT_ERROR
    public static let reconnecting = VC_EVENT_RECONNECTING
    public static let reconnected = VC_EVENT_RECONNECTED
    public static let gateOpened = VC_EVENT_GATE_OPENED
    public static let gateClosed = VC_EVENT_GATE_CLOSED
    public static let protectionChanged = VC_EVENT_PROTECTION_CHANGED
    public static let eventsDropped = VC_EVENT_EVENTS_DROPPED
}

public struct ClientEvent: Equatable {
    public var type: vc_event_type
    public var code: Int32 = 0
    public var userID: UInt32 = 0
    public var ssrc: UInt32 = 0
    public var streamID: UInt32 = 0
    public var channelID: UInt32 = 0
    public var kind: UInt32 = 0
    public var channels: UInt32 = 0
    public var muted = false
    public var deafened = false
    public var hold = false
    public var text = ""
    public init(type: vc_event_type) { self.type = type }
}

/// The listener's local settings for one remote stream.
public struct RemoteSettings: Equatable {
    public var gain: Float = 1
    public var muted = false
    public var noiseReduction = false
    public init(gain: Float = 1, muted: Bool = false, noiseReduction: Bool = false) {
        self.gain = gain; self.muted = muted; self.noiseReduction = noiseReduction
    }
}

public struct RemoteStreamInfo: Equatable {
    public var ssrc: UInt32
    public var userID: UInt32
    public var streamID: UInt32
    public var kind: StreamKind
    public var channels: Int
    public var talking: Bool
    public var settings: RemoteSettings
    public var username: String
    /// The decoded audio's level (after the listener's NR, before gain and mute) over
    /// the last block rendered, in dBFS; the floor (-120) while nothing renders.
    public var levelRMSDBFS: Float = BlockLevel.floorDBFS
    public var levelPeakDBFS: Float = BlockLevel.floorDBFS
}

/// A level reading in dBFS (RMS and peak; a full-scale sine reads -3.01 / 0).
public struct Level: Equatable {
    public var rmsDBFS: Float
    public var peakDBFS: Float
}

public struct StreamStats: Equatable {
    /// The jitter buffer's counters; `duplicates` includes replays caught by the
    /// replay window, `late` includes frames skipped to catch up.
    public var jitter = JitterStats()
    public var targetDepthMs: UInt32 = 0
    public var currentDepthMs: UInt32 = 0
    public var talking = false
}

public struct ConnectionStats: Equatable {
    public var mediaRttMs: UInt32 = 0
    public var controlRttMs: UInt32 = 0
    public var bytesIn: UInt64 = 0
    public var bytesOut: UInt64 = 0
    public var packetsIn: UInt64 = 0
    public var packetsOut: UInt64 = 0
    public var authFailures: UInt64 = 0
    public var voiceConnected = false
    /// Keepalives sent on the media path, and those whose echo never came (loss).
    public var keepalivesSent: UInt64 = 0
    public var keepalivesLost: UInt64 = 0
}

/// The playback device's losses and fill (vc_playback_stats).
public struct PlaybackStats: Equatable {
    public var deviceUnderruns: UInt64 = 0
    public var deviceFailures: UInt64 = 0
    /// What the open card held after the last block was written (µs).
    public var deviceBufferedUs: UInt64 = 0
}

/// Process-wide log sink (vc_set_log_callback). Level 0 error … 3 debug.
///
/// The callback runs outside any lock, from whichever library or host thread logs.
/// Replacing or clearing it returns only after every call that started before has
/// returned, except from inside the callback itself (then it returns at once). A
/// line logged from inside the callback (a failing call made there) is dropped
/// rather than recursing.
public enum ClientLog {
    public final class Sink {
        let write: (Int32, String) -> Void
        public init(_ write: @escaping (Int32, String) -> Void) { self.write = write }
    }

    private static let cond = Condition()
    nonisolated(unsafe) private static var sink: Sink? = nil
    /// Calls in flight that started under the current sink, and under earlier ones.
    nonisolated(unsafe) private static var activeCurrent = 0
    nonisolated(unsafe) private static var activeOld = 0
    nonisolated(unsafe) private static var generation: UInt64 = 0
    private static let insideKey: pthread_key_t = {
        var k = pthread_key_t()
        precondition(pthread_key_create(&k, nil) == 0)
        return k
    }()

    /// True while the calling thread runs the log callback (on a host thread inside a
    /// failing call, or on one of a client's threads).
    public static var callingThreadIsInside: Bool { pthread_getspecific(insideKey) != nil }

    public static func setSink(_ s: Sink?) {
        cond.lock(); defer { cond.unlock() }
        sink = s
        generation &+= 1
        activeOld += activeCurrent
        activeCurrent = 0
        if callingThreadIsInside { return }
        while activeOld > 0 { cond.wait(untilMs: nil) }
    }

    public static func log(_ level: Int32, _ message: @autoclosure () -> String) {
        if callingThreadIsInside { return }
        cond.lock()
        guard let s = sink else { cond.unlock(); return }
        let gen = generation
        activeCurrent += 1
        cond.unlock()
        pthread_setspecific(insideKey, UnsafeRawPointer(bitPattern: 1))
        s.write(level, message())
        pthread_setspecific(insideKey, nil)
        cond.lock()
        if gen == generation { activeCurrent -= 1 } else { activeOld -= 1; if activeOld == 0 { cond.broadcast() } }
        cond.unlock()
    }
}
