// The parts of a load run: a server under test, peers (sessions speaking the real
// protocol), and one measuring loop that paces talkers, keepalives and floods,
// receives every relayed datagram and times it. Audio is never encoded or decoded:
// a VOICE payload is random bytes of a typical Opus packet's size.
import Glibc
import VoiceCatProtocol
import VoiceCatSystem
import VoiceCatTestSupport

/// A voicecat-server child process with its own config, identity and port.
final class ServerUnderTest {
    let process: ChildProcess
    let port: UInt16
    let dir: String

    init(binary: String, config: String) throws {
        dir = try ChildProcess.temporaryDirectory()
        try Files.createExclusive(dir + "/server.conf", bytes: Array(config.utf8), mode: 0o600)
        process = try ChildProcess(binary, ["--config", dir + "/server.conf", "--port", "any", "--port-file", dir + "/port",
                                            "--identity", dir + "/identity.key"], outputPath: dir + "/server.log")
        children.append(process)
        guard let p = process.waitForFile(dir + "/port", timeoutMs: 10_000).flatMap({ UInt16($0) }) else {
            throw TestFailure("the server did not start: \(process.output)")
        }
        port = p
    }

    func cpuSeconds() -> Double { process.cpuSeconds() }

    func stop() {
        process.signal(SIGTERM)
        process.wait()
        for f in ["server.conf", "port", "identity.key", "server.log"] { unlink(dir + "/" + f) }
        rmdir(dir)
    }
}

/// One session of the load: its control and media sockets, and (when it talks) its ssrc.
final class Peer {
    let client: WireClient
    let index: Int
    var channel = -1
    var ssrc: UInt32 = 0
    var talks: Bool { ssrc != 0 }
    var seq: UInt64 = 0
    var baseSeq: UInt64 = 0
    /// When each seq (from baseSeq) was sent in the current window (ns). Raw memory: in
    /// the floor run another thread writes it while the measuring loop reads it.
    var sentAt = UnsafeMutableBufferPointer<UInt64>(start: nil, count: 0)
    var nextSendNs: UInt64 = 0
    var nextKeepaliveNs: UInt64 = 0

    init(_ client: WireClient, index: Int) { self.client = client; self.index = index }
    deinit { sentAt.deallocate() }

    func resetSendTimes(_ count: Int) {
        sentAt.deallocate()
        sentAt = .allocate(capacity: count)
        sentAt.initialize(repeating: 0)
    }

    /// Logs in (and joins, announces, binds as asked).
    static func make(port: UInt16, name: String, index: Int, channel: String?, talk: Bool, bind: Bool) throws -> Peer {
        let p = Peer(try WireClient.login(port: port, username: name, timeoutMs: 20_000), index: index)
        if let ch = channel {
            let r = try p.client.join(ch, timeoutMs: 20_000)
            p.channel = Int(r.channelID)
            if talk { p.ssrc = try p.client.announce(streamID: 1).ssrc }
        }
        if bind { try p.client.bind(timeoutMs: 10_000) }
        return p
    }
}

/// Latencies in 10 µs buckets up to 1 s (anything later lands in the last one).
struct LatencyHistogram {
    private var buckets = [UInt64](repeating: 0, count: 100_001)
    private(set) var count: UInt64 = 0
    private(set) var maxNs: UInt64 = 0

    mutating func add(_ ns: UInt64) {
        buckets[Int(min(ns / 10_000, 100_000))] += 1
        count += 1
        maxNs = max(maxNs, ns)
    }

    /// The latency (ms) below which `fraction` of the samples lie.
    func percentileMs(_ fraction: Double) -> Double {
        guard count > 0 else { return 0 }
        let target = UInt64((Double(count) * fraction).rounded(.up))
        var seen: UInt64 = 0
        for (i, n) in buckets.enumerated() {
            seen += n
            if seen >= target { return Double(i + 1) * 0.01 }
        }
        return Double(maxNs) / 1e6
    }

    var maxMs: Double { Double(maxNs) / 1e6 }
}

/// Every peer sends a UDP keepalive (and, with `pings`, a TCP Ping as the client library
/// does) once per period, the peers spread evenly over it. Peers come due in index order,
/// so a cursor finds the next one without scanning them all.
struct KeepaliveRound {
    let periodNs: UInt64
    private var cursor = 0

