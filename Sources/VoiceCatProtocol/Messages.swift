// Control messages (PROTOCOL.md §2). A control frame's plaintext is
// `u16 message type (big-endian) | protobuf body`. Type numbers and fields are
// listed in docs/protocol.md; keep the two in step.

public enum StreamKind: UInt32, Sendable {
    case mic = 0
    case screenAudio = 1
    case auxDevice = 2
}

/// Error codes carried in `Error.code`.
public enum ProtocolErrorCode: UInt32, Sendable {
    case unknown = 0
    case badRequest = 1
    case unknownMessageType = 2
    case versionMismatch = 3
    case authFailed = 4
    case usernameTaken = 5
    case serverFull = 6
    case notFound = 7
    case limitReached = 8
    case wrongState = 9
    case forbidden = 10
}

public struct ChannelInfo: Equatable, Sendable {
    public var id: UInt32
    public var name: String
    public var audio: AudioConfig
    public init(id: UInt32, name: String, audio: AudioConfig) { self.id = id; self.name = name; self.audio = audio }
}

public struct MemberInfo: Equatable, Sendable {
    public var userID: UInt32
    public var username: String
    public var muted: Bool
    public var deafened: Bool
    public init(userID: UInt32, username: String, muted: Bool = false, deafened: Bool = false) {
        self.userID = userID; self.username = username; self.muted = muted; self.deafened = deafened
    }
}

public struct Hello: Equatable, Sendable {
    public var protoVersion: UInt32 = 2
    public var username: String = ""
    public var password: String = ""
    public var clientName: String = ""
    public init(protoVersion: UInt32 = 2, username: String, password: String = "", clientName: String = "") {
        self.protoVersion = protoVersion; self.username = username; self.password = password; self.clientName = clientName
    }
}

public struct HelloResult: Equatable, Sendable {
    public var sessionID: UInt64
    public var userID: UInt32
    public var bindingID: UInt32
    public var serverName: String
    public var channels: [ChannelInfo]
    public init(sessionID: UInt64, userID: UInt32, bindingID: UInt32, serverName: String, channels: [ChannelInfo]) {
        self.sessionID = sessionID; self.userID = userID; self.bindingID = bindingID
        self.serverName = serverName; self.channels = channels
    }
}

public struct ErrorMessage: Equatable, Sendable {
    public var code: UInt32
    public var message: String
    /// The `request_id` of the request this answers, 0 when none.
    public var requestID: UInt32
    public init(code: ProtocolErrorCode, message: String, requestID: UInt32 = 0) {
        self.code = code.rawValue; self.message = message; self.requestID = requestID
    }
    public init(rawCode: UInt32, message: String, requestID: UInt32) {
        self.code = rawCode; self.message = message; self.requestID = requestID
    }
}

public struct JoinChannelResult: Equatable, Sendable {
    public var channelID: UInt32
    public var audio: AudioConfig
    public var members: [MemberInfo]
    public var requestID: UInt32
    public init(channelID: UInt32, audio: AudioConfig, members: [MemberInfo], requestID: UInt32 = 0) {
        self.channelID = channelID; self.audio = audio; self.members = members; self.requestID = requestID
    }
}

public struct StreamAnnounce: Equatable, Sendable {
    public var streamID: UInt32
    public var kind: StreamKind
    public var channels: UInt32
    public var requestID: UInt32
    public init(streamID: UInt32, kind: StreamKind, channels: UInt32, requestID: UInt32 = 0) {
        self.streamID = streamID; self.kind = kind; self.channels = channels; self.requestID = requestID
    }
}

public struct StreamAnnounceResult: Equatable, Sendable {
    public var streamID: UInt32
    public var ssrc: UInt32
    public var effectiveAudio: AudioConfig
    public var requestID: UInt32
    public init(streamID: UInt32, ssrc: UInt32, effectiveAudio: AudioConfig, requestID: UInt32 = 0) {
        self.streamID = streamID; self.ssrc = ssrc; self.effectiveAudio = effectiveAudio; self.requestID = requestID
    }
}

public struct RemoteStream: Equatable, Sendable {
    public var userID: UInt32
    public var streamID: UInt32
    public var ssrc: UInt32
    public var kind: StreamKind
    public var audio: AudioConfig
    public init(userID: UInt32, streamID: UInt32, ssrc: UInt32, kind: StreamKind, audio: AudioConfig) {
        self.userID = userID; self.streamID = streamID; self.ssrc = ssrc; self.kind = kind; self.audio = audio
    }
}

