// A blocking protocol client on real loopback sockets: the real protocol module, no
// mocks. Used by the server tests and by the load generator (voicecat-loadgen). Not
// part of the library.
import Glibc
import VoiceCatProtocol
import VoiceCatSystem

public struct TestFailure: Error, CustomStringConvertible {
    public let description: String
    public init(_ d: String) { description = d }
}

public final class WireClient {
    public let tcp: Socket
    /// The media socket (nil for a control-only client).
    public let udp: Socket!
    public let serverAddress: SocketAddress
    public let keys: SessionKeys
    public let fingerprint: String
    public var sealer: ControlSealer
    public var opener: ControlOpener
    public var hello: HelloResult!
    public var epoch: UInt32 = 0
    public var media: DirectionalKeys
    public var bindKeys: DirectionalKeys
    /// The binding of the current epoch (made on the first `bind`).
    public var binder: UDPBinder?
    public var queued: [ControlMessage] = []
    public var nextRequestID: UInt32 = 1
    /// The roster as the server told it (`login(presence: true)`, then `apply`), by user id,
    /// and how many UserList messages carried it.
    public var roster: [UInt32: UserPresence] = [:]
    public var rosterParts = 0

    /// Connects and completes the handshake only. `openUDP: false` makes a control-only
    /// client (one descriptor instead of two, for tests with thousands of sessions).
    public init(port: UInt16, host: String = "127.0.0.1", pinned: String? = nil, openUDP: Bool = true) throws {
        serverAddress = try SocketAddress(host: host, port: port)
        tcp = try Socket.connectTCP(serverAddress, timeoutMs: 5000)
        if openUDP {
            udp = try Socket.udp(familyOf: serverAddress)
            try udp.setNonBlocking()
        } else {
            udp = nil
        }
        let hs = ClientHandshake()
        try WireClient.writeAll(tcp, hs.helloBytes)
        var prefix = try WireClient.readExactly(tcp, Handshake.serverHelloPrefixSize)
        let bodySize = try Handshake.serverHelloBodySize(prefix: prefix)
        prefix += try WireClient.readExactly(tcp, bodySize)
        (keys, fingerprint) = try hs.finish(serverHello: prefix, pinnedFingerprint: pinned)
        sealer = ControlSealer(key: keys.control.send)
        opener = ControlOpener(key: keys.control.receive)
        media = keys.media(epoch: 0)
        bindKeys = keys.bind(epoch: 0)
    }

    /// Connects, says Hello and waits for HelloResult (and the rest of a split channel list,
    /// and with `presence` the roster).
    public static func login(port: UInt16, username: String, password: String = "", timeoutMs: Int = 5000,
                             openUDP: Bool = true, presence: Bool = false, resumeToken: [UInt8] = []) throws -> WireClient {
        let c = try WireClient(port: port, openUDP: openUDP)
        c.send(.hello(Hello(username: username, password: password, clientName: "tests", presence: presence, resumeToken: resumeToken)))
        let m = try c.receive(timeoutMs: timeoutMs)
        guard case .helloResult(var r) = m else { throw TestFailure("expected HelloResult, got \(m)") }
        var more = r.moreChannels
        while more {
            let part = try c.receive(timeoutMs: timeoutMs)
            guard case .channelList(let l) = part else { throw TestFailure("expected ChannelList, got \(part.type)") }
            r.channels += l.channels
            more = l.more
        }
        c.hello = r
        if r.presence {
            while true {
                let part = try c.receive(timeoutMs: timeoutMs)
                guard case .userList(let l) = part else { throw TestFailure("expected UserList, got \(part.type)") }
                c.rosterParts += 1
                for u in l.users { c.roster[u.userID] = u }
                if !l.more { break }
            }
        }
        return c
    }

    /// Applies a PresenceUpdate's user records to `roster`.
    public func apply(_ u: PresenceUpdate) {
        for rec in u.users {
            if rec.gone { roster[rec.userID] = nil } else { roster[rec.userID] = rec }
        }
    }

    public static func writeAll(_ s: Socket, _ bytes: [UInt8]) throws {
        var off = 0
        while off < bytes.count {
            if let n = try bytes.withUnsafeBytes({ try s.write(UnsafeRawBufferPointer(rebasing: $0[off...])) }) {
                off += n
            } else {
                _ = try s.waitFor(events: Int16(POLLOUT), timeoutMs: 1000)
            }
        }
    }

