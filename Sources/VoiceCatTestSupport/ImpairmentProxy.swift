// A seeded network impairment proxy for tests: sits between clients and a server
// on loopback, impairs UDP in each direction with Gilbert-Elliott bursty loss,
// delay with Gaussian jitter and spikes, reordering (a consequence of jitter) and
// duplication, freezes (what would arrive during one is delivered when it ends),
// and relays TCP with an optional fixed delay or a stall (nothing
// moves, no connection is accepted, until it ends). Everything stays on 127.0.0.1.
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
    private var pipes: [TCPPipe] = []
    private var tcpStalled = false
    private var tcpDelayMs = 0.0

    /// One relayed TCP connection: chunks wait until due, then go out in order.
    final class TCPPipe {
        let client: Socket, server: Socket
        var toServer: [(due: Double, bytes: [UInt8])] = []
        var toClient: [(due: Double, bytes: [UInt8])] = []
        /// Nothing moves on this connection any more, and it stays open (freezeExistingTCP).
        var frozen = false
        init(client: Socket, server: Socket) { self.client = client; self.server = server }
    }
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

    /// Sees every client → server datagram as it arrives (on the proxy's thread),
    /// before the impairment: what the clients put on the wire.
    public func observeUpstream(_ body: (([UInt8]) -> Void)?) { lock.withLock { upstreamObserver = body } }
    private var upstreamObserver: (([UInt8]) -> Void)?

    /// Stalls TCP (both directions, and new connections) until called with false.
    public func setTCPStalled(_ on: Bool) { lock.withLock { tcpStalled = on } }

    /// The TCP connections relayed now stop moving for good, both ways, without being
    /// closed (a path that stopped carrying them); new connections are relayed as usual.
    public func freezeExistingTCP() { lock.withLock { freezeRequested = true } }
    private var freezeRequested = false

    /// Delays every relayed TCP chunk by `ms` (each direction).
    public func setTCPDelay(ms: Double) { lock.withLock { tcpDelayMs = ms } }

    public func stop() {
        lock.withLock { stopping = true }
        thread?.join()
        thread = nil
    }

    private func nowMs() -> Double { Double(MonotonicClock.nanoseconds()) / 1e6 }

    /// Decides the fate of one datagram: nil = dropped, else the delays of its copies.
    private func impair(_ m: Impairment, bad: inout Bool) -> [Double]? { m.fate(&rng, bad: &bad) }

    private func schedule(_ bytes: [UInt8], via: Socket, to: SocketAddress, delays: [Double]?, model m: Impairment) {
        guard let delays else { lock.withLock { dropped += 1 }; return }
        let now = nowMs()
        // A freeze holds what would leave during it until it ends (sent in order).
        for d in delays { queue.append((m.unfrozen(now + d), bytes, via, to)) }
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
            let (stalled, tcpDelay, freeze) = lock.withLock { () -> (Bool, Double, Bool) in
                defer { freezeRequested = false }
                return (tcpStalled, tcpDelayMs, freezeRequested)
            }
            if freeze { for p in pipes { p.frozen = true } }
            if !stalled {
                for p in pipes where !p.frozen { ps.add(p.client.fd, events: Int16(POLLIN)); ps.add(p.server.fd, events: Int16(POLLIN)) }
            }
            _ = try? ps.wait(timeoutMs: 1)
            if !stalled, let (s, _) = try? tcpListener.accept() {
                if let up = try? Socket.connectTCP(target, timeoutMs: 1000) {
                    try? s.setNonBlocking()
                    try? up.setNonBlocking()
                    pipes.append(TCPPipe(client: s, server: up))
                } else {
                    s.close()
                }
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
                let (m, observer) = lock.withLock { (upstream, upstreamObserver) }
                observer?(Array(buf[0..<n]))
                schedule(Array(buf[0..<n]), via: via, to: target, delays: impair(m, bad: &badUp), model: m)
            }
            // Server → client datagrams.
            for (client, s) in ups {
                while let (n, _) = try? buf.withUnsafeMutableBytes({ try s.receiveFrom(into: $0) }) {
                    let m = lock.withLock { downstream }
                    schedule(Array(buf[0..<n]), via: udp, to: client, delays: impair(m, bad: &badDown), model: m)
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
            // TCP relay (delayed by tcpDelay; nothing moves while stalled).
            if stalled { continue }
            var keep: [TCPPipe] = []
            for p in pipes {
                if p.frozen { keep.append(p); continue }
                var open = true
                for (from, dir) in [(p.client, 0), (p.server, 1)] {
                    do {
                        if let n = try buf.withUnsafeMutableBytes({ try from.read(into: $0) }) {
                            if n == 0 { open = false } else if dir == 0 {
                                p.toServer.append((now + tcpDelay, Array(buf[0..<n])))
                            } else {
                                p.toClient.append((now + tcpDelay, Array(buf[0..<n])))
                            }
                        }
                    } catch { open = false }
                }
                func flush(_ q: inout [(due: Double, bytes: [UInt8])], to s: Socket) {
                    while let first = q.first, first.due <= now {
                        guard let n = try? first.bytes.withUnsafeBytes({ try s.write($0) }) else { return }
                        if n < first.bytes.count { q[0].bytes.removeFirst(n); return }
                        q.removeFirst()
                    }
                }
                flush(&p.toServer, to: p.server)
                flush(&p.toClient, to: p.client)
                if open { keep.append(p) } else {
                    p.client.close(); p.server.close()
                }
            }
            pipes = keep
        }
        for p in pipes { p.client.close(); p.server.close() }
        for (_, s) in clients { s.close() }
        pipes = []
        clients = [:]
        tcpListener.close()
        udp.close()
    }
}