public struct ServerMuteState: Equatable, Sendable {
    public var userID: UInt32
    public var muted: Bool
    public var deafened: Bool
    public init(userID: UInt32, muted: Bool, deafened: Bool) { self.userID = userID; self.muted = muted; self.deafened = deafened }
}

public struct SetServerMute: Equatable, Sendable {
    public var userID: UInt32
    public var muted: Bool
    public var deafened: Bool
    /// The server's admin password (server config `admin_password`).
    public var adminPassword: String
    public var requestID: UInt32
    public init(userID: UInt32, muted: Bool, deafened: Bool, adminPassword: String, requestID: UInt32 = 0) {
        self.userID = userID; self.muted = muted; self.deafened = deafened
        self.adminPassword = adminPassword; self.requestID = requestID
    }
}

/// Message type numbers (u16 in front of each control plaintext).
public enum MessageType: UInt16, Sendable, CaseIterable {
    case hello = 1
    case helloResult = 2
    case error = 3
    case ping = 4
    case pong = 5
    case joinChannel = 6
    case joinChannelResult = 7
    case userJoined = 8
    case userLeft = 9
    case streamAnnounce = 10
    case streamAnnounceResult = 11
    case remoteStreamAdded = 12
    case streamStop = 13
    case remoteStreamRemoved = 14
    case streamStateUpdate = 15
    case serverMuteState = 16
    case rebind = 17
    case rebindResult = 18
    case setServerMute = 19
}

/// Why a control plaintext could not be decoded.
public enum ControlDecodeError: Error, Equatable, Sendable, CustomStringConvertible {
    case tooShort
    case unknownType(UInt16)
    case body(MessageType, ProtobufError)

    public var description: String {
        switch self {
        case .tooShort: return "control message shorter than its 2-byte type"
        case .unknownType(let t): return "unknown control message type \(t)"
        case .body(let t, let e): return "bad \(t) message: \(e)"
        }
    }
}

public enum ControlMessage: Equatable, Sendable {
    case hello(Hello)
    case helloResult(HelloResult)
    case error(ErrorMessage)
    case ping(timestamp: UInt64)
    case pong(timestamp: UInt64)
    case joinChannel(name: String, requestID: UInt32)
    case joinChannelResult(JoinChannelResult)
    case userJoined(MemberInfo, channelID: UInt32)
    case userLeft(userID: UInt32, channelID: UInt32)
    case streamAnnounce(StreamAnnounce)
    case streamAnnounceResult(StreamAnnounceResult)
    case remoteStreamAdded(RemoteStream)
    case streamStop(streamID: UInt32)
    case remoteStreamRemoved(userID: UInt32, streamID: UInt32, ssrc: UInt32)
    case streamStateUpdate(ssrc: UInt32, muted: Bool, hold: Bool)
    case serverMuteState(ServerMuteState)
    case rebind(epoch: UInt32)
    case rebindResult(epoch: UInt32)
    case setServerMute(SetServerMute)

    public var type: MessageType {
        switch self {
        case .hello: return .hello
        case .helloResult: return .helloResult
        case .error: return .error
        case .ping: return .ping
        case .pong: return .pong
        case .joinChannel: return .joinChannel
        case .joinChannelResult: return .joinChannelResult
        case .userJoined: return .userJoined
        case .userLeft: return .userLeft
        case .streamAnnounce: return .streamAnnounce
        case .streamAnnounceResult: return .streamAnnounceResult
        case .remoteStreamAdded: return .remoteStreamAdded
        case .streamStop: return .streamStop
        case .remoteStreamRemoved: return .remoteStreamRemoved
        case .streamStateUpdate: return .streamStateUpdate
        case .serverMuteState: return .serverMuteState
        case .rebind: return .rebind
        case .rebindResult: return .rebindResult
        case .setServerMute: return .setServerMute
        }
    }

