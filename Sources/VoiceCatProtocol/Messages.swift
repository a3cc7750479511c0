// Control messages (PROTOCOL.md §2). A control frame's plaintext is
// `u16 message type (big-endian) | protobuf body`. Each message is a struct that
// writes and reads its own fields (field numbers live only there, next to each
// other); `ControlMessage` is the sum of them. docs/protocol.md lists the same
// numbers for readers of the wire; keep the two in step.

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
    /// Sent to a session an admin removed (`KickUser`), just before the server closes it.
    case kicked = 11
    /// Sent to every session when the server stops (SIGTERM, SIGINT), just before it
    /// closes the connection: a client that reconnects by itself goes on trying.
    case shuttingDown = 12
}

/// A protobuf message: writes its fields and reads them back. Unknown fields are
/// skipped on reading; a known field with the wrong wire type is an error.
public protocol ProtoMessage: Equatable, Sendable {
    func encode(into w: inout ProtoWriter)
    static func decode(_ r: ProtoReader) throws(ProtobufError) -> Self
}

extension ProtoMessage {
    /// The protobuf body alone.
    public var protobufBytes: [UInt8] {
        var w = ProtoWriter()
        encode(into: &w)
        return w.bytes
    }
}

extension ProtoWriter {
    /// One element of a repeated varint field, written unpacked (zero included).
    mutating func repeatedUint(_ field: Int, _ v: UInt32) {
        key(field, .varint); rawVarint(UInt64(v))
    }
}

extension ProtoMessage {
    /// This message as one element of the repeated message field `field` (tag, length,
    /// body). A list message's plaintext may be built by appending such entries to the
    /// encoding of the message with an empty list: protobuf fields may come in any order.
    public func encoded(asField field: Int) -> [UInt8] {
        var w = ProtoWriter()
        w.message(field, self)
        return w.bytes
    }
}

extension ProtoReader {
    /// The elements of a repeated u32 field: one per unpacked field, or all of a packed one.
    func appendUInt32s(_ f: ProtoField, to out: inout [UInt32]) throws(ProtobufError) {
        guard f.wireType == .lengthDelimited else { out.append(try uint32(f)); return }
        var sub = ProtoReader(bytes, f.range)
        while sub.pos < sub.end {
            let v = try sub.varint()
            guard v <= UInt64(UInt32.max) else { throw .valueOutOfRange(field: f.number) }
            out.append(UInt32(v))
        }
    }
}

/// A top-level control message: a protobuf message with its type number.
public protocol ControlBody: ProtoMessage {
    static var messageType: MessageType { get }
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
    case channelList = 20
    case memberList = 21
    case usersJoined = 22
    case usersLeft = 23
    // Loss feedback (issue #16); 26–29 are left for more media feedback.
    case receiverReport = 24
    case lossFeedback = 25
    // Presence and admin.
    case userList = 30
    case presenceUpdate = 31
    case kickUser = 32
    case adminResult = 33
}

extension ProtoReader {
    /// Calls `body` with every field of the message, in order (read the field's value
    /// with this reader's accessors; they do not depend on the position).
    public func forEachField(_ body: (ProtoField) throws(ProtobufError) -> Void) throws(ProtobufError) {
        var it = self
        while let f = try it.next() { try body(f) }
    }
}

extension StreamKind {
    static func decode(_ v: UInt32, field: Int) throws(ProtobufError) -> StreamKind {
        guard let k = StreamKind(rawValue: v) else { throw .valueOutOfRange(field: field) }
        return k
    }
}

// MARK: - nested messages

extension AudioConfig: ProtoMessage {}

public struct ChannelInfo: ProtoMessage {
    public var id: UInt32
    public var name: String
    public var audio: AudioConfig
    public init(id: UInt32, name: String, audio: AudioConfig) { self.id = id; self.name = name; self.audio = audio }

    public func encode(into w: inout ProtoWriter) {
        w.uint(1, id); w.string(2, name); w.message(3, audio)
    }
    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> ChannelInfo {
        var m = ChannelInfo(id: 0, name: "", audio: AudioConfig())
        try r.forEachField { f throws(ProtobufError) in
            switch f.number {
            case 1: m.id = try r.uint32(f)
            case 2: m.name = try r.string(f)
            case 3: m.audio = try AudioConfig.decode(r.nested(f))
            default: break
            }
        }
        return m
    }
}

public struct MemberInfo: ProtoMessage {
    public var userID: UInt32
    public var username: String
    public var muted: Bool
    public var deafened: Bool
    public init(userID: UInt32, username: String, muted: Bool = false, deafened: Bool = false) {
        self.userID = userID; self.username = username; self.muted = muted; self.deafened = deafened
    }

