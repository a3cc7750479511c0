// A blocking protocol client for tests: real sockets on loopback, the real
// protocol module, no mocks. Not part of the library.
import Glibc
import VoiceCatProtocol
import VoiceCatServerCore
import VoiceCatSystem
import VoiceCatTestSupport
import XCTest

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

final class TestClient {
    let tcp: Socket
    let udp: Socket
    let serverAddress: SocketAddress
    let keys: SessionKeys
    let fingerprint: String
    var sealer: ControlSealer
    var opener: ControlOpener
    var hello: HelloResult!
    var epoch: UInt32 = 0
    var media: DirectionalKeys
    var bindKeys: DirectionalKeys
    var bindSeq: UInt64 = 0
    var queued: [ControlMessage] = []
    var nextRequestID: UInt32 = 1

    /// Connects and completes the handshake only.
    init(port: UInt16, pinned: String? = nil) throws {
        serverAddress = try SocketAddress(host: "127.0.0.1", port: port)
        tcp = try Socket.connectTCP(serverAddress, timeoutMs: 2000)
        udp = try Socket.udp(familyOf: serverAddress)
        try udp.setNonBlocking()
        let hs = ClientHandshake()
        try TestClient.writeAll(tcp, hs.helloBytes)
        var prefix = try TestClient.readExactly(tcp, Handshake.serverHelloPrefixSize)
        let bodySize = try Handshake.serverHelloBodySize(prefix: prefix)
        prefix += try TestClient.readExactly(tcp, bodySize)
        (keys, fingerprint) = try hs.finish(serverHello: prefix, pinnedFingerprint: pinned)
        sealer = ControlSealer(key: keys.control.send)
        opener = ControlOpener(key: keys.control.receive)
        media = keys.media(epoch: 0)
        bindKeys = keys.bind(epoch: 0)
    }

    /// Connects, says Hello and waits for HelloResult.
    static func login(port: UInt16, username: String, password: String = "") throws -> TestClient {
        let c = try TestClient(port: port)
        c.send(.hello(Hello(username: username, password: password, clientName: "tests")))
        let m = try c.receive()
        guard case .helloResult(let r) = m else { throw TestFailure("expected HelloResult, got \(m)") }
        c.hello = r
        return c
    }

    static func writeAll(_ s: Socket, _ bytes: [UInt8]) throws {
        var off = 0
        while off < bytes.count {
            if let n = try bytes.withUnsafeBytes({ try s.write(UnsafeRawBufferPointer(rebasing: $0[off...])) }) {
                off += n
            } else {
                _ = try s.waitFor(events: Int16(POLLOUT), timeoutMs: 1000)
            }
        }
    }

