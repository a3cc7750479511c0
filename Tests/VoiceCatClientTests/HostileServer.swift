// A server written in the tests that speaks the protocol (real handshake, sealed
// control frames, UDP binding and keepalive echo) and sends whatever a test tells
// it to: the client's defences are tested against the wire, not against mocks.
import Foundation
import VoiceCatProtocol
import VoiceCatSystem
import VoiceCatTestSupport

final class HostileServer: @unchecked Sendable {
    let identity: IdentityKey
    let listener: Socket
    let udp: Socket
    let port: UInt16
    var fingerprint: String { identity.fingerprint }

    private let lock = NSLock()
    private var conn: Socket?
    private var keys: SessionKeys?
    private var sealer: ControlSealer?
    private var opener: ControlOpener?
    private var stopping = false
    /// The server's own thread, and a drop another thread asked of it.
    private var runThread: pthread_t?
    private var dropRequested = false
    private var thread: Thread?
    private let done = DispatchSemaphore(value: 0)
    private var nextSSRC: UInt32 = 1000

    // What the client did (read under the lock through the accessors).
    private var _handshakes = 0
    private var _received: [ControlMessage] = []
    var handshakes: Int { lock.lock(); defer { lock.unlock() }; return _handshakes }
    var received: [ControlMessage] { lock.lock(); defer { lock.unlock() }; return _received }

    /// Channels listed in HelloResult; the reply to each JoinChannel or StreamAnnounce
    /// (nil: a normal one). Set by the test thread, read by the server's (under the lock).
    let channels = [ChannelInfo(id: 1, name: "Lobby", audio: .speech), ChannelInfo(id: 2, name: "Other", audio: .speech)]
    private var _joinReply: ((JoinChannel) -> ControlMessage)?
    private var _announceReply: ((StreamAnnounce, UInt32) -> ControlMessage)?
    var joinReply: ((JoinChannel) -> ControlMessage)? {
        get { lock.lock(); defer { lock.unlock() }; return _joinReply }
        set { lock.lock(); _joinReply = newValue; lock.unlock() }
    }
    var announceReply: ((StreamAnnounce, UInt32) -> ControlMessage)? {
        get { lock.lock(); defer { lock.unlock() }; return _announceReply }
        set { lock.lock(); _announceReply = newValue; lock.unlock() }
    }
    /// Replaces the HelloResult: runs on the server's thread when Hello comes.
    private var _helloHook: ((HostileServer) -> Void)?
    var helloHook: ((HostileServer) -> Void)? {
        get { lock.lock(); defer { lock.unlock() }; return _helloHook }
        set { lock.lock(); _helloHook = newValue; lock.unlock() }
    }
    /// Set by a test to stop a flood thread it started.
    private var _floodStop = false
    var floodStop: Bool {
        get { lock.lock(); defer { lock.unlock() }; return _floodStop }
        set { lock.lock(); _floodStop = newValue; lock.unlock() }
    }
    /// Sends `make(i)` for i = 0, 1, ... on a thread of its own until `floodStop`, `count`
    /// messages, or the connection is gone; returns how many were sent through `done`.
    func flood(count: Int = .max, delayUs: UInt32 = 0, _ make: @escaping (Int) -> ControlMessage, done: ((Int) -> Void)? = nil) {
        let t = Thread { [self] in
            var i = 0
            if delayUs > 0 { usleep(delayUs) }
            while i < count && !floodStop {
                lock.lock(); let up = conn != nil && sealer != nil; lock.unlock()
                if !up { break }
                send(make(i)); i += 1
            }
            done?(i)
        }
        t.start()
    }
    let userID: UInt32 = 1
    let bindingID: UInt32 = 77
    /// The seq of its UDP_BINDING answers (they must increase).
    private var bindSeq: UInt64 = 0

    /// True: the connection is not read (a server that stopped reading: the client's
    /// writes fill the socket buffers).
    var readingPaused: Bool {
        get { lock.lock(); defer { lock.unlock() }; return _readingPaused }
        set { lock.lock(); _readingPaused = newValue; lock.unlock() }
    }
    private var _readingPaused = false