    /// `u16 type | protobuf body`.
    public func encode() -> [UInt8] {
        var w = ProtoWriter()
        switch self {
        case .hello(let m):
            w.uint(1, m.protoVersion); w.string(2, m.username); w.string(3, m.password); w.string(4, m.clientName)
        case .helloResult(let m):
            w.uint(1, m.sessionID); w.uint(2, m.userID); w.uint(3, m.bindingID); w.string(4, m.serverName)
            for c in m.channels {
                var cw = ProtoWriter()
                cw.uint(1, c.id); cw.string(2, c.name); cw.message(3, c.audio.encode())
                w.message(5, cw.bytes)
            }
        case .error(let m):
            w.uint(1, m.code); w.string(2, m.message); w.uint(3, m.requestID)
        case .ping(let t), .pong(let t):
            w.uint(1, t)
        case .joinChannel(let name, let rid):
            w.string(1, name); w.uint(2, rid)
        case .joinChannelResult(let m):
            w.uint(1, m.channelID); w.message(2, m.audio.encode())
            for mem in m.members { w.message(3, ControlMessage.encodeMember(mem)) }
            w.uint(4, m.requestID)
        case .userJoined(let mem, let ch):
            w.message(1, ControlMessage.encodeMember(mem)); w.uint(2, ch)
        case .userLeft(let uid, let ch):
            w.uint(1, uid); w.uint(2, ch)
        case .streamAnnounce(let m):
            w.uint(1, m.streamID); w.uint(2, m.kind.rawValue); w.uint(3, m.channels); w.uint(4, m.requestID)
        case .streamAnnounceResult(let m):
            w.uint(1, m.streamID); w.uint(2, m.ssrc); w.message(3, m.effectiveAudio.encode()); w.uint(4, m.requestID)
        case .remoteStreamAdded(let m):
            w.uint(1, m.userID); w.uint(2, m.streamID); w.uint(3, m.ssrc); w.uint(4, m.kind.rawValue)
            w.message(5, m.audio.encode())
        case .streamStop(let sid):
            w.uint(1, sid)
        case .remoteStreamRemoved(let uid, let sid, let ssrc):
            w.uint(1, uid); w.uint(2, sid); w.uint(3, ssrc)
        case .streamStateUpdate(let ssrc, let muted, let hold):
            w.uint(1, ssrc); w.bool(2, muted); w.bool(3, hold)
        case .serverMuteState(let m):
            w.uint(1, m.userID); w.bool(2, m.muted); w.bool(3, m.deafened)
        case .rebind(let e), .rebindResult(let e):
            w.uint(1, e)
        case .setServerMute(let m):
            w.uint(1, m.userID); w.bool(2, m.muted); w.bool(3, m.deafened); w.string(4, m.adminPassword)
            w.uint(5, m.requestID)
        }
        var out = [UInt8]()
        out.reserveCapacity(2 + w.bytes.count)
        out.append(UInt8(type.rawValue >> 8)); out.append(UInt8(truncatingIfNeeded: type.rawValue))
        out.append(contentsOf: w.bytes)
        return out
    }

    static func encodeMember(_ m: MemberInfo) -> [UInt8] {
        var w = ProtoWriter()
        w.uint(1, m.userID); w.string(2, m.username); w.bool(3, m.muted); w.bool(4, m.deafened)
        return w.bytes
    }

    static func decodeMember(_ r: ProtoReader) throws(ProtobufError) -> MemberInfo {
        var r = r
        var m = MemberInfo(userID: 0, username: "")
        while let f = try r.next() {
            switch f.number {
            case 1: m.userID = try r.uint32(f)
            case 2: m.username = try r.string(f)
            case 3: m.muted = try r.bool(f)
            case 4: m.deafened = try r.bool(f)
            default: break
            }
        }
        return m
    }

    static func kind(_ v: UInt32, field: Int) throws(ProtobufError) -> StreamKind {
        guard let k = StreamKind(rawValue: v) else { throw .valueOutOfRange(field: field) }
        return k
    }

    /// Decodes `u16 type | protobuf body`.
    public static func decode(_ bytes: [UInt8]) throws(ControlDecodeError) -> ControlMessage {
        guard bytes.count >= 2 else { throw .tooShort }
        let raw = UInt16(bytes[0]) << 8 | UInt16(bytes[1])
        guard let t = MessageType(rawValue: raw) else { throw .unknownType(raw) }
        do {
            return try decodeBody(t, ProtoReader(bytes, 2..<bytes.count))
        } catch {
            throw .body(t, error)
        }
    }

