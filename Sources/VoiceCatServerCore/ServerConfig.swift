// Server configuration: defaults, the config file and its parser.
import Glibc
import VoiceCatProtocol
import VoiceCatSystem

public struct ChannelConfig: Equatable {
    public var name: String
    public var audio: AudioConfig
    public init(name: String, audio: AudioConfig) { self.name = name; self.audio = audio }
}

public struct ServerConfig {
    /// Address to bind TCP and UDP on.
    public var bindHost = "127.0.0.1"
    /// TCP and UDP port; 0 means the default port, 47800 (as it does for clients).
    public var port: UInt16 = ProtocolVersion.defaultPort
    /// Listen on a free port the kernel picks (the same number for TCP and UDP) instead
    /// of `port`: `port = any` in the file, `--port any` (tests and scripts; `Server.port`
    /// says which one it got).
    public var anyPort = false

    /// The port to bind: the kernel's choice (0) for `anyPort`, else `port` with 0 as the default.
    public var listenPort: UInt16 { anyPort ? 0 : (port == 0 ? ProtocolVersion.defaultPort : port) }
    /// Where the Ed25519 identity seed lives (created 0600 on first start).
    public var identityPath = "voicecat-identity.key"
    public var serverName = "VoiceCat"
    /// Server password checked in Hello; nil or empty = none.
    public var password: String? = nil
    /// Credential for SetServerMute; nil or empty disables server mute requests.
    public var adminPassword: String? = nil
    public var channels: [ChannelConfig] = ServerConfig.defaultChannels
    public var maxUsers = 64
    public var maxStreamsPerUser = 4
    /// Largest UDP datagram accepted (header + sealed Opus).
    public var maxDatagramBytes = 1400
    /// Packets per second allowed per ssrc (token bucket, one second of burst).
    public var maxPacketsPerSecond = 500
    /// Bytes per second allowed per ssrc, as a multiple of the stream's nominal rate (its
    /// channel's bitrate plus its frames' headers; token bucket, two seconds of burst).
    public var maxStreamBitrateFactor = 3.0
    /// Sessions silent on both TCP and UDP this long are dropped.
    public var reapSeconds = 30.0
    /// A handshake, or a control frame started but not finished, must complete within this.
    public var frameTimeoutSeconds = 10.0
    /// A connection must be logged in (HelloResult sent) this long after it was accepted
    /// (or after its last wrong password was answered).
    public var loginTimeoutSeconds = 10.0
    /// Connections not yet logged in, per source address; a new one evicts the oldest.
    public var maxUnauthenticatedPerAddress = 8
    /// Connections not yet logged in, in all; a new one evicts the oldest.
    public var maxUnauthenticated = 256
    /// Control messages a connection may send per second (token bucket) ...
    public var controlMessagesPerSecond = 50.0
    /// ... with this burst. Past it the server stops reading the connection until a token is due.
    public var controlBurst = 100
    /// A Hello or SetServerMute from an address with n recent wrong passwords is answered
    /// after base * 2^(n-1) seconds (at most `authBackoffMaxSeconds`).
    public var authBackoffBaseSeconds = 0.5
    public var authBackoffMaxSeconds = 16.0
    /// Wrong passwords (server or admin) on one connection before it is closed.
    public var maxAuthFailures = 3
    /// Print counters this often (0 = never).
    public var statsIntervalSeconds = 0.0
    /// Roster changes sealed for subscribers per loop turn (the rest go out in the next
    /// turns): bounds how long a turn that tells thousands of subscribers takes. Not in
    /// the config file; tests lower it.
    public var presenceBytesPerTurn = 2 << 20

    public init() {}

    public static let defaultChannels = [
        ChannelConfig(name: "Lobby", audio: .speech),
        ChannelConfig(name: "Music", audio: .music),
    ]

    /// Why a config file was rejected.
    public struct ParseError: Error, CustomStringConvertible {
        public let line: Int
        public let message: String
        public var description: String { "config line \(line): \(message)" }
    }

