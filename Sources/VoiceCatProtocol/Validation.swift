// The rules both sides apply to what they read from the other, written once:
// names (usernames, channel names), text lengths, and what a server may send a
// client. A message that breaks them is refused by name; the session goes on.
// AudioConfig's own rules are AudioConfig.validationError() (the server applies
// the same to its channel configuration at load time).

/// Usernames and channel names: 1 to 64 bytes of UTF-8 (a decoded protobuf string
/// is always valid UTF-8), no control characters (C0, DEL, C1), so nothing a peer
/// names can carry escape sequences into logs or user interfaces.
public enum NameRules {
    public static let maxBytes = 64

    /// nil when `name` is acceptable, else what is wrong (`what` names it: "username").
    public static func problem(_ name: String, what: String) -> String? {
        if name.isEmpty { return "\(what) is empty" }
        if name.utf8.count > maxBytes { return "\(what) is \(name.utf8.count) bytes (at most \(maxBytes))" }
        if let c = name.unicodeScalars.first(where: isControl) {
            return "\(what) contains the control character U+\(hex4(c.value))"
        }
        return nil
    }

    /// C0 controls, DEL and C1 controls.
    public static func isControl(_ s: Unicode.Scalar) -> Bool { s.value < 0x20 || (s.value >= 0x7f && s.value < 0xa0) }

    static func hex4(_ v: UInt32) -> String {
        let digits = Array("0123456789ABCDEF")
        return String((0..<4).reversed().map { digits[Int((v >> (UInt32($0) * 4)) & 0xf)] })
    }
}

/// Lengths of the text a client sends in its login and admin requests. Bounded so that
/// such a message always fits in one control frame (a host that passes a user's text
/// through gets an error, not a trap), and no longer than a server takes: a server's
/// own passwords are at most `maxPasswordBytes`, so a longer one is never right.
public enum RequestTextRules {
    /// The server password (Hello) and the admin password (SetServerMute, KickUser).
    public static let maxPasswordBytes = 1024
    /// The client's name in Hello.
    public static let maxClientNameBytes = 256
    /// A kick's reason, shown to the user kicked.
    public static let maxReasonBytes = 256

    /// nil when `text` is at most `maxBytes` bytes, else what is wrong (`what` names it).
    public static func problem(_ text: String, what: String, maxBytes: Int) -> String? {
        text.utf8.count > maxBytes ? "\(what) is \(text.utf8.count) bytes (at most \(maxBytes))" : nil
    }

    /// The client's name: shown by servers and tools, so no control characters either.
    public static func clientNameProblem(_ name: String) -> String? {
        if let p = problem(name, what: "client_name", maxBytes: maxClientNameBytes) { return p }
        if let c = name.unicodeScalars.first(where: NameRules.isControl) {
            return "client_name contains the control character U+\(NameRules.hex4(c.value))"
        }
        return nil
    }
}

/// Upper bounds on what a server may send (a client keeps memory and UI text bounded).
public enum ServerMessageLimits {
    public static let maxServerNameBytes = 256
    public static let maxErrorTextBytes = 1024
    public static let maxChannels = 4096
    /// Members of one channel (a split list counts whole): 64-byte names make ~6 MB.
    public static let maxMembers = 65_536
    /// Sessions in the roster (a split UserList counts whole), and streams of one session
    /// (the server's `max_streams_per_user` goes up to 64).
    public static let maxUsers = 65_536
    public static let maxStreamsPerUser = 64

    /// `text` with control characters replaced (U+FFFD) and cut to `maxBytes` on a
    /// character boundary: server text shown to a host as it is, but harmless.
    public static func sanitized(_ text: String, maxBytes: Int = maxErrorTextBytes) -> String {
        var out = String.UnicodeScalarView()
        var bytes = 0
        for s in text.unicodeScalars {
            let c = NameRules.isControl(s) ? Unicode.Scalar(0xFFFD)! : s
            let n = String(c).utf8.count
            if bytes + n > maxBytes { break }
            bytes += n
            out.append(c)
        }
        return String(out)
    }
}

