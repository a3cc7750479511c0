// voicecat-loadgen: drives a real voicecat-server (a child process) with sessions that
// speak the protocol, and prints what the relay costs: forwarded packets per server
// CPU-second, loss, latency percentiles, server CPU per idle session, and the same
// relay beside 10,000 idle sessions and beside a flood. `make bench-relay` runs it;
// docs/benchmarks.md holds the table.
import Glibc
import VoiceCatProtocol
import VoiceCatSystem
import VoiceCatTestSupport

let usage = """
usage: voicecat-loadgen [--server PATH] [--idle N] [--seconds S] [--talker-rate N] [--only SHAPES]
  --server PATH      voicecat-server binary (default: the one next to this program)
  --idle N           idle bound sessions for the idle shapes (default 10000)
  --seconds S        length of each measured window (default 5; the idle ones get twice that)
  --talker-rate N    frames per second of the 1 -> 50 talker in the loaded run (default 1000)
  --only SHAPES      comma-separated subset of: fanout, talk, rooms, idle, flood (default: all)
"""

/// Every child process started, so a failure does not leave servers or workers behind.
nonisolated(unsafe) var children: [ChildProcess] = []

func fail(_ m: String) -> Never {
    fputs("voicecat-loadgen: \(m)\n", stderr)
    for c in children { c.signal(SIGKILL) }
    exit(2)
}

// A worker holding idle sessions (the descriptor limit of one process cannot hold 10,000
// sessions with two sockets each): `--idle-worker PORT COUNT PREFIX`.
if CommandLine.arguments.count == 5 && CommandLine.arguments[1] == "--idle-worker" {
    guard let port = UInt16(CommandLine.arguments[2]), let count = Int(CommandLine.arguments[3]) else { fail("bad --idle-worker arguments") }
    runIdleWorker(port: port, count: count, prefix: CommandLine.arguments[4])
}

var serverPath = ChildProcess.siblingExecutable("voicecat-server")
var idleCount = 10_000
var windowSeconds = 5.0
var talkerRate = 1000
var only: Set<String> = ["fanout", "talk", "rooms", "idle", "flood"]
var args = CommandLine.arguments.dropFirst()
while let a = args.popFirst() {
    func value() -> String { guard let v = args.popFirst() else { fail("\(a) needs a value\n\(usage)") }; return v }
    switch a {
    case "--server": serverPath = value()
    case "--idle": guard let n = Int(value()), n >= 0 else { fail("--idle needs a count") }; idleCount = n
    case "--seconds": guard let s = Double(value()), s > 0 else { fail("--seconds needs a number") }; windowSeconds = s
    case "--talker-rate": guard let n = Int(value()), n > 0 else { fail("--talker-rate needs a number") }; talkerRate = n
    case "--only": only = Set(value().split(separator: ",").map(String.init))
    case "--help", "-h": print(usage); exit(0)
    default: fail("unknown option \(a)\n\(usage)")
    }
}
guard let binary = serverPath else { fail("no voicecat-server next to this program; pass --server PATH") }

// Idle sessions live in worker processes (two descriptors each there); the server holds one
// per session and inherits this limit.
let wantedFiles = idleCount + 4096
let openFiles = ResourceLimits.raiseOpenFiles(to: wantedFiles)
if openFiles < wantedFiles {
    let fit = max(0, openFiles - 4096)
    fputs("voicecat-loadgen: the open-file limit is \(openFiles); running with \(fit) idle sessions instead of \(idleCount)\n", stderr)
    idleCount = fit
}
let sessionsPerWorker = 5000
signal(SIGPIPE, SIG_IGN)

let serverConfig = """
    # voicecat-loadgen: room for every session, no per-stream cap in the way of a loaded talker.
    max_users = \(idleCount + 1000)
    max_packets_per_second = 100000
    max_stream_bitrate_factor = 1000
    reap_seconds = 600
    [channel Lobby]
    \((0..<10).map { "[channel Room \($0)]" }.joined(separator: "\n"))
    """

func progress(_ s: String) { fputs("loadgen: \(s)\n", stderr) }