    static func decodeBody(_ t: MessageType, _ reader: ProtoReader) throws(ProtobufError) -> ControlMessage {
        var r = reader
        // Scalars by field number, decoded with the accessor the message expects.
        var u: [Int: UInt64] = [:]
        var s: [Int: String] = [:]
        var audio: AudioConfig? = nil
        var channels: [ChannelInfo] = []
        var members: [MemberInfo] = []
        var member: MemberInfo? = nil
        while let f = try r.next() {
            switch (t, f.number) {
            case (.hello, 2), (.hello, 3), (.hello, 4), (.helloResult, 4), (.error, 2), (.joinChannel, 1),
                 (.setServerMute, 4):
                s[f.number] = try r.string(f)
            case (.helloResult, 5):
                var cr = try r.nested(f)
                var c = ChannelInfo(id: 0, name: "", audio: AudioConfig())
                while let cf = try cr.next() {
                    switch cf.number {
                    case 1: c.id = try cr.uint32(cf)
                    case 2: c.name = try cr.string(cf)
                    case 3: c.audio = try AudioConfig.decode(try cr.nested(cf))
                    default: break
                    }
                }
                channels.append(c)
            case (.joinChannelResult, 2), (.streamAnnounceResult, 3), (.remoteStreamAdded, 5):
                audio = try AudioConfig.decode(try r.nested(f))
            case (.joinChannelResult, 3):
                members.append(try decodeMember(try r.nested(f)))
            case (.userJoined, 1):
                member = try decodeMember(try r.nested(f))
            case (.helloResult, 1), (.ping, 1), (.pong, 1):
                u[f.number] = try r.uint64(f)
            default:
                // Every other known field of these messages is a u32 varint; unknown
                // field numbers are skipped, a wrong wire type is an error.
                if knownScalarFields[t]?.contains(f.number) == true {
                    u[f.number] = UInt64(try r.uint32(f))
                }
            }
        }
        func u32(_ n: Int) -> UInt32 { UInt32(truncatingIfNeeded: u[n] ?? 0) }
        func b(_ n: Int) -> Bool { (u[n] ?? 0) != 0 }
        func str(_ n: Int) -> String { s[n] ?? "" }
        let cfg = audio ?? AudioConfig()
        switch t {
        case .hello:
            return .hello(Hello(protoVersion: u32(1), username: str(2), password: str(3), clientName: str(4)))
        case .helloResult:
            return .helloResult(HelloResult(sessionID: u[1] ?? 0, userID: u32(2), bindingID: u32(3),
                                            serverName: str(4), channels: channels))
        case .error:
            return .error(ErrorMessage(rawCode: u32(1), message: str(2), requestID: u32(3)))
        case .ping: return .ping(timestamp: u[1] ?? 0)
        case .pong: return .pong(timestamp: u[1] ?? 0)
        case .joinChannel: return .joinChannel(name: str(1), requestID: u32(2))
        case .joinChannelResult:
            return .joinChannelResult(JoinChannelResult(channelID: u32(1), audio: cfg, members: members, requestID: u32(4)))
        case .userJoined:
            return .userJoined(member ?? MemberInfo(userID: 0, username: ""), channelID: u32(2))
        case .userLeft: return .userLeft(userID: u32(1), channelID: u32(2))
        case .streamAnnounce:
            return .streamAnnounce(StreamAnnounce(streamID: u32(1), kind: try kind(u32(2), field: 2),
                                                  channels: u32(3), requestID: u32(4)))
        case .streamAnnounceResult:
            return .streamAnnounceResult(StreamAnnounceResult(streamID: u32(1), ssrc: u32(2), effectiveAudio: cfg,
                                                              requestID: u32(4)))
        case .remoteStreamAdded:
            return .remoteStreamAdded(RemoteStream(userID: u32(1), streamID: u32(2), ssrc: u32(3),
                                                   kind: try kind(u32(4), field: 4), audio: cfg))
        case .streamStop: return .streamStop(streamID: u32(1))
        case .remoteStreamRemoved: return .remoteStreamRemoved(userID: u32(1), streamID: u32(2), ssrc: u32(3))
        case .streamStateUpdate: return .streamStateUpdate(ssrc: u32(1), muted: b(2), hold: b(3))
        case .serverMuteState: return .serverMuteState(ServerMuteState(userID: u32(1), muted: b(2), deafened: b(3)))
        case .rebind: return .rebind(epoch: u32(1))
        case .rebindResult: return .rebindResult(epoch: u32(1))
        case .setServerMute:
            return .setServerMute(SetServerMute(userID: u32(1), muted: b(2), deafened: b(3),
                                                adminPassword: str(4), requestID: u32(5)))
        }
    }

    /// The u32/bool varint fields of each message (everything not handled above).
    static let knownScalarFields: [MessageType: Set<Int>] = [
        .hello: [1], .helloResult: [2, 3], .error: [1, 3], .joinChannel: [2],
        .joinChannelResult: [1, 4], .userJoined: [2], .userLeft: [1, 2],
        .streamAnnounce: [1, 2, 3, 4], .streamAnnounceResult: [1, 2, 4],
        .remoteStreamAdded: [1, 2, 3, 4], .streamStop: [1], .remoteStreamRemoved: [1, 2, 3],
        .streamStateUpdate: [1, 2, 3], .serverMuteState: [1, 2, 3], .rebind: [1], .rebindResult: [1],
        .setServerMute: [1, 2, 3, 5],
    ]
}