    init(_ peers: [Peer], periodMs: UInt64, startNs: UInt64) {
        periodNs = periodMs * 1_000_000
        for (k, p) in peers.enumerated() { p.nextKeepaliveNs = startNs + UInt64(k) * periodNs / UInt64(max(1, peers.count)) }
    }

    /// When the next keepalive is due (.max with no peers).
    func nextDue(_ peers: [Peer]) -> UInt64 { peers.isEmpty ? .max : peers[cursor].nextKeepaliveNs }

    /// Sends what is due; returns how many keepalives went out.
    mutating func sendDue(_ peers: [Peer], now: UInt64, pings: Bool) -> Int {
        var sent = 0
        while !peers.isEmpty, peers[cursor].nextKeepaliveNs <= now {
            let p = peers[cursor]
            p.nextKeepaliveNs += periodNs
            let ka = FrameHeader(type: .keepalive, ssrc: p.client.hello.bindingID, seq: 0, timestamp: UInt32(truncatingIfNeeded: now / 1_000_000))
            p.client.sendDatagram(ka.bytes)
            if pings { _ = try? WireClient.writeAll(p.client.tcp, p.client.sealer.seal(ControlMessage.ping(Ping(timestamp: now / 1_000_000)).encode())) }
            sent += 1
            cursor = (cursor + 1) % peers.count
        }
        return sent
    }
}

/// What one measured window gave.
struct Window {
    var seconds = 0.0
    var serverCPU = 0.0
    var loadgenCPU = 0.0
    var framesSent = 0
    /// Relayed datagrams expected at the listeners and received by them.
    var expected = 0
    var received = 0
    var duplicates = 0
    /// Sampled relayed datagrams that did not open with the listener's key (must be 0).
    var badSamples = 0
    var latency = LatencyHistogram()
    var keepalivesSent = 0
    var keepaliveEchoes = 0
    var floodPingsWritten = 0
    var floodPongs = 0
    var junkSent = 0

    var lossPercent: Double { expected == 0 ? 0 : 100 * Double(expected - min(received, expected)) / Double(expected) }
    var forwardedPerCPUSecond: Double { serverCPU > 0 ? Double(received) / serverCPU : 0 }
    var cpuMicrosPerForward: Double { received > 0 ? serverCPU * 1e6 / Double(received) : 0 }
    var serverCorePercent: Double { seconds > 0 ? 100 * serverCPU / seconds : 0 }
}

/// What the measuring loop does besides relaying: a control flood from one session,
/// junk datagrams from an unbound socket, or (`floor`) no server at all: each talker
/// frame goes straight to every listener with one sendmmsg, to measure what the kernel
/// alone costs per datagram on this machine's loopback.
struct Extras {
    var keepaliveMs: UInt64 = 5000
    var pingFlood: Peer? = nil
    var junkPerSecond = 0
    var floor = false
}

