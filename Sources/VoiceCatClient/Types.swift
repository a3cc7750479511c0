// Public Swift-side types of the client engine. The C layer (VoiceCatImpl) maps
// them one to one onto include/voicecat.h.
import VoiceCatAudio
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
}

public struct ClientConfig {
    public var clientName = "libvoicecat"
    public var keepaliveMs: UInt32 = 5000
    public var maxRemoteStreams = 32
    public var eventQueueSize = 256
    /// True: no playback device; the host takes the mix (sink or pull).
    public var externalPlayback = false
    /// ALSA PCM for playback when externalPlayback is false.
    public var playbackDevice = "default"
    public init() {}
}

public enum ClientEventType: Int32 {
    case connected = 1, disconnected, channelJoined, userJoined, userLeft, remoteStreamAdded, remoteStreamRemoved
    case talkStart, talkStop, voiceDisconnected, voiceReconnected, serverMuteState, streamStateUpdate, error
}

public struct ClientEvent: Equatable {
    public var type: ClientEventType
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
    public init(type: ClientEventType) { self.type = type }
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
}

/// Process-wide log sink (vc_set_log_callback). Level 0 error … 3 debug.
public enum ClientLog {
    nonisolated(unsafe) static var sink: ((Int32, String) -> Void)? = nil
    static let lock = Lock()

    public static func setSink(_ s: ((Int32, String) -> Void)?) { lock.withLock { sink = s } }

    public static func log(_ level: Int32, _ message: @autoclosure () -> String) {
        lock.withLock {
            guard let s = sink else { return }
            s(level, message())
        }
    }
}
