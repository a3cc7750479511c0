// The `talk` role: one protocol session that publishes N streams and sends
// pre-encoded Opus packets on them in real time. It speaks the wire protocol through
// VoiceCatProtocol directly (not through the client engine) so that N talkers cost
// this machine only a seal and a sendto per frame, not N Opus encoders: the
// listener being measured shares the machine's two cores with it.
//
// One session carries all N streams (the `serve` role allows 64 per user), so the
// server relays each frame to the listener alone; the streams' send times are
// spread evenly over the frame period, as independent talkers' would be.
import Glibc
import VoiceCatProtocol
import VoiceCatSystem

/// A blocking protocol session: handshake, Hello, UDP binding, requests.
final class RawSession {
    let tcp: Socket
    let udp: Socket
    let server: SocketAddress
    let keys: SessionKeys
    private var sealer: ControlSealer
    private var opener: ControlOpener
    private(set) var hello: HelloResult
    private var nextRequestID: UInt32 = 1
    private var readBuffer = [UInt8](repeating: 0, count: 65536)

    init(port: UInt16, username: String) throws {
        server = try SocketAddress(host: "127.0.0.1", port: port)
        tcp = try Socket.connectTCP(server, timeoutMs: 5000)
        udp = try Socket.udp(familyOf: server)
        try udp.setNonBlocking()
        udp.setSendBuffer(1 << 20)
        let hs = ClientHandshake()
        try RawSession.writeAll(tcp, hs.helloBytes)
        var reply = try RawSession.read(tcp, exactly: Handshake.serverHelloPrefixSize)
        reply += try RawSession.read(tcp, exactly: try Handshake.serverHelloBodySize(prefix: reply))
        (keys, _) = try hs.finish(serverHello: reply, pinnedFingerprint: nil)
        sealer = ControlSealer(key: keys.control.send)
        opener = ControlOpener(key: keys.control.receive)
        hello = HelloResult(sessionID: 0, userID: 0, bindingID: 0, serverName: "", channels: [])
        try send(.hello(Hello(username: username, clientName: "bench-audio")))
        hello = try wait("HelloResult") { if case .helloResult(let r) = $0 { return r } else { return nil } }
        try bindUDP()
    }

    struct Failure: Error, CustomStringConvertible { let description: String }

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

    static func read(_ s: Socket, exactly count: Int) throws -> [UInt8] {
        var out: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: count)
        while out.count < count {
            guard try s.waitFor(events: Int16(POLLIN), timeoutMs: 5000) else { throw Failure(description: "handshake timed out") }
            let want = count - out.count
            guard let n = try buf.withUnsafeMutableBytes({ try s.read(into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<want])) }) else { continue }
            if n == 0 { throw Failure(description: "the server closed the connection") }
            out += buf[0..<n]
        }
        return out
    }

    func send(_ m: ControlMessage) throws { try RawSession.writeAll(tcp, sealer.seal(m.encode())) }

    /// Reads control messages until `match` accepts one (others are skipped).
    func wait<T>(_ what: String, _ match: (ControlMessage) -> T?) throws -> T {
        let deadline = MonotonicClock.milliseconds() + 5000
        while true {
            while let plain = try opener.next() {
                let m = try ControlMessage.decode(plain)
                if case .error(let e) = m { throw Failure(description: "server: \(e.message)") }
                if let v = match(m) { return v }
            }
            let left = Int(Int64(deadline) - Int64(MonotonicClock.milliseconds()))
            guard left > 0, try tcp.waitFor(events: Int16(POLLIN), timeoutMs: left) else { throw Failure(description: "no \(what) from the server") }
            guard let n = try readBuffer.withUnsafeMutableBytes({ try tcp.read(into: $0) }) else { continue }
            if n == 0 { throw Failure(description: "the server closed the connection") }
            opener.append(readBuffer[0..<n])
        }
    }

    /// Reads and drops whatever control messages arrived (non-blocking).
    func discardControl() {
        while (try? tcp.waitFor(events: Int16(POLLIN), timeoutMs: 0)) == true,
              let n = try? readBuffer.withUnsafeMutableBytes({ try tcp.read(into: $0) }), n > 0 {
            opener.append(readBuffer[0..<n])
            while (try? opener.next()) != nil {}
        }
    }

    private func bindUDP() throws {
        var payload = [UInt8](repeating: 0, count: 12)
        for i in 0..<8 { payload[i] = UInt8(truncatingIfNeeded: hello.sessionID >> UInt64(56 - 8 * i)) }
        let bind = keys.bind(epoch: 0)
        var buf = [UInt8](repeating: 0, count: 2048)
        for seq in 0..<20 {
            let d = MediaCrypto.seal(header: FrameHeader(type: .udpBinding, ssrc: hello.bindingID, seq: UInt64(seq), timestamp: 0),
                                     payload: payload, key: bind.send)
            _ = try d.withUnsafeBytes { try udp.sendTo($0, server) }
            guard try udp.waitFor(events: Int16(POLLIN), timeoutMs: 250) else { continue }
            if let (n, _) = try buf.withUnsafeMutableBytes({ try udp.receiveFrom(into: $0) }),
               let (h, _) = try? MediaCrypto.open(Array(buf[0..<n]), key: bind.receive), h.type == .udpBinding {
                return
            }
        }
        throw Failure(description: "the UDP binding was not answered")
    }

    func join(_ channel: String) throws -> JoinChannelResult {
        let rid = nextRequestID; nextRequestID += 1
        try send(.joinChannel(JoinChannel(name: channel, requestID: rid)))
        return try wait("JoinChannelResult") { if case .joinChannelResult(let r) = $0, r.requestID == rid { return r } else { return nil } }
    }

    func announce(streamID: UInt32) throws -> StreamAnnounceResult {
        let rid = nextRequestID; nextRequestID += 1
        try send(.streamAnnounce(StreamAnnounce(streamID: streamID, kind: .mic, channels: 1, requestID: rid)))
        return try wait("StreamAnnounceResult") { if case .streamAnnounceResult(let r) = $0, r.requestID == rid { return r } else { return nil } }
    }
}