    /// A trimmed line without its comment: all of it when it starts with `#`, else from
    /// a `#` that follows a space or tab; a `#` inside a value is part of it
    /// (`password = open#sesame`). A quoted value is left whole (its parse takes a
    /// comment after the closing quote).
    static func withoutComment(_ line: String) -> String {
        if line.hasPrefix("#") { return "" }
        if let eq = line.firstIndex(of: "="), line[line.index(after: eq)...].trimmingWhitespace().hasPrefix("\"") { return line }
        for i in line.indices.dropFirst() where line[i] == "#" {
            let before = line[line.index(before: i)]
            if before == " " || before == "\t" { return String(line[..<i]).trimmingWhitespace() }
        }
        return line
    }

    /// Applies a config file as read (see `apply(configText:)`): UTF-8, a byte-order mark
    /// at its start skipped. A line that is not UTF-8 is refused (decoded with
    /// replacement, two Latin-1 passwords would read the same).
    public mutating func apply(configBytes bytes: [UInt8]) throws {
        var body = bytes[...]
        if body.starts(with: [0xEF, 0xBB, 0xBF]) { body = body.dropFirst(3) }
        var lines: [String] = []
        for (i, line) in body.split(separator: 0x0A, omittingEmptySubsequences: false).enumerated() {
            guard let text = String(validating: line, as: UTF8.self) else {
                throw ParseError(line: i + 1, message: "not valid UTF-8 (save the file as UTF-8)")
            }
            lines.append(text)
        }
        try apply(lines: lines)
    }