/// Sends every talker's frames at `framesPerSecond` (spread evenly), keeps everyone
/// alive, and receives and times what the server relays, for `seconds` after `warmup`.
func measure(server: ServerUnderTest, peers: [Peer], framesPerSecond: Int, seconds: Double, warmup: Double = 1,
             extras: Extras = Extras()) throws -> Window {
    let all = peers
    let poll = try EventPoll(capacity: 256)
    let udpTag: UInt64 = 1 << 40, tcpTag: UInt64 = 2 << 40
    for p in all {
        try poll.add(p.client.udp.fd, .readable, data: udpTag | UInt64(p.index))
        try poll.add(p.client.tcp.fd, .readable, data: tcpTag | UInt64(p.index))
    }
    var byIndex: [Int: Peer] = [:]
    for p in all { byIndex[p.index] = p }
    if let f = extras.pingFlood { byIndex[f.index] = f; try poll.add(f.client.tcp.fd, .readable, data: tcpTag | UInt64(f.index)) }
    let talkers = peers.filter(\.talks)
    var talkerBySSRC: [UInt32: Peer] = [:]
    for t in talkers { talkerBySSRC[t.ssrc] = t }
    // Listeners per channel: who should receive each talker's frames.
    var listenersIn: [Int: Int] = [:]
    for p in peers where p.channel >= 0 { listenersIn[p.channel, default: 0] += 1 }

    let intervalNs = UInt64(1_000_000_000 / max(1, framesPerSecond))
    let startNs = MonotonicClock.nanoseconds()
    let measureFromNs = startNs + UInt64(warmup * 1e9)
    let stopSendingNs = measureFromNs + UInt64(seconds * 1e9)
    let endNs = stopSendingNs + 300_000_000  // in-flight frames drain
    let framesPerTalker = Int((warmup + seconds) * Double(framesPerSecond)) + 16
    for (k, t) in talkers.enumerated() {
        // seq keeps counting across windows (the server's replay window); sentAt starts at this window's first.
        t.baseSeq = t.seq
        t.resetSendTimes(framesPerTalker)
        t.nextSendNs = startNs + UInt64(k) * intervalNs / UInt64(max(1, talkers.count))
    }
    var keepalives = KeepaliveRound(all, periodMs: extras.keepaliveMs, startNs: startNs)
    let opus = Sodium.randomBytes(60)
    // The floor: a thread of its own sends every frame straight to the others in the
    // talker's channel with one sendmmsg, paced like the talkers, while this loop
    // receives as it does from the server. Its CPU time is the floor.
    var floor: FloorSender? = nil
    if extras.floor {
        let addresses = try peers.map { try $0.client.udp.localAddress() }
        var targets: [Int: [SocketAddress]] = [:]
        for t in talkers {
            targets[t.index] = peers.indices.filter { peers[$0] !== t && peers[$0].channel == t.channel }.map { addresses[$0] }
        }
        floor = try FloorSender(talkers: talkers, targets: targets, intervalNs: intervalNs, opus: opus,
                                measureFromNs: measureFromNs, stopSendingNs: stopSendingNs)
    }
    let rx = DatagramBatch(capacity: 64, slotSize: 2048)
    let tcpSink = UnsafeMutableRawBufferPointer.allocate(byteCount: 65536, alignment: 16)
    defer { tcpSink.deallocate() }
    let target = all.first?.client.serverAddress ?? SocketAddress()
    let junkSocket = try Socket.udp(familyOf: try SocketAddress(host: "127.0.0.1", port: 1))
    try junkSocket.setNonBlocking()
    var junk = Sodium.randomBytes(200)
    junk[0] = MediaType.voice.rawValue
    var nextJunkNs = startNs
    let junkIntervalNs = extras.junkPerSecond > 0 ? UInt64(1_000_000_000 / extras.junkPerSecond) : .max
    var floodBurst: [UInt8] = []
    var floodOffset = 0

    var w = Window()
    var cpuStart = 0.0, loadgenStart = 0.0
    var measuring = false
    var received = 0
    while true {
        var now = MonotonicClock.nanoseconds()
        if !measuring && now >= measureFromNs {
            measuring = true
            cpuStart = server.cpuSeconds()
            loadgenStart = processCPUSeconds()
        }
        if now >= endNs { break }
        // Talkers.
        if now < stopSendingNs && floor == nil {
            for t in talkers where t.nextSendNs <= now {
                guard let sent = t.sendNext(opus: opus, intervalNs: intervalNs, { t.client.sendDatagram($0) }) else { continue }
                if sent >= measureFromNs && sent < stopSendingNs {
                    w.framesSent += 1
                    w.expected += (listenersIn[t.channel] ?? 1) - 1
                }
            }
        }
        // Keepalives (UDP) and pings (TCP) every period, as the client library sends them.
        let ka = keepalives.sendDue(all, now: now, pings: !extras.floor)
        if measuring { w.keepalivesSent += ka }
        // Floods.
        if let f = extras.pingFlood, now < stopSendingNs {
            var writes = 0
            while writes < 64 {
                // A new burst only once the last one is fully written: sealing advances the
                // frame counter, so a sealed frame must not be dropped.
                if floodBurst.isEmpty {
                    for i in 0..<32 { floodBurst += f.client.sealer.seal(ControlMessage.ping(Ping(timestamp: UInt64(i))).encode()) }
                }
                guard let n = try? floodBurst.withUnsafeBytes({ try f.client.tcp.write(UnsafeRawBufferPointer(rebasing: $0[floodOffset...])) }) else { break }
                floodOffset += n
                writes += 1
                if floodOffset == floodBurst.count {
                    floodOffset = 0
                    floodBurst.removeAll(keepingCapacity: true)
                    w.floodPingsWritten += 32
                }
            }
        }
        while extras.junkPerSecond > 0 && nextJunkNs <= now && now < stopSendingNs {
            nextJunkNs += junkIntervalNs
            junk.withUnsafeMutableBytes { b in
                BigEndian32.store(b, 4, Sodium.randomUInt32())
                _ = try? junkSocket.sendTo(UnsafeRawBufferPointer(b), target)
            }
            if measuring { w.junkSent += 1 }
        }
        // Wait for what comes back until the next thing to send.
        now = MonotonicClock.nanoseconds()
        var nextNs = floor != nil ? endNs : min(endNs, talkers.map(\.nextSendNs).min() ?? endNs)
        if extras.junkPerSecond > 0 { nextNs = min(nextNs, nextJunkNs) }
        nextNs = min(nextNs, keepalives.nextDue(all))
        let timeoutMs: Int32 = extras.pingFlood != nil ? 0 : waitMs(until: nextNs, now: now, atMost: 1000)
        let n = try poll.wait(timeoutMs: timeoutMs)
        for e in 0..<n {
            let data = poll.event(e).data
            guard let p = byIndex[Int(data & 0xffff_ffff)] else { continue }
            if data & tcpTag != 0 {
                while let got = try? p.client.tcp.read(into: tcpSink), got > 0 {
                    if p === extras.pingFlood { w.floodPongs += 1 }
                }
                continue
            }
            while (try? rx.receive(from: p.client.udp)) ?? 0 > 0 {
                let arrived = MonotonicClock.nanoseconds()
                for i in 0..<rx.count {
                    let d = rx.datagram(i)
                    guard let h = try? FrameHeader.parse(UnsafeRawBufferPointer(d)) else { continue }
                    if h.type == .keepalive { if measuring { w.keepaliveEchoes += 1 }; continue }
                    guard h.type == .voice, let t = talkerBySSRC[h.ssrc], h.seq >= t.baseSeq, h.seq - t.baseSeq < UInt64(t.sentAt.count) else { continue }
                    // In the floor run a datagram can arrive before the sender wrote its time down.
                    guard t.sentAt[Int(h.seq - t.baseSeq)] != 0 || floor == nil else { continue }
                    let sent = t.sentAt[Int(h.seq - t.baseSeq)]
                    guard sent >= measureFromNs, sent < stopSendingNs else { continue }
                    received += 1
                    w.latency.add(arrived &- sent)
                    // Every 64th relayed datagram must open with the listener's own key.
                    if !extras.floor, received % 64 == 0, (try? MediaCrypto.open(d, key: p.client.media.receive)) == nil { w.badSamples += 1 }
                }
            }
        }
    }
    w.seconds = seconds
    if let f = floor {
        let r = f.finish()
        w.serverCPU = r.cpu
        w.framesSent = r.frames
        w.expected = r.expected
    } else {
        w.serverCPU = server.cpuSeconds() - cpuStart
    }
    w.loadgenCPU = processCPUSeconds() - loadgenStart
    w.received = received
    return w
}