extension ControlMessage {
    /// What a client refuses in this message from a server, judged on the message
    /// alone (the client adds what depends on its session: order, known ids); nil
    /// when acceptable. Error texts are not refused but sanitized by the reader.
    public var serverMessageProblem: String? {
        func audio(_ a: AudioConfig, _ what: String) -> String? { a.validationError().map { "\(what): \($0)" } }
        switch self {
        case .helloResult(let m):
            // server_name is shown sanitized and cut (ServerMessageLimits.sanitized), not refused.
            if m.channels.count > ServerMessageLimits.maxChannels { return "\(m.channels.count) channels (at most \(ServerMessageLimits.maxChannels))" }
            return nil   // bad channel entries are left out of the list one by one (channelProblem)
        case .joinChannelResult(let m):
            if let p = audio(m.audio, "channel \(m.channelID) audio") { return p }
            return membersProblem(m.members)
        case .userJoined(let m):
            return NameRules.problem(m.member.username, what: "user \(m.member.userID)'s username")
        case .channelList(let m):
            // A part of a split channel list: bounded like HelloResult; entries judged one by one.
            if m.channels.count > ServerMessageLimits.maxChannels { return "\(m.channels.count) channels (at most \(ServerMessageLimits.maxChannels))" }
            return nil
        case .memberList(let m):
            return membersProblem(m.members)
        case .usersJoined(let m):
            return membersProblem(m.members)
        case .streamAnnounceResult(let m):
            if m.ssrc == 0 { return "ssrc 0" }
            return audio(m.effectiveAudio, "stream \(m.streamID) effective audio")
        case .remoteStreamAdded(let m):
            if m.ssrc == 0 { return "ssrc 0" }
            return audio(m.audio, "ssrc \(m.ssrc) audio")
        case .userList(let m):
            return usersProblem(m.users)
        case .presenceUpdate(let m):
            if let p = usersProblem(m.users) { return p }
            if m.channels.count > ServerMessageLimits.maxChannels { return "\(m.channels.count) channels (at most \(ServerMessageLimits.maxChannels))" }
            for ch in m.channels { if let p = ch.problem { return p } }
            return nil
        case .lossFeedback(let m):
            return m.counts.problem.map { "stream \(m.streamID): \($0)" }
        case .hello, .joinChannel, .streamAnnounce, .streamStop, .rebind, .setServerMute, .kickUser, .receiverReport:
            return "\(type) is a message only a client sends"
        case .error, .ping, .pong, .userLeft, .usersLeft, .remoteStreamRemoved, .streamStateUpdate, .serverMuteState, .rebindResult,
             .adminResult:
            return nil
        }
    }

    private func usersProblem(_ users: [UserPresence]) -> String? {
        if users.count > ServerMessageLimits.maxUsers { return "\(users.count) users (at most \(ServerMessageLimits.maxUsers))" }
        for u in users { if let p = u.problem { return p } }
        return nil
    }

    private func membersProblem(_ members: [MemberInfo]) -> String? {
        if members.count > ServerMessageLimits.maxMembers { return "\(members.count) members (at most \(ServerMessageLimits.maxMembers))" }
        for member in members {
            if let p = NameRules.problem(member.username, what: "member \(member.userID)'s username") { return p }
        }
        return nil
    }
}

extension UserPresence {
    /// What makes this roster record unusable, or nil.
    public var problem: String? {
        if userID == 0 { return "a roster record names user 0" }
        if gone { return nil }
        if let p = NameRules.problem(username, what: "user \(userID)'s username") { return p }
        if streams.count > ServerMessageLimits.maxStreamsPerUser {
            return "user \(userID) has \(streams.count) streams (at most \(ServerMessageLimits.maxStreamsPerUser))"
        }
        if streams.contains(where: { $0.ssrc == 0 }) { return "user \(userID) has a stream with ssrc 0" }
        return nil
    }
}

extension ChannelInfo {
    /// What makes this channel entry of a HelloResult unusable, or nil.
    public var problem: String? {
        if let p = NameRules.problem(name, what: "channel \(id)'s name") { return p }
        if let p = audio.validationError() { return "channel \(id) (\(name)) audio: \(p)" }
        return nil
    }
}

/// How big a media datagram may be. The server says its limit in HelloResult
/// (`max_datagram_bytes`) and refuses at load time a channel whose frames cannot
/// fit it; a client caps its encoder to the limit, and never goes past its own.
public enum MediaLimits {
    /// The limit a server that does not say one has (its default).
    public static let defaultDatagramBytes = 1400
    /// The largest datagram a client sends or receives, whatever a server says.
    public static let maxDatagramBytes = 4096
    /// Header and AEAD tag around the Opus packet.
    public static let overheadBytes = MediaCrypto.overhead

    /// The Opus packet size a sender must stay within under a server's limit (0: not said).
    public static func maxOpusBytes(serverLimit: UInt32) -> Int {
        let limit = serverLimit == 0 ? defaultDatagramBytes : min(Int(serverLimit), maxDatagramBytes)
        return max(0, limit - overheadBytes)
    }

    /// The datagram a frame of `audio` at its nominal bitrate makes (header and tag included).
    public static func nominalDatagramBytes(_ audio: AudioConfig) -> Int {
        Int((UInt64(audio.bitrate) * UInt64(audio.frameMicros) + 7_999_999) / 8_000_000) + overheadBytes
    }

    /// Why frames of `audio` cannot fit datagrams of `limit` bytes, or nil.
    public static func fitProblem(_ audio: AudioConfig, limit: Int) -> String? {
        let need = nominalDatagramBytes(audio)
        guard need > limit else { return nil }
        return "\(audio.bitrate / 1000) kb/s in \(Double(audio.frameMicros) / 1000) ms frames makes \(need)-byte datagrams "
            + "(with the \(overheadBytes)-byte header and tag), over max_datagram_bytes \(limit): lower the bitrate, "
            + "shorten the frames or raise max_datagram_bytes"
    }
}