    static func readExactly(_ s: Socket, _ count: Int, timeoutMs: Int = 3000) throws -> [UInt8] {
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

    func send(_ m: ControlMessage) {
        try! TestClient.writeAll(tcp, sealer.seal(m.encode()))
    }

    func sendRaw(_ bytes: [UInt8]) throws { try TestClient.writeAll(tcp, bytes) }

    /// The next control message (queued ones first).
    func receive(timeoutMs: Int = 3000) throws -> ControlMessage {
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
    func expect<T>(timeoutMs: Int = 3000, _ what: String, _ match: (ControlMessage) -> T?) throws -> T {
        var skipped: [ControlMessage] = []
        defer { queued = skipped + queued }
        let deadline = MonotonicClock.milliseconds() + UInt64(timeoutMs)
        while true {
            let left = Int(Int64(deadline) - Int64(MonotonicClock.milliseconds()))
            guard left > 0 else { throw TestFailure("no \(what) within \(timeoutMs) ms (got \(skipped))") }
            let m: ControlMessage
            if !queued.isEmpty { m = queued.removeFirst() } else { m = try receive(timeoutMs: left) }
            if let v = match(m) { return v }
            skipped.append(m)
        }
    }

    /// True when the server closed the TCP connection within the timeout.
    func waitForClose(timeoutMs: Int) -> Bool {
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

    func join(_ name: String) throws -> JoinChannelResult {
        let rid = nextRequestID; nextRequestID += 1
        send(.joinChannel(JoinChannel(name: name, requestID: rid)))
        return try expect("JoinChannelResult") { m -> JoinChannelResult? in
            if case .joinChannelResult(let r) = m, r.requestID == rid { return r }
            return nil
        }
    }

    func announce(streamID: UInt32, kind: StreamKind = .mic, channels: UInt32 = 1) throws -> StreamAnnounceResult {
        let rid = nextRequestID; nextRequestID += 1
        send(.streamAnnounce(StreamAnnounce(streamID: streamID, kind: kind, channels: channels, requestID: rid)))
        return try expect("StreamAnnounceResult") { m -> StreamAnnounceResult? in
            if case .streamAnnounceResult(let r) = m, r.requestID == rid { return r }
            return nil
        }
    }

    /// An error reply with the given request id (0 matches any).
    func expectError(requestID: UInt32 = 0, timeoutMs: Int = 3000) throws -> ErrorMessage {
        try expect(timeoutMs: timeoutMs, "Error") { m -> ErrorMessage? in
            if case .error(let e) = m, requestID == 0 || e.requestID == requestID { return e }
            return nil
        }
    }

    // MARK: media

    func sendDatagram(_ bytes: [UInt8]) {
        _ = try! bytes.withUnsafeBytes { try udp.sendTo($0, serverAddress) }
    }

    /// Waits for one datagram.
    func receiveDatagram(timeoutMs: Int = 2000) -> [UInt8]? {
        var buf = [UInt8](repeating: 0, count: 2048)
        let deadline = MonotonicClock.milliseconds() + UInt64(timeoutMs)
        while true {
            if let (n, _) = try! buf.withUnsafeMutableBytes({ try udp.receiveFrom(into: $0) }) { return Array(buf[0..<n]) }
            let left = Int(Int64(deadline) - Int64(MonotonicClock.milliseconds()))
            guard left > 0, (try? udp.waitFor(events: Int16(POLLIN), timeoutMs: left)) == true else { return nil }
        }
    }

    /// Binds this client's UDP socket to its session (retrying every 250 ms).
    func bind(timeoutMs: Int = 3000) throws {
        var payload = ByteBuilder()
        payload.u64(hello.sessionID); payload.u32(epoch)
        let deadline = MonotonicClock.milliseconds() + UInt64(timeoutMs)
        while MonotonicClock.milliseconds() < deadline {
            let h = FrameHeader(type: .udpBinding, ssrc: hello.bindingID, seq: bindSeq, timestamp: 0)
            bindSeq += 1
            sendDatagram(MediaCrypto.seal(header: h, payload: payload.bytes, key: bindKeys.send))
            while let d = receiveDatagram(timeoutMs: 250) {
                guard let (rh, p) = try? MediaCrypto.open(d, key: bindKeys.receive), rh.type == .udpBinding else { continue }
                guard p == payload.bytes else { throw TestFailure("binding answer carries another payload") }
                return
            }
        }
        throw TestFailure("UDP binding not answered")
    }

    func rebind(to newEpoch: UInt32) throws {
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

    func sealVoice(ssrc: UInt32, seq: UInt64, timestamp: UInt32, opus: [UInt8], flags: FrameFlags = [], key: SymmetricKey? = nil) -> [UInt8] {
        MediaCrypto.seal(header: FrameHeader(type: .voice, flags: flags, ssrc: ssrc, seq: seq, timestamp: timestamp),
                         payload: opus, key: key ?? media.send)
    }

    /// Receives and opens the next VOICE datagram.
    func receiveVoice(timeoutMs: Int = 2000) -> (header: FrameHeader, payload: [UInt8])? {
        while let d = receiveDatagram(timeoutMs: timeoutMs) {
            guard let r = try? MediaCrypto.open(d, key: media.receive) else { continue }
            if r.header.type == .voice { return r }
        }
        return nil
    }

    func close() { tcp.close(); udp.close() }
}

struct ByteBuilder {
    var bytes: [UInt8] = []
    mutating func u32(_ v: UInt32) { for s in stride(from: 24, through: 0, by: -8) { bytes.append(UInt8(truncatingIfNeeded: v >> UInt32(s))) } }
    mutating func u64(_ v: UInt64) { for s in stride(from: 56, through: 0, by: -8) { bytes.append(UInt8(truncatingIfNeeded: v >> UInt64(s))) } }
}


extension TestServer {
    /// Polls the counters until `cond` holds, failing the test after `timeoutMs`.
    @discardableResult
    func waitFor(_ what: String, timeoutMs: Int = 3000, file: StaticString = #filePath, line: UInt = #line,
                 _ cond: (ServerCounters) -> Bool) -> ServerCounters {
        if let c = poll(timeoutMs: timeoutMs, cond) { return c }
        XCTFail("server counters never reached: \(what); now \(counters.summary)", file: file, line: line)
        return counters
    }
}