var nextIndex = 0
func peers(_ server: ServerUnderTest, _ count: Int, channel: String?, talk: Bool, prefix: String) throws -> [Peer] {
    var out: [Peer] = []
    out.reserveCapacity(count)
    for i in 0..<count {
        out.append(try Peer.make(port: server.port, name: "\(prefix)\(i)", index: nextIndex, channel: channel, talk: talk, bind: true))
        nextIndex += 1
        if count >= 1000 && (i + 1) % 1000 == 0 { progress("  \(i + 1) of \(count) sessions") }
    }
    return out
}

func close(_ ps: [Peer]) { for p in ps { p.client.close() } }

struct Row {
    let shape: String
    let sessions: Int
    let window: Window
}
var rows: [Row] = []

func fmt(_ v: Double, _ digits: Int = 1) -> String {
    var s = String(Int((v * pow(10, Double(digits))).rounded()))
    if digits > 0 {
        while s.count <= digits { s = "0" + s }
        s.insert(".", at: s.index(s.endIndex, offsetBy: -digits))
    }
    return s
}
func thousands(_ v: Double) -> String {
    let n = Int(v.rounded())
    var s = String(abs(n)), out = ""
    while s.count > 3 { out = "," + s.suffix(3) + out; s = String(s.dropLast(3)) }
    return (n < 0 ? "-" : "") + s + out
}