    init(identity: IdentityKey = IdentityKey(), port: UInt16 = 0) throws {
        self.identity = identity
        var addr = try SocketAddress(host: "127.0.0.1", port: port)
        var t: Socket? = nil, u: Socket? = nil
        for _ in 0..<32 {
            let l = try Socket.listenTCP(addr)
            let a = try l.localAddress()
            if let s = try? Socket.bindUDP(a) { t = l; u = s; addr = a; break }
            if port != 0 { break }
        }
        guard let t, let u else { throw SystemError("hostile bind", errno: EADDRINUSE) }
        listener = t; udp = u; self.port = addr.port
        try listener.setNonBlocking()
        try udp.setNonBlocking()
        let th = Thread { [self] in run(); done.signal() }
        thread = th
        th.start()
    }

    func stop() {
        lock.lock(); stopping = true; lock.unlock()
        done.wait()
        listener.close(); udp.close()
        lock.lock(); conn?.close(); conn = nil; lock.unlock()
    }

    /// Sends a message to the connected client (any thread).
    func send(_ m: ControlMessage) { sendPlain(m.encode()) }

    /// Sends a sealed control plaintext as it is (undecodable bodies too).
    func sendPlain(_ plain: [UInt8]) {
        lock.lock(); defer { lock.unlock() }
        guard let c = conn, sealer != nil else { return }
        let frame = sealer!.seal(plain)
        var off = 0
        while off < frame.count {
            let r: Int?
            do { r = try frame.withUnsafeBytes({ try c.write(UnsafeRawBufferPointer(rebasing: $0[off...])) }) } catch { return }
            if let n = r { off += n } else { usleep(1000) }
        }
    }

    /// Closes the client's control connection (a server that went away): at once on
    /// the server's thread (from a reply hook), else by that thread within its next
    /// poll (the socket is read there without the lock).
    func dropConnection() {
        lock.lock(); defer { lock.unlock() }
        if let t = runThread, pthread_equal(t, pthread_self()) != 0 {
            conn?.close(); conn = nil; sealer = nil; opener = nil
        } else {
            dropRequested = true
        }
    }

    /// Forgets `c` if it is still the current connection (a new one may have replaced it).
    private func drop(_ c: Socket) {
        lock.lock(); defer { lock.unlock() }
        if conn === c { conn = nil; sealer = nil; opener = nil }
        c.close()
    }

    private func run() {
        var buf = [UInt8](repeating: 0, count: 65536)
        lock.lock(); runThread = pthread_self(); lock.unlock()
        while true {
            lock.lock()
            if dropRequested { dropRequested = false; conn?.close(); conn = nil; sealer = nil; opener = nil }
            let stop = stopping; let c = _readingPaused ? nil : conn
            lock.unlock()
            if stop { return }
            var fds = [pollfd(fd: listener.fd, events: Int16(POLLIN), revents: 0), pollfd(fd: udp.fd, events: Int16(POLLIN), revents: 0)]
            if let c { fds.append(pollfd(fd: c.fd, events: Int16(POLLIN), revents: 0)) }
            _ = poll(&fds, nfds_t(fds.count), 5)
            if let (s, _) = try? listener.accept() { handshake(s) }
            while let (n, from) = try? buf.withUnsafeMutableBytes({ try udp.receiveFrom(into: $0) }) { datagram(Array(buf[0..<n]), from) }
            if let c, fds.count > 2, fds[2].revents != 0 {
                let r: Int??
                do { r = .some(try buf.withUnsafeMutableBytes { try c.read(into: $0) }) } catch { r = nil }
                if let r, let n = r {
                    if n == 0 { drop(c); continue }
                    lock.lock(); opener?.append(buf[0..<n]); lock.unlock()
                    while true {
                        lock.lock(); let p = try? opener?.next(); lock.unlock()
                        guard let plain = p ?? nil, let m = try? ControlMessage.decode(plain) else { break }
                        handle(m)
                    }
                } else if r == nil { drop(c) }
            }
        }
    }