/// `talk --port P --channel NAME --streams N`: sends until stdin closes.
func runTalker(_ args: Arguments) throws {
    let n = args.int("streams", 1)
    let session = try RawSession(port: UInt16(args.int("port", 0)), username: "talker-\(getpid())")
    let join = try session.join(args.string("channel", "Lobby"))
    let audio = join.audio
    var ssrcs: [UInt32] = []
    for i in 0..<n { ssrcs.append(try session.announce(streamID: UInt32(i + 1)).ssrc) }
    let pool = try PacketPool(audio: audio, signals: min(n, Bench.signalCount), framesPerSignal: Bench.framesPerSignal)
    let media = session.keys.media(epoch: 0)
    let out = UnsafeMutableRawBufferPointer.allocate(byteCount: 2048, alignment: 16)
    defer { out.deallocate() }
    let periodNs = UInt64(audio.frameMicros) * 1000
    let fec: FrameFlags = audio.fec ? [.fec] : []
    ParentWatch.shared.start()
    say("ready")
    var sent: UInt64 = 0, late: UInt64 = 0, failed: UInt64 = 0
    let t0 = MonotonicClock.nanoseconds() + 20_000_000
    var k = 0
    while !ParentWatch.shared.stopRequested {
        for i in 0..<n {
            let due = t0 + UInt64(k) * periodNs + UInt64(i) * periodNs / UInt64(n)
            sleepUntil(ns: due)
            if MonotonicClock.nanoseconds() > due + 5_000_000 { late += 1 }
            let header = FrameHeader(type: .voice, flags: k == 0 ? fec.union(.marker) : fec, ssrc: ssrcs[i], seq: UInt64(k),
                                     timestamp: UInt32(truncatingIfNeeded: k * audio.frameSamples) &+ ssrcs[i] &* 7919)
            let len = pool.packet(stream: i, frame: k).withUnsafeBytes { p in
                MediaCrypto.seal(header: header, payload: p, key: media.send, into: out)
            }
            if (try? session.udp.sendTo(UnsafeRawBufferPointer(rebasing: out[0..<len]), session.server)) != nil { sent += 1 } else { failed += 1 }
        }
        k += 1
        if k % 50 == 0 { session.discardControl() }
    }
    report("sent", Double(sent))
    report("late", Double(late))
    report("send_failed", Double(failed))
    say("done")
}