var fanout: Window?, floorWindow: Window?, small: Window?, idleWindow: Window?, idlePings: Window?, big: Window?, flood: Window?
var workerCPU = 0.0
do {
    if only.contains("fanout") {
        // 1 -> 50: one talker, fifty listeners.
        progress("shape 1 -> 50")
        let server = try ServerUnderTest(binary: binary, config: serverConfig)
        let talker = try peers(server, 1, channel: "Lobby", talk: true, prefix: "talker")
        let listeners = try peers(server, 50, channel: "Lobby", talk: false, prefix: "listener")
        fanout = try measure(server: server, peers: talker + listeners, framesPerSecond: talkerRate, seconds: windowSeconds)
        rows.append(Row(shape: "1 → 50, talker at \(thousands(Double(talkerRate))) frames/s", sessions: 51, window: fanout!))
        floorWindow = try measure(server: server, peers: talker + listeners, framesPerSecond: talkerRate, seconds: windowSeconds,
                                  extras: Extras(floor: true))
        rows.append(Row(shape: "kernel floor: the same datagrams sent straight to the 50 listeners with sendmmsg, no server", sessions: 51,
                        window: floorWindow!))
        rows.append(Row(shape: "1 → 50, talker at 50 frames/s (real time)", sessions: 51,
                        window: try measure(server: server, peers: talker + listeners, framesPerSecond: 50, seconds: windowSeconds)))
        close(talker + listeners)
        server.stop()
    }
    if only.contains("talk") {
        // Ten clients that all talk and listen, in one channel.
        progress("shape 10 talk-and-listen")
        let server = try ServerUnderTest(binary: binary, config: serverConfig)
        let ten = try peers(server, 10, channel: "Lobby", talk: true, prefix: "tl")
        small = try measure(server: server, peers: ten, framesPerSecond: 50, seconds: 2 * windowSeconds)
        rows.append(Row(shape: "10 talk-and-listen, 50 frames/s each", sessions: 10, window: small!))
        close(ten)
        server.stop()
    }
    if only.contains("rooms") {
        // A hundred clients in ten channels, all talking.
        progress("shape 100 clients in 10 channels")
        let server = try ServerUnderTest(binary: binary, config: serverConfig)
        var hundred: [Peer] = []
        for r in 0..<10 { hundred += try peers(server, 10, channel: "Room \(r)", talk: true, prefix: "r\(r)-") }
        rows.append(Row(shape: "100 clients in 10 channels, all talking, 50 frames/s each", sessions: 100,
                        window: try measure(server: server, peers: hundred, framesPerSecond: 50, seconds: windowSeconds)))
        close(hundred)
        server.stop()
    }
    if only.contains("idle") {
        // Idle bound sessions with keepalives (held by worker processes), then the 10
        // talk-and-listen beside them.
        progress("shape \(idleCount) idle bound sessions")
        let server = try ServerUnderTest(binary: binary, config: serverConfig)
        guard let me = ChildProcess.siblingExecutable("voicecat-loadgen") else { fail("cannot find this program's path") }
        var workers: [ChildProcess] = []
        var left = idleCount, w = 0
        while left > 0 {
            let n = min(left, sessionsPerWorker)
            workers.append(try ChildProcess(me, ["--idle-worker", "\(server.port)", "\(n)", "idle\(w)-"], outputPath: server.dir + "/worker\(w).log"))
            children.append(workers.last!)
            left -= n
            w += 1
        }
        for (k, wk) in workers.enumerated() {
            guard wk.waitForOutput("ready", timeoutMs: 600_000) else { fail("idle worker \(k) did not get ready: \(wk.output)") }
        }
        progress("  \(idleCount) idle sessions bound; UDP keepalives only")
        // A full keepalive period of warm-up so every session is in its rhythm.
        idleWindow = try measure(server: server, peers: [], framesPerSecond: 50, seconds: 2 * windowSeconds, warmup: 5)
        rows.append(Row(shape: "\(thousands(Double(idleCount))) idle bound sessions, UDP keepalive every 5 s", sessions: idleCount,
                        window: idleWindow!))
        progress("  and a TCP ping every 5 s, as the client library sends")
        for wk in workers { wk.signal(SIGUSR1) }
        idlePings = try measure(server: server, peers: [], framesPerSecond: 50, seconds: 2 * windowSeconds, warmup: 5)
        rows.append(Row(shape: "\(thousands(Double(idleCount))) idle bound sessions, UDP keepalive + TCP ping every 5 s", sessions: idleCount,
                        window: idlePings!))
        progress("shape 1 -> 50 beside \(idleCount) idle sessions")
        let talker = try peers(server, 1, channel: "Lobby", talk: true, prefix: "talker-big")
        let listeners = try peers(server, 50, channel: "Lobby", talk: false, prefix: "listener-big")
        big = try measure(server: server, peers: talker + listeners, framesPerSecond: talkerRate, seconds: 2 * windowSeconds)
        rows.append(Row(shape: "1 → 50 at \(thousands(Double(talkerRate))) frames/s beside \(thousands(Double(idleCount))) idle sessions",
                        sessions: idleCount + 51, window: big!))
        close(talker + listeners)
        progress("shape 10 talk-and-listen beside \(idleCount) idle sessions")
        let tenMore = try peers(server, 10, channel: "Room 0", talk: true, prefix: "tl-big")
        rows.append(Row(shape: "10 talk-and-listen beside \(thousands(Double(idleCount))) idle sessions", sessions: idleCount + 10,
                        window: try measure(server: server, peers: tenMore, framesPerSecond: 50, seconds: 2 * windowSeconds)))
        close(tenMore)
        for wk in workers { workerCPU += wk.cpuSeconds(); wk.signal(SIGTERM); wk.wait(); unlink(wk.outputPath) }
        server.stop()
    }
    if only.contains("flood") {
        // A flood beside honest clients: one session floods pings, an unbound socket sprays junk.
        progress("shape flood")
        let server = try ServerUnderTest(binary: binary, config: serverConfig)
        let honest = try peers(server, 10, channel: "Lobby", talk: true, prefix: "honest")
        let flooder = try peers(server, 1, channel: nil, talk: false, prefix: "flooder")[0]
        flood = try measure(server: server, peers: honest, framesPerSecond: 50, seconds: 2 * windowSeconds,
                            extras: Extras(pingFlood: flooder, junkPerSecond: 20_000))
        rows.append(Row(shape: "10 talk-and-listen beside a ping flood and 20,000 junk datagrams/s", sessions: 11, window: flood!))
        close(honest + [flooder])
        server.stop()
    }
} catch {
    fail("\(error)")
}