    private func handshake(_ s: Socket) {
        guard let hello = try? Self.readExactly(s, Handshake.clientHelloSize),
              let (reply, k) = try? ServerHandshake.respond(clientHello: hello, identity: identity) else { s.close(); return }
        var off = 0
        while off < reply.count {
            if let n = try? reply.withUnsafeBytes({ try s.write(UnsafeRawBufferPointer(rebasing: $0[off...])) }) { off += n } else { usleep(1000) }
        }
        try? s.setNonBlocking()
        lock.lock()
        conn?.close()
        conn = s; keys = k
        sealer = ControlSealer(key: k.control.send); opener = ControlOpener(key: k.control.receive)
        _handshakes += 1
        lock.unlock()
    }

    static func readExactly(_ s: Socket, _ count: Int) throws -> [UInt8] {
        var out = [UInt8]()
        var buf = [UInt8](repeating: 0, count: count)
        while out.count < count {
            guard try s.waitFor(events: Int16(POLLIN), timeoutMs: 2000) else { throw SystemError("read", errno: ETIMEDOUT) }
            guard let n = try buf.withUnsafeMutableBytes({ try s.read(into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<(count - out.count)])) }) else { continue }
            if n == 0 { throw SystemError("read", errno: ECONNRESET) }
            out += buf[0..<n]
        }
        return out
    }

    private func handle(_ m: ControlMessage) {
        lock.lock(); _received.append(m); lock.unlock()
        switch m {
        case .hello:
            if let h = helloHook { h(self); return }
            send(.helloResult(HelloResult(sessionID: 42, userID: userID, bindingID: bindingID, serverName: "hostile", channels: channels,
                                          maxDatagramBytes: 1400)))
        case .joinChannel(let j):
            if let r = joinReply { send(r(j)); return }
            let ch = channels.first { $0.name == j.name }
            if let ch {
                send(.joinChannelResult(JoinChannelResult(channelID: ch.id, audio: ch.audio, members: [], requestID: j.requestID)))
            } else {
                send(.error(ErrorMessage(code: .notFound, message: "no channel", requestID: j.requestID)))
            }
        case .streamAnnounce(let a):
            lock.lock(); nextSSRC += 1; let ssrc = nextSSRC; lock.unlock()
            if let r = announceReply { send(r(a, ssrc)); return }
            send(.streamAnnounceResult(StreamAnnounceResult(streamID: a.streamID, ssrc: ssrc, effectiveAudio: .speech, requestID: a.requestID)))
        case .ping(let p):
            send(.pong(Pong(timestamp: p.timestamp)))
        case .rebind(let r):
            send(.rebindResult(RebindResult(epoch: r.epoch)))
        default:
            break
        }
    }

    private func datagram(_ d: [UInt8], _ from: SocketAddress) {
        guard let h = try? d.withUnsafeBytes({ try FrameHeader.parse($0) }) else { return }
        lock.lock(); let k = keys; lock.unlock()
        guard let k else { return }
        switch h.type {
        case .udpBinding:
            // Any REQUEST is answered BOUND at once (no cookie: this server trusts every address).
            for epoch in UInt32(0)..<4 {
                let bk = k.bind(epoch: epoch)
                if let (_, p) = try? MediaCrypto.open(d, key: bk.receive),
                   var answer = try? p.withUnsafeBytes({ try UDPBindingPayload.parse($0) }), answer.kind == .request {
                    answer.kind = .bound
                    lock.lock(); bindSeq += 1; let seq = bindSeq; lock.unlock()
                    let r = answer.sealed(bindingID: bindingID, seq: seq, key: bk.send)
                    _ = try? r.withUnsafeBytes { try udp.sendTo($0, from) }
                    return
                }
            }
        case .keepalive:
            _ = try? d.withUnsafeBytes { try udp.sendTo($0, from) }
        case .voice:
            break
        }
    }
}