    public func encode(into w: inout ProtoWriter) {
        w.uint(1, userID); w.string(2, username); w.bool(3, muted); w.bool(4, deafened)
    }
    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> MemberInfo {
        var m = MemberInfo(userID: 0, username: "")
        try r.forEachField { f throws(ProtobufError) in
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
}

// MARK: - control messages

public struct Hello: ControlBody {
    public static let messageType = MessageType.hello
    public var protoVersion: UInt32 = 2
    public var username: String = ""
    public var password: String = ""
    public var clientName: String = ""
    /// Asks for the server's roster: every session and the channel it is in, then the
    /// changes (`UserList`, `PresenceUpdate`).
    public var presence: Bool = false
    /// The `resume_token` of a session of this username that this client had (its
    /// reconnect): the server ends that session, still open on its side, in favour of
    /// this one instead of refusing the username (empty: none).
    public var resumeToken: [UInt8] = []
    public init(protoVersion: UInt32 = 2, username: String, password: String = "", clientName: String = "", presence: Bool = false,
                resumeToken: [UInt8] = []) {
        self.protoVersion = protoVersion; self.username = username; self.password = password; self.clientName = clientName
        self.presence = presence; self.resumeToken = resumeToken
    }

    public func encode(into w: inout ProtoWriter) {
        w.uint(1, protoVersion); w.string(2, username); w.string(3, password); w.string(4, clientName); w.bool(5, presence)
        w.bytesField(6, resumeToken)
    }
    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> Hello {
        var m = Hello(protoVersion: 0, username: "")
        try r.forEachField { f throws(ProtobufError) in
            switch f.number {
            case 1: m.protoVersion = try r.uint32(f)
            case 2: m.username = try r.string(f)
            case 3: m.password = try r.string(f)
            case 4: m.clientName = try r.string(f)
            case 5: m.presence = try r.bool(f)
            case 6: m.resumeToken = try r.bytesValue(f)
            default: break
            }
        }
        return m
    }
}

public struct HelloResult: ControlBody {
    public static let messageType = MessageType.helloResult
    public var sessionID: UInt64
    public var userID: UInt32
    public var bindingID: UInt32
    public var serverName: String
    public var channels: [ChannelInfo]
    /// The largest UDP datagram the server accepts (its `max_datagram_bytes`); 0 = not
    /// said (an older server: assume 1400). Senders size their frames to fit it.
    public var maxDatagramBytes: UInt32
    /// More of the channel list follows in `ChannelList` messages (a list that does not
    /// fit one control frame is split).
    public var moreChannels: Bool
    /// The roster follows the channel list in `UserList` messages (the client asked for it
    /// in `Hello.presence`), and `PresenceUpdate`s follow as things change.
    public var presence: Bool
    /// A secret of this session (16 random bytes), for the client's reconnect to name
    /// it in `Hello.resume_token` (empty: an older server).
    public var resumeToken: [UInt8] = []
    /// Field number of `channels`, here and in `ChannelList`.
    public static let channelsField = 5
    /// Field number of `more_channels`, here and (as `more`) in `ChannelList`.
    public static let moreField = 7
    public init(sessionID: UInt64, userID: UInt32, bindingID: UInt32, serverName: String, channels: [ChannelInfo],
                maxDatagramBytes: UInt32 = 0, moreChannels: Bool = false, presence: Bool = false, resumeToken: [UInt8] = []) {
        self.sessionID = sessionID; self.userID = userID; self.bindingID = bindingID
        self.serverName = serverName; self.channels = channels; self.maxDatagramBytes = maxDatagramBytes
        self.moreChannels = moreChannels; self.presence = presence; self.resumeToken = resumeToken
    }

    public func encode(into w: inout ProtoWriter) {
        w.uint(1, sessionID); w.uint(2, userID); w.uint(3, bindingID); w.string(4, serverName)
        for c in channels { w.message(HelloResult.channelsField, c) }
        w.uint(6, maxDatagramBytes)
        w.bool(HelloResult.moreField, moreChannels)
        w.bool(8, presence)
        w.bytesField(9, resumeToken)
    }
    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> HelloResult {
        var m = HelloResult(sessionID: 0, userID: 0, bindingID: 0, serverName: "", channels: [])
        try r.forEachField { f throws(ProtobufError) in
            switch f.number {
            case 1: m.sessionID = try r.uint64(f)
            case 2: m.userID = try r.uint32(f)
            case 3: m.bindingID = try r.uint32(f)
            case 4: m.serverName = try r.string(f)
            case HelloResult.channelsField: m.channels.append(try ChannelInfo.decode(r.nested(f)))
            case 6: m.maxDatagramBytes = try r.uint32(f)
            case HelloResult.moreField: m.moreChannels = try r.bool(f)
            case 8: m.presence = try r.bool(f)
            case 9: m.resumeToken = try r.bytesValue(f)
            default: break
            }
        }
        return m
    }
}

public struct ErrorMessage: ControlBody {
    public static let messageType = MessageType.error
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

    public func encode(into w: inout ProtoWriter) {
        w.uint(1, code); w.string(2, message); w.uint(3, requestID)
    }
    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> ErrorMessage {
        var m = ErrorMessage(rawCode: 0, message: "", requestID: 0)
        try r.forEachField { f throws(ProtobufError) in
            switch f.number {
            case 1: m.code = try r.uint32(f)
            case 2: m.message = try r.string(f)
            case 3: m.requestID = try r.uint32(f)
            default: break
            }
        }
        return m
    }
}

/// Ping and Pong: `timestamp` is the sender's millisecond clock, echoed back.
public struct Ping: ControlBody {
    public static let messageType = MessageType.ping
    public var timestamp: UInt64
    public init(timestamp: UInt64) { self.timestamp = timestamp }

    public func encode(into w: inout ProtoWriter) { w.uint(1, timestamp) }
    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> Ping {
        Ping(timestamp: try decodeTimestamp(r))
    }
    static func decodeTimestamp(_ r: ProtoReader) throws(ProtobufError) -> UInt64 {
        var t: UInt64 = 0
        try r.forEachField { f throws(ProtobufError) in if f.number == 1 { t = try r.uint64(f) } }
        return t
    }
}

public struct Pong: ControlBody {
    public static let messageType = MessageType.pong
    public var timestamp: UInt64
    public init(timestamp: UInt64) { self.timestamp = timestamp }

    public func encode(into w: inout ProtoWriter) { w.uint(1, timestamp) }
    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> Pong {
        Pong(timestamp: try Ping.decodeTimestamp(r))
    }
}

public struct JoinChannel: ControlBody {
    public static let messageType = MessageType.joinChannel
    public var name: String
    public var requestID: UInt32
    public init(name: String, requestID: UInt32 = 0) { self.name = name; self.requestID = requestID }

    public func encode(into w: inout ProtoWriter) { w.string(1, name); w.uint(2, requestID) }
    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> JoinChannel {
        var m = JoinChannel(name: "")
        try r.forEachField { f throws(ProtobufError) in
            switch f.number {
            case 1: m.name = try r.string(f)
            case 2: m.requestID = try r.uint32(f)
            default: break
            }
        }
        return m
    }
}

public struct JoinChannelResult: ControlBody {
    public static let messageType = MessageType.joinChannelResult
    public var channelID: UInt32
    public var audio: AudioConfig
    public var members: [MemberInfo]
    public var requestID: UInt32
    /// More of the member list follows in `MemberList` messages.
    public var moreMembers: Bool
    /// Field number of member lists: here, in `MemberList` and in `UsersJoined`, so one
    /// encoded entry (`MemberInfo.encoded(asField:)`) fits all three.
    public static let membersField = 3
    public init(channelID: UInt32, audio: AudioConfig, members: [MemberInfo], requestID: UInt32 = 0, moreMembers: Bool = false) {
        self.channelID = channelID; self.audio = audio; self.members = members; self.requestID = requestID
        self.moreMembers = moreMembers
    }

    public func encode(into w: inout ProtoWriter) {
        w.uint(1, channelID); w.message(2, audio)
        for mem in members { w.message(JoinChannelResult.membersField, mem) }
        w.uint(4, requestID); w.bool(5, moreMembers)
    }
    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> JoinChannelResult {
        var m = JoinChannelResult(channelID: 0, audio: AudioConfig.decodedEmpty, members: [])
        try r.forEachField { f throws(ProtobufError) in
            switch f.number {
            case 1: m.channelID = try r.uint32(f)
            case 2: m.audio = try AudioConfig.decode(r.nested(f))
            case JoinChannelResult.membersField: m.members.append(try MemberInfo.decode(r.nested(f)))
            case 4: m.requestID = try r.uint32(f)
            case 5: m.moreMembers = try r.bool(f)
            default: break
            }
        }
        return m
    }
}

public struct UserJoined: ControlBody {
    public static let messageType = MessageType.userJoined
    public var member: MemberInfo
    public var channelID: UInt32
    public init(member: MemberInfo, channelID: UInt32) { self.member = member; self.channelID = channelID }

    public func encode(into w: inout ProtoWriter) { w.message(1, member); w.uint(2, channelID) }
    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> UserJoined {
        var m = UserJoined(member: MemberInfo(userID: 0, username: ""), channelID: 0)
        try r.forEachField { f throws(ProtobufError) in
            switch f.number {
            case 1: m.member = try MemberInfo.decode(r.nested(f))
            case 2: m.channelID = try r.uint32(f)
            default: break
            }
        }
        return m
    }
}

public struct UserLeft: ControlBody {
    public static let messageType = MessageType.userLeft
    public var userID: UInt32
    public var channelID: UInt32
    public init(userID: UInt32, channelID: UInt32) { self.userID = userID; self.channelID = channelID }

    public func encode(into w: inout ProtoWriter) { w.uint(1, userID); w.uint(2, channelID) }
    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> UserLeft {
        var m = UserLeft(userID: 0, channelID: 0)
        try r.forEachField { f throws(ProtobufError) in
            switch f.number {
            case 1: m.userID = try r.uint32(f)
            case 2: m.channelID = try r.uint32(f)
            default: break
            }
        }
        return m
    }
}

public struct StreamAnnounce: ControlBody {
    public static let messageType = MessageType.streamAnnounce
    public var streamID: UInt32
    public var kind: StreamKind
    public var channels: UInt32
    public var requestID: UInt32
    public init(streamID: UInt32, kind: StreamKind, channels: UInt32, requestID: UInt32 = 0) {
        self.streamID = streamID; self.kind = kind; self.channels = channels; self.requestID = requestID
    }

    public func encode(into w: inout ProtoWriter) {
        w.uint(1, streamID); w.uint(2, kind.rawValue); w.uint(3, channels); w.uint(4, requestID)
    }
    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> StreamAnnounce {
        var m = StreamAnnounce(streamID: 0, kind: .mic, channels: 0)
        try r.forEachField { f throws(ProtobufError) in
            switch f.number {
            case 1: m.streamID = try r.uint32(f)
            case 2: m.kind = try StreamKind.decode(r.uint32(f), field: 2)
            case 3: m.channels = try r.uint32(f)
            case 4: m.requestID = try r.uint32(f)
            default: break
            }
        }
        return m
    }
}

public struct StreamAnnounceResult: ControlBody {
    public static let messageType = MessageType.streamAnnounceResult
    public var streamID: UInt32
    public var ssrc: UInt32
    public var effectiveAudio: AudioConfig
    public var requestID: UInt32
    public init(streamID: UInt32, ssrc: UInt32, effectiveAudio: AudioConfig, requestID: UInt32 = 0) {
        self.streamID = streamID; self.ssrc = ssrc; self.effectiveAudio = effectiveAudio; self.requestID = requestID
    }

    public func encode(into w: inout ProtoWriter) {
        w.uint(1, streamID); w.uint(2, ssrc); w.message(3, effectiveAudio); w.uint(4, requestID)
    }
    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> StreamAnnounceResult {
        var m = StreamAnnounceResult(streamID: 0, ssrc: 0, effectiveAudio: AudioConfig.decodedEmpty)
        try r.forEachField { f throws(ProtobufError) in
            switch f.number {
            case 1: m.streamID = try r.uint32(f)
            case 2: m.ssrc = try r.uint32(f)
            case 3: m.effectiveAudio = try AudioConfig.decode(r.nested(f))
            case 4: m.requestID = try r.uint32(f)
            default: break
            }
        }
        return m
    }
}

/// RemoteStreamAdded: another member's stream in the channel.
public struct RemoteStream: ControlBody {
    public static let messageType = MessageType.remoteStreamAdded
    public var userID: UInt32
    public var streamID: UInt32
    public var ssrc: UInt32
    public var kind: StreamKind
    public var audio: AudioConfig
    public init(userID: UInt32, streamID: UInt32, ssrc: UInt32, kind: StreamKind, audio: AudioConfig) {
        self.userID = userID; self.streamID = streamID; self.ssrc = ssrc; self.kind = kind; self.audio = audio
    }

    public func encode(into w: inout ProtoWriter) {
        w.uint(1, userID); w.uint(2, streamID); w.uint(3, ssrc); w.uint(4, kind.rawValue); w.message(5, audio)
    }
    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> RemoteStream {
        var m = RemoteStream(userID: 0, streamID: 0, ssrc: 0, kind: .mic, audio: AudioConfig.decodedEmpty)
        try r.forEachField { f throws(ProtobufError) in
            switch f.number {
            case 1: m.userID = try r.uint32(f)
            case 2: m.streamID = try r.uint32(f)
            case 3: m.ssrc = try r.uint32(f)
            case 4: m.kind = try StreamKind.decode(r.uint32(f), field: 4)
            case 5: m.audio = try AudioConfig.decode(r.nested(f))
            default: break
            }
        }
        return m
    }
}

public struct StreamStop: ControlBody {
    public static let messageType = MessageType.streamStop
    public var streamID: UInt32
    public init(streamID: UInt32) { self.streamID = streamID }

    public func encode(into w: inout ProtoWriter) { w.uint(1, streamID) }
    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> StreamStop {
        var m = StreamStop(streamID: 0)
        try r.forEachField { f throws(ProtobufError) in if f.number == 1 { m.streamID = try r.uint32(f) } }
        return m
    }
}

public struct RemoteStreamRemoved: ControlBody {
    public static let messageType = MessageType.remoteStreamRemoved
    public var userID: UInt32
    public var streamID: UInt32
    public var ssrc: UInt32
    public init(userID: UInt32, streamID: UInt32, ssrc: UInt32) { self.userID = userID; self.streamID = streamID; self.ssrc = ssrc }

    public func encode(into w: inout ProtoWriter) { w.uint(1, userID); w.uint(2, streamID); w.uint(3, ssrc) }
    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> RemoteStreamRemoved {
        var m = RemoteStreamRemoved(userID: 0, streamID: 0, ssrc: 0)
        try r.forEachField { f throws(ProtobufError) in
            switch f.number {
            case 1: m.userID = try r.uint32(f)
            case 2: m.streamID = try r.uint32(f)
            case 3: m.ssrc = try r.uint32(f)
            default: break
            }
        }
        return m
    }
}

/// A publisher's UI state for one of its streams (seed §7).
public struct StreamStateUpdate: ControlBody {
    public static let messageType = MessageType.streamStateUpdate
    public var ssrc: UInt32
    public var muted: Bool
    public var hold: Bool
    public init(ssrc: UInt32, muted: Bool, hold: Bool) { self.ssrc = ssrc; self.muted = muted; self.hold = hold }

    public func encode(into w: inout ProtoWriter) { w.uint(1, ssrc); w.bool(2, muted); w.bool(3, hold) }
    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> StreamStateUpdate {
        var m = StreamStateUpdate(ssrc: 0, muted: false, hold: false)
        try r.forEachField { f throws(ProtobufError) in
            switch f.number {
            case 1: m.ssrc = try r.uint32(f)
            case 2: m.muted = try r.bool(f)
            case 3: m.hold = try r.bool(f)
            default: break
            }
        }
        return m
    }
}

public struct ServerMuteState: ControlBody {
    public static let messageType = MessageType.serverMuteState
    public var userID: UInt32
    public var muted: Bool
    public var deafened: Bool
    public init(userID: UInt32, muted: Bool, deafened: Bool) { self.userID = userID; self.muted = muted; self.deafened = deafened }

    public func encode(into w: inout ProtoWriter) { w.uint(1, userID); w.bool(2, muted); w.bool(3, deafened) }
    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> ServerMuteState {
        var m = ServerMuteState(userID: 0, muted: false, deafened: false)
        try r.forEachField { f throws(ProtobufError) in
            switch f.number {
            case 1: m.userID = try r.uint32(f)
            case 2: m.muted = try r.bool(f)
            case 3: m.deafened = try r.bool(f)
            default: break
            }
        }
        return m
    }
}

/// Rebind (client → server) asks for media keys of a new epoch; RebindResult grants it.
public struct Rebind: ControlBody {
    public static let messageType = MessageType.rebind
    public var epoch: UInt32
    public init(epoch: UInt32) { self.epoch = epoch }

    public func encode(into w: inout ProtoWriter) { w.uint(1, epoch) }
    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> Rebind { Rebind(epoch: try decodeEpoch(r)) }
    static func decodeEpoch(_ r: ProtoReader) throws(ProtobufError) -> UInt32 {
        var e: UInt32 = 0
        try r.forEachField { f throws(ProtobufError) in if f.number == 1 { e = try r.uint32(f) } }
        return e
    }
}

public struct RebindResult: ControlBody {
    public static let messageType = MessageType.rebindResult
    public var epoch: UInt32
    public init(epoch: UInt32) { self.epoch = epoch }

    public func encode(into w: inout ProtoWriter) { w.uint(1, epoch) }
    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> RebindResult { RebindResult(epoch: try Rebind.decodeEpoch(r)) }
}

public struct SetServerMute: ControlBody {
    public static let messageType = MessageType.setServerMute
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

    public func encode(into w: inout ProtoWriter) {
        w.uint(1, userID); w.bool(2, muted); w.bool(3, deafened); w.string(4, adminPassword); w.uint(5, requestID)
    }
    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> SetServerMute {
        var m = SetServerMute(userID: 0, muted: false, deafened: false, adminPassword: "")
        try r.forEachField { f throws(ProtobufError) in
            switch f.number {
            case 1: m.userID = try r.uint32(f)
            case 2: m.muted = try r.bool(f)
            case 3: m.deafened = try r.bool(f)
            case 4: m.adminPassword = try r.string(f)
            case 5: m.requestID = try r.uint32(f)
            default: break
            }
        }
        return m
    }
}

// MARK: - lists split over several messages (project)

/// The rest of a channel list that did not fit in `HelloResult`; sent right after it.
/// Fields use `HelloResult`'s numbers.
public struct ChannelList: ControlBody {
    public static let messageType = MessageType.channelList
    public var channels: [ChannelInfo]
    /// Another `ChannelList` follows.
    public var more: Bool
    public init(channels: [ChannelInfo], more: Bool) { self.channels = channels; self.more = more }

    public func encode(into w: inout ProtoWriter) {
        for c in channels { w.message(HelloResult.channelsField, c) }
        w.bool(HelloResult.moreField, more)
    }
    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> ChannelList {
        var m = ChannelList(channels: [], more: false)
        try r.forEachField { f throws(ProtobufError) in
            switch f.number {
            case HelloResult.channelsField: m.channels.append(try ChannelInfo.decode(r.nested(f)))
            case HelloResult.moreField: m.more = try r.bool(f)
            default: break
            }
        }
        return m
    }
}

/// The rest of a member list that did not fit in `JoinChannelResult`; sent right after
/// it. Fields use `JoinChannelResult`'s numbers.
public struct MemberList: ControlBody {
    public static let messageType = MessageType.memberList
    public var channelID: UInt32
    public var members: [MemberInfo]
    public var requestID: UInt32
    /// Another `MemberList` follows.
    public var more: Bool
    public init(channelID: UInt32, members: [MemberInfo], requestID: UInt32 = 0, more: Bool) {
        self.channelID = channelID; self.members = members; self.requestID = requestID; self.more = more
    }

    public func encode(into w: inout ProtoWriter) {
        w.uint(1, channelID)
        for mem in members { w.message(JoinChannelResult.membersField, mem) }
        w.uint(4, requestID); w.bool(5, more)
    }
    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> MemberList {
        var m = MemberList(channelID: 0, members: [], more: false)
        try r.forEachField { f throws(ProtobufError) in
            switch f.number {
            case 1: m.channelID = try r.uint32(f)
            case JoinChannelResult.membersField: m.members.append(try MemberInfo.decode(r.nested(f)))
            case 4: m.requestID = try r.uint32(f)
            case 5: m.more = try r.bool(f)
            default: break
            }
        }
        return m
    }
}

extension HelloResult {
    /// Appends the next part of its split channel list, in place (a copy per part made
    /// a long list quadratic); why it cannot, or nil: none is expected, or the list
    /// would pass ServerMessageLimits.maxChannels.
    public mutating func append(_ part: ChannelList) -> String? {
        guard moreChannels else { return "no split channel list is being received" }
        guard part.channels.count <= ServerMessageLimits.maxChannels - channels.count else {
            return "over \(ServerMessageLimits.maxChannels) channels"
        }
        channels += part.channels
        moreChannels = part.more
        return nil
    }
}

extension JoinChannelResult {
    /// Appends the next part of its split member list, in place (a copy per part made a
    /// long list quadratic); why it cannot, or nil: none is expected, the part belongs
    /// to another channel or request, or the list would pass
    /// ServerMessageLimits.maxMembers. Each part's entries are judged as a message of
    /// their own (serverMessageProblem), so the whole need not be judged again.
    public mutating func append(_ part: MemberList) -> String? {
        guard moreMembers, part.channelID == channelID, part.requestID == requestID else {
            return "no split member list is being received for channel \(part.channelID) (request \(part.requestID))"
        }
        guard part.members.count <= ServerMessageLimits.maxMembers - members.count else {
            return "over \(ServerMessageLimits.maxMembers) members in channel \(channelID)"
        }
        members += part.members
        moreMembers = part.more
        return nil
    }
}

/// Several members joined the channel at once (in one turn of the server's loop): one
/// message instead of a `UserJoined` each. Fields follow `UserJoined` (2) and the member
/// lists (3).
public struct UsersJoined: ControlBody {
    public static let messageType = MessageType.usersJoined
    public var channelID: UInt32
    public var members: [MemberInfo]
    public init(channelID: UInt32, members: [MemberInfo]) { self.channelID = channelID; self.members = members }

    public func encode(into w: inout ProtoWriter) {
        w.uint(2, channelID)
        for mem in members { w.message(JoinChannelResult.membersField, mem) }
    }
    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> UsersJoined {
        var m = UsersJoined(channelID: 0, members: [])
        try r.forEachField { f throws(ProtobufError) in
            switch f.number {
            case 2: m.channelID = try r.uint32(f)
            case JoinChannelResult.membersField: m.members.append(try MemberInfo.decode(r.nested(f)))
            default: break
            }
        }
        return m
    }
}

/// Several members left the channel at once: one message instead of a `UserLeft` each.
/// `user_ids` is a repeated u32 (written unpacked; packed is read too).
public struct UsersLeft: ControlBody {
    public static let messageType = MessageType.usersLeft
    public var channelID: UInt32
    public var userIDs: [UInt32]
    public static let userIDsField = 3
    public init(channelID: UInt32, userIDs: [UInt32]) { self.channelID = channelID; self.userIDs = userIDs }

    public func encode(into w: inout ProtoWriter) {
        w.uint(2, channelID)
        for u in userIDs { w.repeatedUint(UsersLeft.userIDsField, u) }
    }
    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> UsersLeft {
        var m = UsersLeft(channelID: 0, userIDs: [])
        try r.forEachField { f throws(ProtobufError) in
            switch f.number {
            case 2: m.channelID = try r.uint32(f)
            case UsersLeft.userIDsField: try r.appendUInt32s(f, to: &m.userIDs)
            default: break
            }
        }
        return m
    }

    /// One user id as an element of `user_ids` (see `ProtoMessage.encoded(asField:)`).
    public static func encodedEntry(_ userID: UInt32) -> [UInt8] {
        var w = ProtoWriter()
        w.repeatedUint(userIDsField, userID)
        return w.bytes
    }
}

// MARK: - presence and admin requests (project)

/// One published stream in the roster.
public struct StreamPresence: ProtoMessage {
    public var streamID: UInt32
    public var ssrc: UInt32
    public var kind: StreamKind
    /// The publisher's own state of the stream (its last `StreamStateUpdate`).
    public var muted: Bool
    public var hold: Bool
    public init(streamID: UInt32, ssrc: UInt32, kind: StreamKind, muted: Bool = false, hold: Bool = false) {
        self.streamID = streamID; self.ssrc = ssrc; self.kind = kind; self.muted = muted; self.hold = hold
    }

    public func encode(into w: inout ProtoWriter) {
        w.uint(1, streamID); w.uint(2, ssrc); w.uint(3, kind.rawValue); w.bool(4, muted); w.bool(5, hold)
    }
    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> StreamPresence {
        var m = StreamPresence(streamID: 0, ssrc: 0, kind: .mic)
        try r.forEachField { f throws(ProtobufError) in
            switch f.number {
            case 1: m.streamID = try r.uint32(f)
            case 2: m.ssrc = try r.uint32(f)
            case 3: m.kind = try StreamKind.decode(r.uint32(f), field: 3)
            case 4: m.muted = try r.bool(f)
            case 5: m.hold = try r.bool(f)
            default: break
            }
        }
        return m
    }
}

/// One session in the roster: the whole record (a change sends it again, whole), or
/// `gone` with only the user id when the session ended.
public struct UserPresence: ProtoMessage {
    public var userID: UInt32
    public var username: String
    /// The channel the user is in; 0 = none.
    public var channelID: UInt32
    public var muted: Bool
    public var deafened: Bool
    public var streams: [StreamPresence]
    public var gone: Bool
    public init(userID: UInt32, username: String, channelID: UInt32 = 0, muted: Bool = false, deafened: Bool = false,
                streams: [StreamPresence] = [], gone: Bool = false) {
        self.userID = userID; self.username = username; self.channelID = channelID; self.muted = muted
        self.deafened = deafened; self.streams = streams; self.gone = gone
    }

    public func encode(into w: inout ProtoWriter) {
        w.uint(1, userID); w.string(2, username); w.uint(3, channelID); w.bool(4, muted); w.bool(5, deafened)
        for st in streams { w.message(6, st) }
        w.bool(7, gone)
    }
    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> UserPresence {
        var m = UserPresence(userID: 0, username: "")
        try r.forEachField { f throws(ProtobufError) in
            switch f.number {
            case 1: m.userID = try r.uint32(f)
            case 2: m.username = try r.string(f)
            case 3: m.channelID = try r.uint32(f)
            case 4: m.muted = try r.bool(f)
            case 5: m.deafened = try r.bool(f)
            case 6: m.streams.append(try StreamPresence.decode(r.nested(f)))
            case 7: m.gone = try r.bool(f)
            default: break
            }
        }
        return m
    }
}

/// The roster at login, after the channel list, for a client that asked
/// (`Hello.presence`): split over several messages like the other lists.
public struct UserList: ControlBody {
    public static let messageType = MessageType.userList
    public var users: [UserPresence]
    /// Another `UserList` follows.
    public var more: Bool
    /// Field number of the user records, here and in `PresenceUpdate`.
    public static let usersField = 1
    public static let moreField = 2
    public init(users: [UserPresence], more: Bool) { self.users = users; self.more = more }

    public func encode(into w: inout ProtoWriter) {
        for u in users { w.message(UserList.usersField, u) }
        w.bool(UserList.moreField, more)
    }
    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> UserList {
        var m = UserList(users: [], more: false)
        try r.forEachField { f throws(ProtobufError) in
            switch f.number {
            case UserList.usersField: m.users.append(try UserPresence.decode(r.nested(f)))
            case UserList.moreField: m.more = try r.bool(f)
            default: break
            }
        }
        return m
    }
}

/// Changes of the roster, coalesced: user records (whole, in the order they changed;
/// `gone` for a session that ended), channels added by a reload (field 5, as in
/// `HelloResult`) and channels a reload retired (field 6). A long one is split over
/// several messages, each standing alone.
public struct PresenceUpdate: ControlBody {
    public static let messageType = MessageType.presenceUpdate
    public var users: [UserPresence]
    public var channels: [ChannelInfo]
    public var removedChannelIDs: [UInt32]
    public static let removedChannelsField = 6
    public init(users: [UserPresence] = [], channels: [ChannelInfo] = [], removedChannelIDs: [UInt32] = []) {
        self.users = users; self.channels = channels; self.removedChannelIDs = removedChannelIDs
    }

    public func encode(into w: inout ProtoWriter) {
        for u in users { w.message(UserList.usersField, u) }
        for c in channels { w.message(HelloResult.channelsField, c) }
        for id in removedChannelIDs { w.repeatedUint(PresenceUpdate.removedChannelsField, id) }
    }
    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> PresenceUpdate {
        var m = PresenceUpdate()
        try r.forEachField { f throws(ProtobufError) in
            switch f.number {
            case UserList.usersField: m.users.append(try UserPresence.decode(r.nested(f)))
            case HelloResult.channelsField: m.channels.append(try ChannelInfo.decode(r.nested(f)))
            case PresenceUpdate.removedChannelsField: try r.appendUInt32s(f, to: &m.removedChannelIDs)
            default: break
            }
        }
        return m
    }

    /// A retired channel id as an element of `removed_channel_ids`.
    public static func removedChannelEntry(_ id: UInt32) -> [UInt8] {
        var w = ProtoWriter()
        w.repeatedUint(removedChannelsField, id)
        return w.bytes
    }
}

/// An admin removes a session from the server (client → server), with the admin
/// password as `SetServerMute`. The target gets `Error{kicked}` and is closed.
public struct KickUser: ControlBody {
    public static let messageType = MessageType.kickUser
    public var userID: UInt32
    public var adminPassword: String
    /// Shown to the one removed.
    public var reason: String
    public var requestID: UInt32
    public init(userID: UInt32, adminPassword: String, reason: String = "", requestID: UInt32 = 0) {
        self.userID = userID; self.adminPassword = adminPassword; self.reason = reason; self.requestID = requestID
    }

    public func encode(into w: inout ProtoWriter) {
        w.uint(1, userID); w.string(2, adminPassword); w.string(3, reason); w.uint(4, requestID)
    }
    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> KickUser {
        var m = KickUser(userID: 0, adminPassword: "")
        try r.forEachField { f throws(ProtobufError) in
            switch f.number {
            case 1: m.userID = try r.uint32(f)
            case 2: m.adminPassword = try r.string(f)
            case 3: m.reason = try r.string(f)
            case 4: m.requestID = try r.uint32(f)
            default: break
            }
        }
        return m
    }
}

/// An admin request (`SetServerMute`, `KickUser`) was carried out (server → client);
/// a refused one is answered with `Error` instead.
public struct AdminResult: ControlBody {
    public static let messageType = MessageType.adminResult
    public var requestID: UInt32
    /// The user the request named.
    public var userID: UInt32
    public init(requestID: UInt32, userID: UInt32) { self.requestID = requestID; self.userID = userID }

    public func encode(into w: inout ProtoWriter) { w.uint(1, requestID); w.uint(2, userID) }
    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> AdminResult {
        var m = AdminResult(requestID: 0, userID: 0)
        try r.forEachField { f throws(ProtobufError) in
            switch f.number {
            case 1: m.requestID = try r.uint32(f)
            case 2: m.userID = try r.uint32(f)
            default: break
            }
        }
        return m
    }
}

// MARK: - loss feedback

/// What one listener saw of one received stream over the last few seconds, before
/// any recovery: frames expected (by seq), lost, and lost alone (both neighbours
/// received: what in-band FEC can rebuild whole).
public struct ReceptionReport: ProtoMessage {
    public var ssrc: UInt32
    public var counts: LossCounts
    public init(ssrc: UInt32, counts: LossCounts) { self.ssrc = ssrc; self.counts = counts }

    public func encode(into w: inout ProtoWriter) {
        w.uint(1, ssrc); counts.encode(into: &w, from: 2)
    }
    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> ReceptionReport {
        var m = ReceptionReport(ssrc: 0, counts: LossCounts())
        try r.forEachField { f throws(ProtobufError) in
            if f.number == 1 { m.ssrc = try r.uint32(f) } else { try m.counts.decodeField(f, r, from: 2) }
        }
        return m
    }
}

/// Client → server, about once a second while streams are received: one report per
/// received stream that had frames in the window.
public struct ReceiverReport: ControlBody {
    public static let messageType = MessageType.receiverReport
    public var reports: [ReceptionReport]
    public init(reports: [ReceptionReport]) { self.reports = reports }

    public func encode(into w: inout ProtoWriter) { for r in reports { w.message(1, r) } }
    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> ReceiverReport {
        var m = ReceiverReport(reports: [])
        try r.forEachField { f throws(ProtobufError) in
            if f.number == 1 { m.reports.append(try ReceptionReport.decode(r.nested(f))) }
        }
        return m
    }
}

/// Server → publisher: what the listeners of its stream `stream_id` (ssrc `ssrc`)
/// lose, as the report at a high quantile of them (LossAggregation); `listeners`
/// reports were counted.
public struct LossFeedback: ControlBody {
    public static let messageType = MessageType.lossFeedback
    public var streamID: UInt32
    public var ssrc: UInt32
    public var listeners: UInt32
    public var counts: LossCounts
    public init(streamID: UInt32, ssrc: UInt32, listeners: UInt32, counts: LossCounts) {
        self.streamID = streamID; self.ssrc = ssrc; self.listeners = listeners; self.counts = counts
    }

    public func encode(into w: inout ProtoWriter) {
        w.uint(1, streamID); w.uint(2, ssrc); w.uint(3, listeners); counts.encode(into: &w, from: 4)
    }
    public static func decode(_ r: ProtoReader) throws(ProtobufError) -> LossFeedback {
        var m = LossFeedback(streamID: 0, ssrc: 0, listeners: 0, counts: LossCounts())
        try r.forEachField { f throws(ProtobufError) in
            switch f.number {
            case 1: m.streamID = try r.uint32(f)
            case 2: m.ssrc = try r.uint32(f)
            case 3: m.listeners = try r.uint32(f)
            default: try m.counts.decodeField(f, r, from: 4)
            }
        }
        return m
    }
}

extension LossCounts {
    /// Writes expected, lost, isolated as fields `first`, `first + 1`, `first + 2`.
    func encode(into w: inout ProtoWriter, from first: Int) {
        w.uint(first, expected); w.uint(first + 1, lost); w.uint(first + 2, isolated)
    }
    /// Reads field `f` if it is one of the three; other fields are skipped.
    mutating func decodeField(_ f: ProtoField, _ r: ProtoReader, from first: Int) throws(ProtobufError) {
        switch f.number - first {
        case 0: expected = try r.uint32(f)
        case 1: lost = try r.uint32(f)
        case 2: isolated = try r.uint32(f)
        default: break
        }
    }
}

// MARK: - the sum of all messages

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
    case ping(Ping)
    case pong(Pong)
    case joinChannel(JoinChannel)
    case joinChannelResult(JoinChannelResult)
    case userJoined(UserJoined)
    case userLeft(UserLeft)
    case streamAnnounce(StreamAnnounce)
    case streamAnnounceResult(StreamAnnounceResult)
    case remoteStreamAdded(RemoteStream)
    case streamStop(StreamStop)
    case remoteStreamRemoved(RemoteStreamRemoved)
    case streamStateUpdate(StreamStateUpdate)
    case serverMuteState(ServerMuteState)
    case rebind(Rebind)
    case rebindResult(RebindResult)
    case setServerMute(SetServerMute)
    case channelList(ChannelList)
    case memberList(MemberList)
    case usersJoined(UsersJoined)
    case usersLeft(UsersLeft)
    case userList(UserList)
    case presenceUpdate(PresenceUpdate)
    case kickUser(KickUser)
    case adminResult(AdminResult)
    case receiverReport(ReceiverReport)
    case lossFeedback(LossFeedback)

    /// The message inside.
    public var body: any ControlBody {
        switch self {
        case .hello(let m): return m
        case .helloResult(let m): return m
        case .error(let m): return m
        case .ping(let m): return m
        case .pong(let m): return m
        case .joinChannel(let m): return m
        case .joinChannelResult(let m): return m
        case .userJoined(let m): return m
        case .userLeft(let m): return m
        case .streamAnnounce(let m): return m
        case .streamAnnounceResult(let m): return m
        case .remoteStreamAdded(let m): return m
        case .streamStop(let m): return m
        case .remoteStreamRemoved(let m): return m
        case .streamStateUpdate(let m): return m
        case .serverMuteState(let m): return m
        case .rebind(let m): return m
        case .rebindResult(let m): return m
        case .setServerMute(let m): return m
        case .channelList(let m): return m
        case .memberList(let m): return m
        case .usersJoined(let m): return m
        case .usersLeft(let m): return m
        case .userList(let m): return m
        case .presenceUpdate(let m): return m
        case .kickUser(let m): return m
        case .adminResult(let m): return m
        case .receiverReport(let m): return m
        case .lossFeedback(let m): return m
        }
    }

    public var type: MessageType { Swift.type(of: body).messageType }

    /// `u16 type | protobuf body`.
    public func encode() -> [UInt8] {
        var out: [UInt8] = []
        encode(into: &out)
        return out
    }

    /// `u16 type | protobuf body`, into `out` (replaced; its capacity reused).
    public func encode(into out: inout [UInt8]) {
        var w = ProtoWriter(reusing: out)
        out = []
        let t = type.rawValue
        w.raw(UInt8(t >> 8)); w.raw(UInt8(truncatingIfNeeded: t))
        body.encode(into: &w)
        out = w.bytes
    }

    /// Decodes `u16 type | protobuf body`.
    public static func decode(_ bytes: [UInt8]) throws(ControlDecodeError) -> ControlMessage {
        guard bytes.count >= 2 else { throw .tooShort }
        let raw = UInt16(bytes[0]) << 8 | UInt16(bytes[1])
        guard let t = MessageType(rawValue: raw) else { throw .unknownType(raw) }
        let r = ProtoReader(bytes, 2..<bytes.count)
        do {
            switch t {
            case .hello: return .hello(try Hello.decode(r))
            case .helloResult: return .helloResult(try HelloResult.decode(r))
            case .error: return .error(try ErrorMessage.decode(r))
            case .ping: return .ping(try Ping.decode(r))
            case .pong: return .pong(try Pong.decode(r))
            case .joinChannel: return .joinChannel(try JoinChannel.decode(r))
            case .joinChannelResult: return .joinChannelResult(try JoinChannelResult.decode(r))
            case .userJoined: return .userJoined(try UserJoined.decode(r))
            case .userLeft: return .userLeft(try UserLeft.decode(r))
            case .streamAnnounce: return .streamAnnounce(try StreamAnnounce.decode(r))
            case .streamAnnounceResult: return .streamAnnounceResult(try StreamAnnounceResult.decode(r))
            case .remoteStreamAdded: return .remoteStreamAdded(try RemoteStream.decode(r))
            case .streamStop: return .streamStop(try StreamStop.decode(r))
            case .remoteStreamRemoved: return .remoteStreamRemoved(try RemoteStreamRemoved.decode(r))
            case .streamStateUpdate: return .streamStateUpdate(try StreamStateUpdate.decode(r))
            case .serverMuteState: return .serverMuteState(try ServerMuteState.decode(r))
            case .rebind: return .rebind(try Rebind.decode(r))
            case .rebindResult: return .rebindResult(try RebindResult.decode(r))
            case .setServerMute: return .setServerMute(try SetServerMute.decode(r))
            case .channelList: return .channelList(try ChannelList.decode(r))
            case .memberList: return .memberList(try MemberList.decode(r))
            case .usersJoined: return .usersJoined(try UsersJoined.decode(r))
            case .usersLeft: return .usersLeft(try UsersLeft.decode(r))
            case .userList: return .userList(try UserList.decode(r))
            case .presenceUpdate: return .presenceUpdate(try PresenceUpdate.decode(r))
            case .kickUser: return .kickUser(try KickUser.decode(r))
            case .adminResult: return .adminResult(try AdminResult.decode(r))
            case .receiverReport: return .receiverReport(try ReceiverReport.decode(r))
            case .lossFeedback: return .lossFeedback(try LossFeedback.decode(r))
            }
        } catch {
            throw .body(t, error)
        }
    }
}