extension Peer {
    /// Seals and sends this talker's next frame if its window has room; the send time.
    func sendNext(opus: [UInt8], intervalNs: UInt64, _ send: ([UInt8]) -> Void) -> UInt64? {
        let i = Int(seq - baseSeq)
        guard i < sentAt.count else { return nil }
        let d = client.sealVoice(ssrc: ssrc, seq: seq, timestamp: UInt32(truncatingIfNeeded: i * 960), opus: opus)
        let sent = MonotonicClock.nanoseconds()
        sentAt[i] = sent
        send(d)
        seq += 1
        nextSendNs += intervalNs
        return sent
    }
}

/// The kernel floor's sender: on its own thread, paces the talkers and sends each frame
/// to every other member of the talker's channel with one sendmmsg, as the server's relay
/// would, but with no reseal and no server. Reports its CPU time over the window.
final class FloorSender {
    private var thread: SystemThread?
    private var cpu = 0.0, frames = 0, expected = 0

    init(talkers: [Peer], targets: [Int: [SocketAddress]], intervalNs: UInt64, opus: [UInt8],
         measureFromNs: UInt64, stopSendingNs: UInt64) throws {
        let socket = try Socket.udp(familyOf: try SocketAddress(host: "127.0.0.1", port: 1))
        let batch = DatagramBatch(capacity: max(1, targets.values.map(\.count).max() ?? 1), slotSize: 256)
        thread = SystemThread(name: "floor") { [self] in
            var cpuStart: Double? = nil
            while true {
                let now = MonotonicClock.nanoseconds()
                if cpuStart == nil && now >= measureFromNs { cpuStart = threadCPUSeconds() }
                if now >= stopSendingNs { break }
                for t in talkers where t.nextSendNs <= now {
                    let to = targets[t.index] ?? []
                    let sent = t.sendNext(opus: opus, intervalNs: intervalNs) { d in
                        for a in to {
                            let slot = batch.nextSlot()
                            d.withUnsafeBytes { slot.baseAddress!.copyMemory(from: $0.baseAddress!, byteCount: d.count) }
                            batch.commit(length: d.count, to: a)
                        }
                        batch.send(on: socket)
                    }
                    if let sent, sent >= measureFromNs { frames += 1; expected += to.count }
                }
                let next = talkers.map(\.nextSendNs).min() ?? stopSendingNs
                let after = MonotonicClock.nanoseconds()
                if next > after {
                    var ts = timespec(tv_sec: Int((next - after) / 1_000_000_000), tv_nsec: Int((next - after) % 1_000_000_000))
                    nanosleep(&ts, nil)
                }
            }
            cpu = threadCPUSeconds() - (cpuStart ?? threadCPUSeconds())
        }
    }