    public static func readExactly(_ s: Socket, _ count: Int, timeoutMs: Int = 5000) throws -> [UInt8] {
        var out = [UInt8]()
        var buf = [UInt8](repeating: 0, count: count)
        while out.count < count {
            guard try s.waitFor(events: Int16(POLLIN), timeoutMs: timeoutMs) else { throw TestFailure("timed out reading") }
            let want = count - out.count
            guard let n = try buf.withUnsafeMutableBytes({ try s.read(into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<want])) }) else { continue }
            if n == 0 { throw TestFailure("connection closed after \(out.count) of \(count) bytes") }
            out += buf[0..<n]
        }
        return out
    }

    public func send(_ m: ControlMessage) {
        try! WireClient.writeAll(tcp, sealer.seal(m.encode()))
    }

    public func sendRaw(_ bytes: [UInt8]) throws { try WireClient.writeAll(tcp, bytes) }

    /// The next control message (queued ones first).
    public func receive(timeoutMs: Int = 3000) throws -> ControlMessage {
        if !queued.isEmpty { return queued.removeFirst() }
        let deadline = MonotonicClock.milliseconds() + UInt64(timeoutMs)
        var buf = [UInt8](repeating: 0, count: 65536)
        while true {
            if let p = try opener.next() { return try ControlMessage.decode(p) }
            let left = Int(Int64(deadline) - Int64(MonotonicClock.milliseconds()))
            guard left > 0, try tcp.waitFor(events: Int16(POLLIN), timeoutMs: left) else { throw TestFailure("no control message within \(timeoutMs) ms") }
            guard let n = try buf.withUnsafeMutableBytes({ try tcp.read(into: $0) }) else { continue }
            if n == 0 { throw TestFailure("server closed the control connection") }
            opener.append(buf[0..<n])
        }
    }

    /// Waits for the first message matching `match`, keeping the others queued in order.
    public func expect<T>(timeoutMs: Int = 3000, _ what: String, _ match: (ControlMessage) -> T?) throws -> T {
        var skipped: [ControlMessage] = []
        defer { queued = skipped + queued }
        let deadline = MonotonicClock.milliseconds() + UInt64(timeoutMs)
        while true {
            let left = Int(Int64(deadline) - Int64(MonotonicClock.milliseconds()))
            guard left > 0 else { throw TestFailure("no \(what) within \(timeoutMs) ms (got \(skipped.map(\.type)))") }
            let m: ControlMessage
            if !queued.isEmpty { m = queued.removeFirst() } else { m = try receive(timeoutMs: left) }
            if let v = match(m) { return v }
            skipped.append(m)
        }
    }

    /// True when the server closed the TCP connection within the timeout.
    public func waitForClose(timeoutMs: Int) -> Bool {
        let deadline = MonotonicClock.milliseconds() + UInt64(timeoutMs)
        var buf = [UInt8](repeating: 0, count: 4096)
        while MonotonicClock.milliseconds() < deadline {
            guard (try? tcp.waitFor(events: Int16(POLLIN), timeoutMs: 100)) == true else { continue }
            do {
                guard let n = try buf.withUnsafeMutableBytes({ try tcp.read(into: $0) }) else { continue }
                if n == 0 { return true }
                opener.append(buf[0..<n])
            } catch { return true }
        }
        return false
    }

    /// Joins and returns the result with the whole member list (gathered from the
    /// MemberList parts that follow a JoinChannelResult when the list is split).
    public func join(_ name: String, timeoutMs: Int = 5000) throws -> JoinChannelResult {
        let rid = nextRequestID; nextRequestID += 1
        send(.joinChannel(JoinChannel(name: name, requestID: rid)))
        var r = try expect(timeoutMs: timeoutMs, "JoinChannelResult") { m -> JoinChannelResult? in
            if case .joinChannelResult(let r) = m, r.requestID == rid { return r }
            return nil
        }
        var more = r.moreMembers
        while more {
            // The parts follow the result directly.
            let m = try receive(timeoutMs: timeoutMs)
            guard case .memberList(let part) = m, part.requestID == rid, part.channelID == r.channelID else {
                throw TestFailure("expected MemberList for request \(rid), got \(m.type)")
            }
            r.members += part.members
            more = part.more
        }
        return r
    }

    public func announce(streamID: UInt32, kind: StreamKind = .mic, channels: UInt32 = 1) throws -> StreamAnnounceResult {
        let rid = nextRequestID; nextRequestID += 1
        send(.streamAnnounce(StreamAnnounce(streamID: streamID, kind: kind, channels: channels, requestID: rid)))
        return try expect("StreamAnnounceResult") { m -> StreamAnnounceResult? in
            if case .streamAnnounceResult(let r) = m, r.requestID == rid { return r }
            return nil
        }
    }

    /// An error reply with the given request id (0 matches any).
    public func expectError(requestID: UInt32 = 0, timeoutMs: Int = 3000) throws -> ErrorMessage {
        try expect(timeoutMs: timeoutMs, "Error") { m -> ErrorMessage? in
            if case .error(let e) = m, requestID == 0 || e.requestID == requestID { return e }
            return nil
        }
    }

    // MARK: media

    public func sendDatagram(_ bytes: [UInt8]) {
        _ = try! bytes.withUnsafeBytes { try udp.sendTo($0, serverAddress) }
    }

    /// Waits for one datagram.
    public func receiveDatagram(timeoutMs: Int = 2000) -> [UInt8]? {
        var buf = [UInt8](repeating: 0, count: 2048)
        let deadline = MonotonicClock.milliseconds() + UInt64(timeoutMs)
        while true {
            if let (n, _) = try! buf.withUnsafeMutableBytes({ try udp.receiveFrom(into: $0) }) { return Array(buf[0..<n]) }
            let left = Int(Int64(deadline) - Int64(MonotonicClock.milliseconds()))
            guard left > 0, (try? udp.waitFor(events: Int16(POLLIN), timeoutMs: left)) == true else { return nil }
        }
    }

    /// Binds this client's UDP socket to its session: REQUEST, the server's CHALLENGE,
    /// REQUEST with the cookie, BOUND (retrying every 250 ms).
    public func bind(timeoutMs: Int = 3000) throws {
        if binder == nil || binder!.epoch != epoch {
            binder = UDPBinder(sessionID: hello.sessionID, bindingID: hello.bindingID, epoch: epoch, keys: bindKeys)
        }
        let deadline = MonotonicClock.milliseconds() + UInt64(timeoutMs)
        while MonotonicClock.milliseconds() < deadline {
            sendDatagram(binder!.nextRequest())
            while let d = receiveDatagram(timeoutMs: 250) {
                switch binder!.handle(d) {
                case .challenged: sendDatagram(binder!.nextRequest())
                case .bound: return
                case .ignored: continue
                }
            }
        }
        throw TestFailure("UDP binding not answered")
    }

    public func rebind(to newEpoch: UInt32) throws {
        send(.rebind(Rebind(epoch: newEpoch)))
        _ = try expect("RebindResult") { m -> UInt32? in
            if case .rebindResult(let r) = m, r.epoch == newEpoch { return r.epoch }
            return nil
        }
        epoch = newEpoch
        media = keys.media(epoch: newEpoch)
        bindKeys = keys.bind(epoch: newEpoch)
        try bind()
    }

    public func sealVoice(ssrc: UInt32, seq: UInt64, timestamp: UInt32, opus: [UInt8], flags: FrameFlags = [], key: SymmetricKey? = nil) -> [UInt8] {
        MediaCrypto.seal(header: FrameHeader(type: .voice, flags: flags, ssrc: ssrc, seq: seq, timestamp: timestamp),
                         payload: opus, key: key ?? media.send)
    }

    /// Receives and opens the next VOICE datagram.
    public func receiveVoice(timeoutMs: Int = 2000) -> (header: FrameHeader, payload: [UInt8])? {
        while let d = receiveDatagram(timeoutMs: timeoutMs) {
            guard let r = try? MediaCrypto.open(d, key: media.receive) else { continue }
            if r.header.type == .voice { return r }
        }
        return nil
    }

    public func close() { tcp.close(); udp?.close() }
}