    /// Applies the settings of a config file (see docs/server.md for the format) on top of `self`.
    /// A file with `[channel NAME]` sections replaces the default channels. Lines end
    /// with LF or CRLF.
    public mutating func apply(configText: String) throws {
        let text = configText.hasPrefix("\u{FEFF}") ? String(configText.dropFirst()) : configText
        // CR LF is one Character: split on it too, or a CRLF file reads as one line.
        try apply(lines: text.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r\n" }).map(String.init))
    }

    private mutating func apply(lines: [String]) throws {
        var parsedChannels: [ChannelConfig] = []
        var current: Int? = nil
        /// Where each setting was given, per section (-1: the server's): a second one is
        /// a mistake (which would win is not obvious), refused.
        var given: [String: Int] = [:]
        for (i, raw) in lines.enumerated() {
            let lineNo = i + 1
            let trimmed = raw.trimmingWhitespace()
            // A section header is whole when it ends with `]` (a name may hold ` #`);
            // else what follows a comment's `#` goes first.
            let line = trimmed.hasPrefix("[") && trimmed.hasSuffix("]") ? trimmed : ServerConfig.withoutComment(trimmed)
            if line.isEmpty { continue }
            if line.hasPrefix("[") {
                guard line.hasSuffix("]") else { throw ParseError(line: lineNo, message: "unterminated section header") }
                let inner = String(line.dropFirst().dropLast()).trimmingWhitespace()
                guard inner.hasPrefix("channel ") else { throw ParseError(line: lineNo, message: "unknown section [\(inner)]") }
                var name = String(inner.dropFirst("channel ".count)).trimmingWhitespace()
                // A quoted name is taken as written (spaces at its ends included).
                if name.count >= 2 && name.hasPrefix("\"") && name.hasSuffix("\"") { name = String(name.dropFirst().dropLast()) }
                guard !name.isEmpty else { throw ParseError(line: lineNo, message: "channel needs a name") }
                if let p = NameRules.problem(name, what: "channel name") { throw ParseError(line: lineNo, message: p) }
                guard !parsedChannels.contains(where: { $0.name == name }) else { throw ParseError(line: lineNo, message: "channel \(name) defined twice") }
                parsedChannels.append(ChannelConfig(name: name, audio: .speech))
                current = parsedChannels.count - 1
                continue
            }
            guard let eq = line.firstIndex(of: "=") else { throw ParseError(line: lineNo, message: "expected key = value") }
            let key = String(line[..<eq]).trimmingWhitespace().lowercased()
            let setting = "\(current ?? -1) \(key == "bitrate_bps" ? "bitrate" : key)"
            if let first = given[setting] {
                throw ParseError(line: lineNo, message: "\(key) is given twice (first on line \(first)\(current == nil ? "" : " of this channel"))")
            }
            given[setting] = lineNo
            var value = String(line[line.index(after: eq)...]).trimmingWhitespace()
            if value.hasPrefix("\"") {
                // A quoted value is taken as written (a `#` or spaces at its ends included).
                let inner = value.dropFirst()
                guard let close = inner.firstIndex(of: "\"") else { throw ParseError(line: lineNo, message: "\(key): unterminated quote") }
                let rest = inner[inner.index(after: close)...].trimmingWhitespace()
                guard rest.isEmpty || rest.hasPrefix("#") else {
                    throw ParseError(line: lineNo, message: "\(key): unexpected \"\(rest)\" after the quoted value")
                }
                value = String(inner[..<close])
            }
            func int() throws -> Int {
                guard let v = Int(value), v >= 0 else { throw ParseError(line: lineNo, message: "\(key) needs a non-negative integer, got \"\(value)\"") }
                return v
            }
            func u32() throws -> UInt32 {
                guard let v = UInt32(exactly: try int()) else { throw ParseError(line: lineNo, message: "\(key) is out of range, got \"\(value)\"") }
                return v
            }
            func double() throws -> Double {
                guard let v = Double(value), v >= 0 else { throw ParseError(line: lineNo, message: "\(key) needs a non-negative number, got \"\(value)\"") }
                return v
            }
            func bool() throws -> Bool {
                switch value.lowercased() {
                case "true", "yes", "on", "1": return true
                case "false", "no", "off", "0": return false
                default: throw ParseError(line: lineNo, message: "\(key) needs true or false, got \"\(value)\"")
                }
            }
            /// A server setting (before the first [channel] section): false when `key` is none.
            func applyServerSetting(to c: inout ServerConfig) throws -> Bool {
                switch key {
                case "name": c.serverName = value
                case "bind": c.bindHost = value
                case "port":
                    if value == "any" { c.anyPort = true; break }
                    let p = try int()
                    guard p <= 65535 else { throw ParseError(line: lineNo, message: "port out of range") }
                    c.port = UInt16(p)
                    c.anyPort = false
                case "identity": c.identityPath = value
                case "password", "admin_password":
                    // An empty one would mean none: a value that a comment swallowed
                    // (`password = #secret`) must not turn the password off.
                    guard !value.isEmpty else {
                        throw ParseError(line: lineNo, message: "\(key) is empty (leave the line out for none; a # after a space starts "
                                                             + "a comment: quote a value that starts with #)")
                    }
                    if key == "password" { c.password = value } else { c.adminPassword = value }
                case "max_users": c.maxUsers = try int()
                case "max_streams_per_user": c.maxStreamsPerUser = try int()
                case "max_datagram_bytes": c.maxDatagramBytes = try int()
                case "max_packets_per_second": c.maxPacketsPerSecond = try int()
                case "max_stream_bitrate_factor": c.maxStreamBitrateFactor = try double()
                case "reap_seconds": c.reapSeconds = try double()
                case "frame_timeout_seconds": c.frameTimeoutSeconds = try double()
                case "login_timeout_seconds": c.loginTimeoutSeconds = try double()
                case "max_unauthenticated_per_address": c.maxUnauthenticatedPerAddress = try int()
                case "max_unauthenticated": c.maxUnauthenticated = try int()
                case "control_messages_per_second": c.controlMessagesPerSecond = try double()
                case "control_burst": c.controlBurst = try int()
                case "auth_backoff_base_seconds": c.authBackoffBaseSeconds = try double()
                case "auth_backoff_max_seconds": c.authBackoffMaxSeconds = try double()
                case "max_auth_failures": c.maxAuthFailures = try int()
                case "stats_interval_seconds": c.statsIntervalSeconds = try double()
                default: return false
                }
                return true
            }
            if let c = current {
                var a = parsedChannels[c].audio
                switch key {
                case "mode":
                    switch value.lowercased() {
                    case "mono": a.mode = .mono
                    case "stereo": a.mode = .stereo
                    default: throw ParseError(line: lineNo, message: "mode is mono or stereo")
                    }
                case "application":
                    switch value.lowercased() {
                    case "voip": a.application = .voip
                    case "audio": a.application = .audio
                    case "lowdelay", "low_delay": a.application = .lowDelay
                    default: throw ParseError(line: lineNo, message: "application is voip, audio or lowdelay")
                    }
                case "sample_rate": a.sampleRate = try u32()
                case "bitrate", "bitrate_bps": a.bitrate = try u32()
                case "frame_ms":
                    guard let ms = Double(value), ms >= 0, ms <= 1000 else { throw ParseError(line: lineNo, message: "frame_ms needs a number of milliseconds") }
                    a.frameMicros = UInt32((ms * 1000).rounded())
                case "fec": a.fec = try bool()
                case "expected_packet_loss": a.expectedPacketLoss = try u32()
                case "dtx": a.dtx = try bool()
                case "complexity": a.complexity = try u32()
                case "dred": a.dred = try bool()
                default:
                    // A server setting written after a [channel] header (a bad value of one counts as known).
                    var probe = ServerConfig()
                    if (try? applyServerSetting(to: &probe)) ?? true {
                        throw ParseError(line: lineNo, message: "\(key) is a server setting, not a channel one: server settings go before "
                                                             + "the first [channel] section")
                    }
                    throw ParseError(line: lineNo, message: "unknown channel setting \(key)")
                }
                if let why = a.validationError() { throw ParseError(line: lineNo, message: why) }
                parsedChannels[c].audio = a
            } else if try !applyServerSetting(to: &self) {
                throw ParseError(line: lineNo, message: "unknown setting \(key)")
            }
        }
        if !parsedChannels.isEmpty { channels = parsedChannels }
    }

    /// Why this configuration cannot serve, or nil (the message of `validate()`).
    public func validationError() -> String? {
        do { try validate() } catch { return error.description }
        return nil
    }
}

extension ServerConfig {
    /// A setting outside its range: the server refuses to start (or to reload) with it.
    public struct ValidationError: Error, Equatable, CustomStringConvertible {
        public let setting: String
        public let message: String
        public var description: String { "\(setting): \(message)" }
    }