// The table.
print("| shape | sessions | forwarded | loss % | latency p50 / p99 / max ms | server CPU % of a core | forwarded per server CPU-s | server CPU µs per forwarded |")
print("|---|---:|---:|---:|---|---:|---:|---:|")
for r in rows {
    let w = r.window
    let lat = w.received > 0 ? "\(fmt(w.latency.percentileMs(0.5), 2)) / \(fmt(w.latency.percentileMs(0.99), 2)) / \(fmt(w.latency.maxMs, 1))" : "–"
    let per = w.received > 0 ? thousands(w.forwardedPerCPUSecond) : "–"
    let us = w.received > 0 ? fmt(w.cpuMicrosPerForward, 2) : "–"
    print("| \(r.shape) | \(thousands(Double(r.sessions))) | \(thousands(Double(w.received))) | \(fmt(w.lossPercent, 2)) | \(lat) | \(fmt(w.serverCorePercent, 2)) | \(per) | \(us) |")
}
print("")
func verdict(_ ok: Bool) -> String { ok ? "met" : "NOT MET" }
if let f = fanout {
    print("- 1 → 50: \(thousands(f.forwardedPerCPUSecond)) forwarded per server CPU-second (goal ≥ 400,000: \(verdict(f.forwardedPerCPUSecond >= 400_000)))")
}
if let i = idleWindow, let ip = idlePings {
    func perIdle(_ w: Window) -> Double { idleCount > 0 ? w.serverCPU / w.seconds * 1e6 / Double(idleCount) : 0 }
    print("- server CPU per idle session: \(fmt(perIdle(i), 2)) µs per second with UDP keepalives, \(fmt(perIdle(ip), 2)) µs with the client library's TCP ping too; \(thousands(Double(idleCount))) idle sessions take \(fmt(i.serverCorePercent, 2)) % of a core (goal < 10 %: \(verdict(i.serverCorePercent < 10))), \(fmt(ip.serverCorePercent, 2)) % with pings (\(verdict(ip.serverCorePercent < 10)))")
}
if let f = fanout, let fl = floorWindow, fl.received > 0 {
    print("- kernel floor on this machine's loopback: \(thousands(fl.forwardedPerCPUSecond)) datagrams per CPU-second with no server at all; the server relays at \(fmt(100 * f.forwardedPerCPUSecond / fl.forwardedPerCPUSecond, 0)) % of that")
}
if let s = fanout, let b = big, let i = idlePings, s.received > 0, b.received > 0 {
    let net = (b.serverCPU - i.serverCPU / i.seconds * b.seconds) * 1e6 / Double(b.received)
    let raw = b.cpuMicrosPerForward
    print("- per forwarded packet, 1 → 50 at \(thousands(Double(talkerRate))) frames/s: \(fmt(s.cpuMicrosPerForward, 2)) µs with 51 sessions; beside \(thousands(Double(idleCount))) idle sessions \(fmt(net, 2)) µs net of what the idle sessions cost on their own (measured just before), \(fmt(raw, 2)) µs all told: ratio \(fmt(net / s.cpuMicrosPerForward, 2)) net (goal ≤ 1.5: \(verdict(net / s.cpuMicrosPerForward <= 1.5))), \(fmt(raw / s.cpuMicrosPerForward, 2)) all told")
}
if let f = flood {
    let base = small.map { " against \(fmt($0.latency.percentileMs(0.99), 2)) ms and \(fmt($0.lossPercent, 2)) % without" } ?? ""
    print("- flood: honest p99 \(fmt(f.latency.percentileMs(0.99), 2)) ms and loss \(fmt(f.lossPercent, 2)) %\(base); the flooder wrote \(thousands(Double(f.floodPingsWritten))) pings (warm-up included; then its socket buffers stayed full) and got \(thousands(Double(f.floodPongs))) reads of answers, the junk socket sent \(thousands(Double(f.junkSent))) datagrams; server at \(fmt(f.serverCorePercent, 1)) % of a core")
}
let bad = rows.reduce(0) { $0 + $1.window.badSamples }
print("- sampled relayed datagrams that did not open with the listener's key: \(bad)")
let gen = rows.reduce(0.0) { $0 + $1.window.loadgenCPU }
print("- load generator CPU over the measured windows: \(fmt(gen, 1)) s, idle workers \(fmt(workerCPU, 1)) s in all (same machine, 2 cores)")
