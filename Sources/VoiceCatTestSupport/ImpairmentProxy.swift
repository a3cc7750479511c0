// A seeded network impairment proxy for tests: sits between clients and a server
// on loopback, relays TCP untouched and impairs UDP in each direction with
// Gilbert-Elliott bursty loss, delay with Gaussian jitter and spikes, reordering
// (a consequence of jitter) and duplication. Everything stays on 127.0.0.1.
import Glibc
import VoiceCatSimulation
import VoiceCatSystem

/// The network model of the proxy: the same one the jitter-buffer traces use.
public typealias Impairment = TraceGenerator.Network

public final class ImpairmentProxy {
    public let port: UInt16
    /// Datagrams the impairment dropped so far (any thread).
    public var udpDropped: Int { lock.withLock { dropped } }
    private var dropped = 0

    private let target: SocketAddress
    private let tcpListener: Socket
    private let udp: Socket
    private var upstream: Impairment
    private var downstream: Impairment
    private var rng: TraceGenerator.Random
    private var badUp = false, badDown = false
    private var clients: [SocketAddress: Socket] = [:]     // client address → socket towards the server
    private var pipes: [(Socket, Socket, [UInt8], [UInt8])] = []  // TCP client, TCP server, pending to server, pending to client
    private var queue: [(due: Double, bytes: [UInt8], via: Socket, to: SocketAddress)] = []
    private let lock = Lock()
    private var stopping = false
    private var thread: SystemThread?

    /// Listens on a free loopback port (TCP and UDP) and relays to `targetPort`.
    public init(targetPort: UInt16, upstream: Impairment = Impairment(), downstream: Impairment, seed: UInt64) throws {
        target = try SocketAddress(host: "127.0.0.1", port: targetPort)
        var addr = try SocketAddress(host: "127.0.0.1", port: 0)
        var t: Socket? = nil, u: Socket? = nil
        for _ in 0..<32 {
            let l = try Socket.listenTCP(addr)
            let a = try l.localAddress()
            if let s = try? Socket.bindUDP(a) { t = l; u = s; addr = a; break }
        }
        guard let t, let u else { throw SystemError("proxy bind", errno: EADDRINUSE) }
        tcpListener = t
        udp = u
        port = addr.port
        try tcpListener.setNonBlocking()
        try udp.setNonBlocking()
        self.upstream = upstream
        self.downstream = downstream
        rng = TraceGenerator.Random(seed: seed)
        thread = SystemThread(name: "vc-proxy") { [unowned self] in self.run() }
    }

    /// Changes the impairment of each direction from now on (for example a blackout).
    public func setImpairment(upstream up: Impairment, downstream down: Impairment) {
        lock.withLock { upstream = up; downstream = down }
    }

    public func stop() {
        lock.withLock { stopping = true }
        thread?.join()
        thread = nil
    }

    private func nowMs() -> Double { Double(MonotonicClock.nanoseconds()) / 1e6 }

    /// Decides the fate of one datagram: nil = dropped, else the delays of its copies.
    private func impair(_ m: Impairment, bad: inout Bool) -> [Double]? { m.fate(&rng, bad: &bad) }

    private func schedule(_ bytes: [UInt8], via: Socket, to: SocketAddress, delays: [Double]?) {
        guard let delays else { lock.withLock { dropped += 1 }; return }
        let now = nowMs()
        for d in delays { queue.append((now + d, bytes, via, to)) }
    }

    private func run() {
        var buf = [UInt8](repeating: 0, count: 65536)
        var ps = PollSet()
        while !lock.withLock({ stopping }) {
            ps.removeAll()
            ps.add(tcpListener.fd, events: Int16(POLLIN))
            ps.add(udp.fd, events: Int16(POLLIN))
            let ups = Array(clients)
            for (_, s) in ups { ps.add(s.fd, events: Int16(POLLIN)) }
            for p in pipes { ps.add(p.0.fd, events: Int16(POLLIN)); ps.add(p.1.fd, events: Int16(POLLIN)) }
            _ = try? ps.wait(timeoutMs: 1)
            if let (s, _) = try? tcpListener.accept(), let up = try? Socket.connectTCP(target, timeoutMs: 1000) {
                try? s.setNonBlocking()
                pipes.append((s, up, [], []))
            }
            // Client → server datagrams.
            while let (n, from) = try? buf.withUnsafeMutableBytes({ try udp.receiveFrom(into: $0) }) {
                let via: Socket
                if let s = clients[from] { via = s } else {
                    guard let s = try? Socket.udp(familyOf: target) else { continue }
                    try? s.setNonBlocking()
                    clients[from] = s
                    via = s
                }
                let m = lock.withLock { upstream }
                schedule(Array(buf[0..<n]), via: via, to: target, delays: impair(m, bad: &badUp))
            }
            // Server → client datagrams.
            for (client, s) in ups {
                while let (n, _) = try? buf.withUnsafeMutableBytes({ try s.receiveFrom(into: $0) }) {
                    let m = lock.withLock { downstream }
                    schedule(Array(buf[0..<n]), via: udp, to: client, delays: impair(m, bad: &badDown))
                }
            }
            // Due datagrams.
            let now = nowMs()
            var i = 0
            while i < queue.count {
                if queue[i].due <= now {
                    let q = queue.remove(at: i)
                    _ = try? q.bytes.withUnsafeBytes { try q.via.sendTo($0, q.to) }
                } else { i += 1 }
            }
            // TCP relay, untouched.
            var keep: [(Socket, Socket, [UInt8], [UInt8])] = []
            for var p in pipes {
                var open = true
                for (from, dir) in [(p.0, 0), (p.1, 1)] {
                    do {
                        if let n = try buf.withUnsafeMutableBytes({ try from.read(into: $0) }) {
                            if n == 0 { open = false } else if dir == 0 { p.2 += buf[0..<n] } else { p.3 += buf[0..<n] }
                        }
                    } catch { open = false }
                }
                if !p.2.isEmpty, let n = try? p.2.withUnsafeBytes({ try p.1.write($0) }) { p.2.removeFirst(n) }
                if !p.3.isEmpty, let n = try? p.3.withUnsafeBytes({ try p.0.write($0) }) { p.3.removeFirst(n) }
                if open { keep.append(p) } else { p.0.close(); p.1.close() }
            }
            pipes = keep
        }
        for p in pipes { p.0.close(); p.1.close() }
        tcpListener.close()
        udp.close()
    }
}