    /// Waits for the sender to finish: its CPU time in the window, frames and expected receptions.
    func finish() -> (cpu: Double, frames: Int, expected: Int) {
        thread?.join()
        thread = nil
        return (cpu, frames, expected)
    }
}

/// Milliseconds to wait for `until`, rounded up (rounding down would spin for the last
/// millisecond before every deadline).
func waitMs(until: UInt64, now: UInt64, atMost: Int32) -> Int32 {
    guard until > now else { return 0 }
    return Int32(min(UInt64(atMost), (until - now + 999_999) / 1_000_000))
}

/// The calling thread's CPU time, in seconds.
func threadCPUSeconds() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

/// This process's CPU time (user + system), in seconds.
func processCPUSeconds() -> Double {
    var ru = rusage()
    getrusage(RUSAGE_SELF.rawValue, &ru)
    return Double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + Double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6
}

enum BigEndian32 {
    static func store(_ b: UnsafeMutableRawBufferPointer, _ o: Int, _ v: UInt32) {
        b[o] = UInt8(truncatingIfNeeded: v >> 24); b[o + 1] = UInt8(truncatingIfNeeded: v >> 16)
        b[o + 2] = UInt8(truncatingIfNeeded: v >> 8); b[o + 3] = UInt8(truncatingIfNeeded: v)
    }
}

nonisolated(unsafe) var workerPings: sig_atomic_t = 0
nonisolated(unsafe) var workerStop: sig_atomic_t = 0

/// An idle-session worker: logs in and binds `count` sessions, says "ready", then keeps
/// them alive (UDP keepalives; TCP pings too after SIGUSR1) until SIGTERM.
func runIdleWorker(port: UInt16, count: Int, prefix: String) -> Never {
    ResourceLimits.raiseOpenFiles(to: 2 * count + 256)
    signal(SIGPIPE, SIG_IGN)
    signal(SIGUSR1) { _ in workerPings = 1 }
    signal(SIGTERM) { _ in workerStop = 1 }
    var peers: [Peer] = []
    do {
        for i in 0..<count {
            peers.append(try Peer.make(port: port, name: "\(prefix)\(i)", index: i, channel: nil, talk: false, bind: true))
        }
        let poll = try EventPoll(capacity: 256)
        for p in peers {
            try poll.add(p.client.udp.fd, .readable, data: UInt64(p.index) << 1)
            try poll.add(p.client.tcp.fd, .readable, data: UInt64(p.index) << 1 | 1)
        }
        print("ready \(count)")
        fflush(stdout)
        var round = KeepaliveRound(peers, periodMs: 5000, startNs: MonotonicClock.nanoseconds())
        let sink = UnsafeMutableRawBufferPointer.allocate(byteCount: 4096, alignment: 16)
        while workerStop == 0 {
            let now = MonotonicClock.nanoseconds()
            _ = round.sendDue(peers, now: now, pings: workerPings != 0)
            let next = round.nextDue(peers)
            let timeout = waitMs(until: next, now: now, atMost: 100)
            let n = try poll.wait(timeoutMs: timeout)
            for e in 0..<n {
                let data = poll.event(e).data
                let p = peers[Int(data >> 1)]
                if data & 1 == 1 {
                    while let got = try? p.client.tcp.read(into: sink), got > 0 {}
                } else {
                    while let got = try? p.client.udp.receiveFrom(into: sink), got.0 > 0 {}
                }
            }
        }
    } catch {
        fputs("idle worker: \(error)\n", stderr)
        exit(1)
    }
    exit(0)
}
