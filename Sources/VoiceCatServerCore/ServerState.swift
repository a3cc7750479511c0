// The server's model: sessions, channels, streams and the counters it keeps.
// Owned and mutated by the event-loop thread only.
import VoiceCatProtocol
import VoiceCatSystem

/// What the server counts. A snapshot is published for other threads every loop turn.
public struct ServerCounters: Equatable, Sendable {
    public var tcpAccepted: UInt64 = 0
    public var tcpRejected: UInt64 = 0
    public var sessionsOpened: UInt64 = 0
    public var sessionsActive: UInt64 = 0
    public var sessionsReaped: UInt64 = 0
    public var handshakeVersionMismatch: UInt64 = 0
    public var controlFramesIn: UInt64 = 0
    public var controlFramesOut: UInt64 = 0
    /// Connections closed for bad control input (auth failure, oversize, bad protobuf, stall).
    public var controlProtocolErrors: UInt64 = 0
    public var authRejected: UInt64 = 0
    public var udpIn: UInt64 = 0
    public var udpOut: UInt64 = 0
    public var voiceRelayedIn: UInt64 = 0
    public var voiceRelayedOut: UInt64 = 0
    public var keepalivesEchoed: UInt64 = 0
    public var bindingsAccepted: UInt64 = 0
    public var dropMalformed: UInt64 = 0
    public var dropOversize: UInt64 = 0
    public var dropUnbound: UInt64 = 0
    public var dropSpoofedSSRC: UInt64 = 0
    public var dropAuthFailed: UInt64 = 0
    public var dropReplay: UInt64 = 0
    public var dropRateLimited: UInt64 = 0
    public var dropServerMuted: UInt64 = 0
    public var dropSendFailed: UInt64 = 0

    public init() {}

    /// All drops of media datagrams.
    public var mediaDrops: UInt64 {
        dropMalformed + dropOversize + dropUnbound + dropSpoofedSSRC + dropAuthFailed + dropReplay
            + dropRateLimited + dropServerMuted
    }

    public var summary: String {
        "sessions=\(sessionsActive) opened=\(sessionsOpened) reaped=\(sessionsReaped) tcp_accepted=\(tcpAccepted) "
            + "ctrl_in=\(controlFramesIn) ctrl_out=\(controlFramesOut) ctrl_errors=\(controlProtocolErrors) auth_rejected=\(authRejected) "
            + "udp_in=\(udpIn) udp_out=\(udpOut) voice_in=\(voiceRelayedIn) voice_out=\(voiceRelayedOut) "
            + "keepalives=\(keepalivesEchoed) bindings=\(bindingsAccepted) "
            + "drop_malformed=\(dropMalformed) drop_oversize=\(dropOversize) drop_unbound=\(dropUnbound) "
            + "drop_spoofed_ssrc=\(dropSpoofedSSRC) drop_auth=\(dropAuthFailed) drop_replay=\(dropReplay) "
            + "drop_rate=\(dropRateLimited) drop_muted=\(dropServerMuted) drop_send=\(dropSendFailed)"
    }
}

final class Channel {
    let id: UInt32
    let name: String
    let audio: AudioConfig
    var members: [Session] = []
    init(id: UInt32, name: String, audio: AudioConfig) { self.id = id; self.name = name; self.audio = audio }
}

final class Stream {
    let streamID: UInt32
    let ssrc: UInt32
    let kind: StreamKind
    let channels: UInt32
    // Strong: the cycle with Session.streams is broken when the stream or session goes.
    let owner: Session
    var replay = ReplayWindow()
    // Token bucket: refilled at `rate` per second, capacity `rate`.
    var tokens: Double
    var lastRefill: UInt64

    init(streamID: UInt32, ssrc: UInt32, kind: StreamKind, channels: UInt32, owner: Session, rate: Int, now: UInt64) {
        self.streamID = streamID; self.ssrc = ssrc; self.kind = kind; self.channels = channels; self.owner = owner
        tokens = Double(rate); lastRefill = now
    }

    /// Takes one token; false when the stream is over its packet rate.
    func take(rate: Int, nowMs: UInt64) -> Bool {
        let elapsed = Double(nowMs &- lastRefill) / 1000
        lastRefill = nowMs
        tokens = min(Double(rate), tokens + elapsed * Double(rate))
        guard tokens >= 1 else { return false }
        tokens -= 1
        return true
    }
}

final class Session {
    let id: UInt64
    let userID: UInt32
    let bindingID: UInt32
    let username: String
    let keys: SessionKeys
    // Strong: the cycle with Connection.session is broken by Server.detachSession.
    let connection: Connection
    var channel: Channel?
    var streams: [UInt32: Stream] = [:]
    var epoch: UInt32 = 0
    var media: DirectionalKeys
    var bind: DirectionalKeys
    var udpAddress: SocketAddress?
    var bindReplay = ReplayWindow()
    var bindSendSeq: UInt64 = 0
    var lastSeenMs: UInt64
    var serverMuted = false
    var deafened = false
    /// When this session was last told that a datagram of its was too large (ms).
    var oversizeNoticeMs: UInt64?

    init(id: UInt64, userID: UInt32, bindingID: UInt32, username: String, keys: SessionKeys, connection: Connection, now: UInt64) {
        self.id = id; self.userID = userID; self.bindingID = bindingID; self.username = username
        self.keys = keys; self.connection = connection
        media = keys.media(epoch: 0)
        bind = keys.bind(epoch: 0)
        lastSeenMs = now
    }

    var memberInfo: MemberInfo { MemberInfo(userID: userID, username: username, muted: serverMuted, deafened: deafened) }
}

final class Connection {
    enum Phase { case awaitingClientHello, awaitingHello, active, closing }

    let socket: Socket
    let peer: SocketAddress
    var phase = Phase.awaitingClientHello
    var handshakeBuffer: [UInt8] = []
    var sealer: ControlSealer?
    var opener: ControlOpener?
    var keys: SessionKeys?
    var session: Session?
    var outBuffer: [UInt8] = []
    var outStart = 0
    let openedMs: UInt64
    var partialSinceMs: UInt64?

    init(socket: Socket, peer: SocketAddress, now: UInt64) { self.socket = socket; self.peer = peer; openedMs = now }

    var pendingOutput: Int { outBuffer.count - outStart }
}