    /// The most channels a server may carry: what a client accepts (each login lists them all).
    public static let maxChannels = ServerMessageLimits.maxChannels
    /// Upper bound of `max_datagram_bytes`: the largest Opus packet of a 120 ms frame
    /// plus header and tag fits well below it.
    public static let datagramBytesLimit = 8192

    /// Checks every setting against its range, and every channel: its name (the shared
    /// name rules), its audio, and that its frames fit `max_datagram_bytes` (refused at
    /// load time, not dropped later). The first problem is thrown.
    public func validate() throws(ValidationError) {
        func check<T: Comparable>(_ name: String, _ v: T, _ lo: T, _ hi: T) throws(ValidationError) {
            // Written so NaN fails too.
            guard v >= lo && v <= hi else { throw ValidationError(setting: name, message: "must be between \(lo) and \(hi), got \(v)") }
        }
        try check("max_users", maxUsers, 1, 1_000_000)
        try check("max_streams_per_user", maxStreamsPerUser, 1, 64)
        try check("max_datagram_bytes", maxDatagramBytes, 64, ServerConfig.datagramBytesLimit)
        try check("max_packets_per_second", maxPacketsPerSecond, 1, 1_000_000)
        try check("max_stream_bitrate_factor", maxStreamBitrateFactor, 1.5, 1_000.0)
        try check("reap_seconds", reapSeconds, 0.1, 86_400)
        try check("frame_timeout_seconds", frameTimeoutSeconds, 0.1, 3_600)
        try check("login_timeout_seconds", loginTimeoutSeconds, 0.1, 3_600)
        try check("max_unauthenticated_per_address", maxUnauthenticatedPerAddress, 1, 65_536)
        try check("max_unauthenticated", maxUnauthenticated, 1, 1_000_000)
        try check("control_messages_per_second", controlMessagesPerSecond, 0.1, 1_000_000)
        try check("control_burst", controlBurst, 1, 1_000_000)
        try check("auth_backoff_base_seconds", authBackoffBaseSeconds, 0, 60)
        try check("auth_backoff_max_seconds", authBackoffMaxSeconds, authBackoffBaseSeconds, 3_600)
        try check("max_auth_failures", maxAuthFailures, 1, 1_000)
        try check("stats_interval_seconds", statsIntervalSeconds, 0, 86_400)
        try check("presence_bytes_per_turn", presenceBytesPerTurn, 1, 1 << 30)
        try check("name (bytes)", serverName.utf8.count, 0, ServerMessageLimits.maxServerNameBytes)
        try check("password (bytes)", password?.utf8.count ?? 0, 0, RequestTextRules.maxPasswordBytes)
        try check("admin_password (bytes)", adminPassword?.utf8.count ?? 0, 0, RequestTextRules.maxPasswordBytes)
        try check("number of channels", channels.count, 1, ServerConfig.maxChannels)
        var seen = Set<String>()
        for c in channels {
            if let p = NameRules.problem(c.name, what: "channel name") { throw ValidationError(setting: "channel \(c.name)", message: p) }
            guard seen.insert(c.name).inserted else { throw ValidationError(setting: "channel \(c.name)", message: "defined twice") }
            if let why = c.audio.validationError() { throw ValidationError(setting: "channel \(c.name)", message: why) }
            if let why = MediaLimits.fitProblem(c.audio, limit: maxDatagramBytes) { throw ValidationError(setting: "channel \(c.name)", message: why) }
            // A stream sends a packet per frame: a limit below that drops honest audio
            // (10 allowed on 20 ms frames dropped 299 of 387, helper-87).
            let packets = (1_000_000 + Int(c.audio.frameMicros) - 1) / max(1, Int(c.audio.frameMicros))
            guard maxPacketsPerSecond >= packets else {
                throw ValidationError(setting: "channel \(c.name)",
                                      message: "its \(Double(c.audio.frameMicros) / 1000) ms frames are \(packets) packets per second per stream, "
                                               + "more than max_packets_per_second (\(maxPacketsPerSecond)) lets through")
            }
        }
    }
}

extension StringProtocol {
    func trimmingWhitespace() -> String {
        let isWS: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\r" || $0 == "\n" }
        guard let first = firstIndex(where: { !isWS($0) }) else { return "" }
        let last = lastIndex(where: { !isWS($0) })!
        return String(self[first...last])
    }
}

/// Loads the server identity from its key file, creating it (mode 0600) on first start.
public enum IdentityStore {
    static let header = "voicecat-identity-v1 "

    /// The identity in `path`; nil when there is no such file.
    public static func load(path: String) throws -> IdentityKey? {
        guard let bytes = try Files.read(path) else { return nil }
        let text = String(decoding: bytes, as: UTF8.self).trimmingWhitespace()
        guard text.hasPrefix(header), let seed = bytesFromHex(String(text.dropFirst(header.count)).trimmingWhitespace()) else {
            throw CryptoError.invalidKeyMaterial("\(path) is not a VoiceCat identity file")
        }
        return try IdentityKey(seed: seed)
    }

    /// A new identity, written to `path` (created: true); when another process created
    /// `path` first (two servers started at once on one identity), the identity it wrote
    /// (created: false).
    public static func create(path: String) throws -> (key: IdentityKey, created: Bool) {
        let id = IdentityKey()
        do {
            try Files.createExclusive(path, bytes: Array((header + hexString(id.seed) + "\n").utf8), mode: 0o600)
        } catch let e where e.errno == EEXIST {
            guard let other = try load(path: path) else { throw e }   // created and removed again
            return (other, false)
        }
        return (id, true)
    }
}
