// bench-audio: the client engine's audio paths at the cost of the codec (issue #15).
//
// Prints one table of ratios, each measured in this run against a bare baseline
// measured in the same run (the machine is shared and noisy: ratios, medians of
// several windows, not absolute times), with the goal and whether it is met:
//
//   send      CPU per frame of a real-time external feed (VoiceClient.feed on the
//             feeding thread + the client's pacer thread) / bare opus_encode of
//             the same frames                                          (Send.swift)
//   receive   a listener's whole-process CPU per received frame, 1/4/16/64 streams
//             from a real server / bare Opus decode + mix of the same packets
//                                                                     (Receive.swift)
//   idle      CPU per second of a connected, joined, silent client       (Idle.swift)
//   latency   feed → sink latency − (frame + encoder lookahead), 20 and 10 ms
//             frames, on loopback                                     (Latency.swift)
//   allocations per frame in the whole process, steady-state send and receive
//             (VoiceCatAllocCounter interposes malloc)
//
// Every process has one job: this one orchestrates and spawns itself with a role
// (posix_spawn) for the server (`serve`), the talkers (`talk`) and each measured
// client (`send`, `listen`, `idle`, `latency`), so a client's process CPU is only
// that client's. Run: swift build -c release --product bench-audio &&
// .build/release/bench-audio   (or: make bench)
//   --only send,idle,receive,latency   a subset
//   --streams 1,4,16,64                the receive sizes
//   --verbose 1                        the listeners' window figures, latency per phase (stderr)
//   --control 1                        an A/A check of the send and receive methods: a
//                                      second bare baseline in the engine's place (reads 1.00x
//                                      if the method is fair)
//   --pin 0                            leave the receive lines' placement to the scheduler
//                                      (default: listener on the last CPU, server and talker
//                                      on the others)
import Glibc
import VoiceCatAllocCounter
import VoiceCatSystem

enum Bench {
    /// Distinct speech-like signals behind the streams (stream i plays i % 8).
    static let signalCount = 8
    /// Frames per signal (3 s of 20 ms frames), looped.
    static let framesPerSignal = 150
}

setvbuf(stdout, nil, _IOLBF, 0)
signal(SIGPIPE, SIG_IGN)
let argv = CommandLine.arguments.dropFirst()
let role = argv.first ?? "all"
let roleArgs = Arguments(role.hasPrefix("--") ? argv : argv.dropFirst())
do {
    switch role {
    case "serve": try runServer(roleArgs)
    case "talk": try runTalker(roleArgs)
    case "send": try runSender(roleArgs)
    case "listen": try runListener(roleArgs)
    case "idle": try runIdle(roleArgs)
    case "latency": try runLatency(roleArgs)
    case "all": runAll(roleArgs)
    case "--help", "-h", "help":
        print("usage: bench-audio [--only send,idle,receive,latency] [--streams 1,4,16,64] [--verbose 1] [--control 1] [--pin 0]")
    default:
        if role.hasPrefix("--") { runAll(roleArgs) } else { fail("unknown role \(role)") }
    }
} catch {
    fail("\(role): \(error)")
}

// MARK: the orchestrator

struct Row {
    var what: String
    var engine: String
    var baseline: String
    var ratio: String
    var goal: String
    var result: String
}

func verdict(_ ok: Bool) -> String { ok ? "met" : "NOT met" }

func machineDescription() -> String {
    let cpuinfo = readSmallFileFully("/proc/cpuinfo")
    let model = cpuinfo.split(separator: "\n").first { $0.hasPrefix("model name") }
        .map { $0.split(separator: ":", maxSplits: 1).last.map { String($0).trimmingSpaces } ?? "" } ?? "unknown"
    var u = utsname()
    uname(&u)
    let release = withUnsafeBytes(of: u.release) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
    return "\(sysconf(Int32(_SC_NPROCESSORS_ONLN))) CPUs (\(model)), Linux \(release)"
}

func loadAverage() -> String { String(readSmallFile("/proc/loadavg").split(separator: " ").prefix(3).joined(separator: " ")) }

func readSmallFileFully(_ path: String) -> String {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return "" }
    defer { close(fd) }
    var out: [UInt8] = []
    var buf = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = buf.withUnsafeMutableBytes { read(fd, $0.baseAddress, 65536) }
        if n <= 0 { break }
        out += buf[0..<n]
    }
    return String(decoding: out, as: UTF8.self)
}

extension String {
    var trimmingSpaces: String {
        var s = Substring(self)
        while s.first == " " || s.first == "\t" { s = s.dropFirst() }
        while s.last == " " || s.last == "\t" { s = s.dropLast() }
        return String(s)
    }
}

/// Printed under the table (a static: main.swift's top-level values are set in order, after the roles ran).
enum Legend {
    static let text = """
How each line is measured (every baseline runs in this run, on this machine; ratios, not absolute times):
- send: a client feeds a MIC stream (continuous input mode) one 20 ms frame every 20 ms at absolute times. VoiceCat = \
CPU per frame of the feeding thread inside VoiceClient.feed (thread CPU clock around each call) plus the client's pacer \
thread vc-send (scheduler run time), which sends the frames that are early for the talkspurt's clock. Bare = a bare \
OpusEncoderBox at the channel's settings encoding the same frame on the feeding thread half a period apart from the \
engine's, the two taking turns in the first slot window by window (the slot on the period's boundary costs more \
whoever is in it: an A/A run, --control 1, read 1.02x with the control first and 0.93x with it second). Ratio = median \
over 16 pairs of windows of 25 frames (one of each order) of each pair's engine CPU over its bare CPU. The pacer's run \
time is read after both slots (reading it just before a slot slowed that slot). The kernel's loopback sendto is in \
the send path and not in the baseline (the next line takes it out).
- receive + decode + mix: one process receives N streams that a talker process sends (pre-encoded speech-like packets, \
sends spread over the frame period) through the server process; the client's rendering consumer is its own sink \
thread (vc-mixer: external playback with a mixed-output sink, a 20 ms block every 20 ms, the sink only counts). \
VoiceCat = the listener's whole process CPU (getrusage, every thread) less the baseline's thread, per received frame, \
over windows of 1.2 s. Bare = at the same time in the same process, a thread of its own: N opus decoders decoding \
the same packets to float, mono for a mono stream (as the engine does), plus MixBus add and limiter per 20 ms block, one block every 20 ms (the cadence the engine runs at, \
the thread's wakeups included), its CPU per decoded frame. Both at once, so both see the same load (identical work \
varies by up to 2x between seconds on this shared machine), and on the same CPU: the listener process is pinned to \
the last CPU, the server and the talker to the others (--pin 0 leaves placement to the scheduler: then whichever of \
the two threads settled on the CPU the server kept busy read cheaper for the whole run, 1.00x one way round and \
1.17x the other). Ratio = median of the windows' ratios (32 windows for 16 \
and 64 streams, 4 otherwise); the µs columns are the medians. The floor, for reference: after each block the \
baseline's thread sends itself over loopback the block's datagrams as the engine receives them (header, the same \
packets, ChaCha20-Poly1305) and times only reading them (recvmmsg, 32 at a time, kernel timestamps, as MediaInput \
reads) and opening them: work any receiver of this protocol does before its jitter buffer. It is left out of the \
bare figure; the information line is (VoiceCat − floor) / bare. An A/A run (--control 1: a second bare thread, \
without the floor step, in the engine's place, 7 ms after the baseline) read 1.00x at 16 streams and 0.99x at 64 \
(windows 0.98–1.01x; 0.92–0.98x unpinned): the method does not count against the engine.
- idle: a connected, joined client, nothing sent or played: CPU per second of the client's threads (vc-*, scheduler run time) over 10 s in pull mode (two 5 s keepalive periods) and 4 s with a sink; the whole process's figure (the benchmark's main thread too) in the details.
- latency: a feeder and a listener client through the server; onsets (tone bursts on frame boundaries) fed in real \
time and found in the sink's blocks; latency = sink block time + onset offset in the block − capture time of the \
onset; floor = frame + the encoder's lookahead (OPUS_GET_LOOKAHEAD); 2 onsets at each of 8 phases of the render \
tick. The sink's blocks are as long as the frames (vc_set_mixed_output_block_ms 10 on the 10 ms channel). Continuous: a new stream at each phase talks 1.2 s without a pause; talkspurts: one stream, 0.8 s talkspurts \
with 0.3 s pauses, each at the next phase (its first talkspurt not counted). The render tick alone adds 0–20 ms \
(10 ms on average over the phases; 0–10 ms with 10 ms blocks).
- allocations: malloc/calloc/realloc/memalign calls in the whole process (VoiceCatAllocCounter interposes malloc) over \
the steady-state windows above, per frame sent or received.
"""
}

func runAll(_ args: Arguments) {
    let only = Set(args.string("only", "send,idle,receive,latency").split(separator: ",").map(String.init))
    let sizes = args.string("streams", "1,4,16,64").split(separator: ",").compactMap { Int($0) }
    let started = MonotonicClock.nanoseconds()
    let startLoad = loadAverage()
    say("bench-audio: \(machineDescription()); load average \(startLoad)")
    guard vc_alloc_counter_active() != 0 else { fail("the allocation counter is not active in this build") }
    // The counter must see this process's allocations (it interposes malloc).
    let probe = vc_alloc_count()
    let probeArray = [Int](repeating: 1, count: 1000 + Int(probe % 7))
    guard vc_alloc_count() > probe, probeArray.count > 0 else { fail("the allocation counter does not count malloc") }

    // Placement (--pin 1, the default, when this process may run on 2 CPUs or more):
    // each listener process (the engine's threads and the bare baseline's) on the last
    // of them, the server and the talkers on the others (the server for the whole run:
    // the send, idle and latency lines too). Left to the scheduler, the engine's
    // renderer and the baseline's thread each settle on a CPU for the whole run, and
    // on this shared machine that alone moved the 16-stream ratio by ±0.09x: the
    // thread on the CPU the server and talker kept busy read 1.00x, the one on the
    // otherwise idle CPU 1.17x (each way round; docs/benchmarks.md). On one CPU the
    // two are measured alike.
    let allowed = allowedCPUs()
    let pin = args.int("pin", 1) == 1 && allowed.count >= 2
    let othersList = pin ? allowed.dropLast().map(String.init).joined(separator: ",") : ""
    let listenerCPU = allowed.last.map(String.init) ?? ""
    let othersCPUs = pin ? ["--cpus", othersList] : []
    let listenerCPUs = pin ? ["--cpus", listenerCPU] : []
    let server = Child(["serve"] + othersCPUs)
    server.expect("ready")
    /// Whether every role asked to pin itself did.
    var pinsHeld = true
    func checkPinned(_ c: Child) { if pin && c.results["pinned"] != 1 { pinsHeld = false } }
    checkPinned(server)
    let port = String(Int(server.result("port")))
    guard let fingerprint = server.texts["fingerprint"] else { fail("the server did not say its fingerprint") }
    var rows: [Row] = []
    var notes: [String] = []
    func allocRow(_ what: String, _ c: Child) {
        let n = c.result("allocs"), frames = c.result("frames")
        rows.append(Row(what: what, engine: "\(fmt(n / frames, 4)) (\(Int(n)) in \(Int(frames)) frames)", baseline: "", ratio: "",
                        goal: "0", result: verdict(n == 0)))
    }

    if only.contains("send") {
        say("send path: 11 s of real-time feed ...")
        // --control 1 (an A/A check of the method): the send and listen roles put a
        // second bare baseline in the engine's place.
        let c = Child(["send", "--port", port, "--fingerprint", fingerprint, "--control", "\(args.int("control", 0))"])
        c.finish()
        let r = c.result("ratio")
        rows.append(Row(what: "send: CPU per 20 ms frame, feed + pacer threads / bare opus_encode",
                        engine: "\(fmt(c.result("engine_us"), 1)) µs", baseline: "\(fmt(c.result("bare_us"), 1)) µs",
                        ratio: "\(fmt(r))x", goal: "≤ 1.05x", result: verdict(r <= 1.05)))
        let less = c.result("ratio_less_sendto")
        rows.append(Row(what: "send less a bare loopback sendto of the same size (the kernel's part) / bare opus_encode",
                        engine: "\(fmt(c.result("engine_us") - c.result("sendto_us"), 1)) µs", baseline: "\(fmt(c.result("bare_us"), 1)) µs",
                        ratio: "\(fmt(less))x", goal: "(information)", result: ""))
        allocRow("allocations per frame, steady-state send (whole sender process)", c)
        notes.append("send: \(Int(c.result("on_feeder"))) of \(Int(c.result("frames"))) frames were encoded and sent on the feeding thread, "
                     + "the others by the pacer (per frame: feeding thread \(fmt(c.result("feed_us"), 1)) µs, pacer \(fmt(c.result("pacer_us"), 1)) µs, "
                     + "medians over windows); pair ratios \(fmt(c.result("ratio_min")))–\(fmt(c.result("ratio_max")))x; "
                     + "\(Int(c.result("sent"))) packets sent for \(Int(c.result("frames"))) frames fed; besides, vc-network "
                     + "\(fmt(c.result("network_us"), 1)) µs and the rest of the process (the benchmark's own sleeps and clock reads) "
                     + "\(fmt(c.result("other_us"), 1)) µs per frame; a tight loop of bare encodes (caches hot) takes "
                     + "\(fmt(c.result("bare_hot_us"), 1)) µs per frame; a bare loopback sendto of the same size, right after the bare encode, "
                     + "costs the sending thread \(fmt(c.result("sendto_us"), 1)) µs (\(fmt(100 * c.result("sendto_us") / c.result("bare_us"), 1)) % of a bare encode).")
    }

    if only.contains("idle") {
        say("idle client: 10 s in pull mode, 4 s with a sink ...")
        let c = Child(["idle", "--port", port, "--fingerprint", fingerprint])
        c.finish()
        let pull = c.result("pull_client_ms_per_s")
        rows.append(Row(what: "idle client, pull mode (no sink, no pulls): CPU per second of the client's threads (vc-*) over two keepalive periods",
                        engine: "\(fmt(pull, 3)) ms/s", baseline: "", ratio: "", goal: "≤ 0.1 ms/s (keepalives only)",
                        result: verdict(pull <= 0.1)))
        rows.append(Row(what: "idle client with a mixed-output sink: CPU per second of the client's threads",
                        engine: "\(fmt(c.result("sink_client_ms_per_s"), 3)) ms/s", baseline: "", ratio: "", goal: "(information)", result: ""))
        notes.append("idle: \(fmt(c.result("pull_switches_per_s"), 1)) context switches/s and \(fmt(c.result("pull_allocs_per_s"), 2)) "
                     + "allocations/s in pull mode, the whole process \(fmt(c.result("pull_cpu_ms_per_s"), 3)) ms/s (with the benchmark's "
                     + "own main thread), busiest thread \(c.texts["pull_busiest_thread"] ?? "?") "
                     + "(\(fmt(c.result("pull_busiest_ms_per_s"), 3)) ms/s); \(fmt(c.result("sink_switches_per_s"), 1)) switches/s and "
                     + "\(fmt(c.result("sink_allocs_per_s"), 2)) allocations/s with the sink, the whole process "
                     + "\(fmt(c.result("sink_cpu_ms_per_s"), 3)) ms/s, busiest thread \(c.texts["sink_busiest_thread"] ?? "?") "
                     + "(\(fmt(c.result("sink_busiest_ms_per_s"), 3)) ms/s; \(Int(c.result("sink_blocks"))) blocks delivered).")
    }

    if only.contains("receive") {
        for n in sizes {
            let streams = "\(n) stream\(n == 1 ? "" : "s")"
            // The sizes with a goal get more windows: the machine is shared and noisy.
            let windows = n >= 16 ? 32 : 4
            say("receive + mix of \(streams): \(windows) windows of 1.2 s, the bare baseline running beside ...")
            let listener = Child(["listen", "--port", port, "--fingerprint", fingerprint, "--streams", "\(n)", "--windows", "\(windows)",
                                  "--verbose", args.string("verbose", "0"), "--control", "\(args.int("control", 0))"] + listenerCPUs)
            listener.expect("ready")
            checkPinned(listener)
            let talker = Child(["talk", "--port", port, "--streams", "\(n)", "--channel", BenchChannels.speech20] + othersCPUs)
            talker.expect("ready")
            checkPinned(talker)
            listener.expect("live-done")
            talker.finish()
            listener.finish()
            let r = listener.result("ratio")
            let goal: Double? = n == 16 ? 1.15 : (n == 64 ? 1.10 : nil)
            rows.append(Row(what: "receive + decode + mix, \(streams): listener process CPU per received frame / bare decode + mix",
                            engine: "\(fmt(listener.result("engine_us"), 1)) µs", baseline: "\(fmt(listener.result("bare_us"), 1)) µs",
                            ratio: "\(fmt(r))x", goal: goal.map { "≤ \(fmt($0))x" } ?? "(information)",
                            result: goal.map { verdict(r <= $0) } ?? ""))
            let less = listener.result("ratio_less_floor")
            rows.append(Row(what: "receive of \(streams) less a bare loopback recvmmsg + AEAD open of the same datagrams (the floor) / bare decode + mix",
                            engine: "\(fmt(listener.result("engine_us") - listener.result("floor_us"), 1)) µs",
                            baseline: "\(fmt(listener.result("bare_us"), 1)) µs", ratio: "\(fmt(less))x", goal: "(information)", result: ""))
            allocRow("allocations per received frame, steady-state receive of \(streams) (whole listener process)", listener)
            notes.append("receive \(n): \(Int(listener.result("frames"))) of \(Int(listener.result("expected_frames"))) frames received "
                         + "(the talker sent \(Int(talker.result("late"))) late by more than 5 ms); windows: VoiceCat "
                         + "\(fmt(listener.result("engine_us_min"), 1))–\(fmt(listener.result("engine_us_max"), 1)) µs, bare "
                         + "\(fmt(listener.result("bare_us_min"), 1))–\(fmt(listener.result("bare_us_max"), 1)) µs, ratio "
                         + "\(fmt(listener.result("ratio_min")))–\(fmt(listener.result("ratio_max")))x; per received frame: "
                         + "vc-network \(fmt(listener.result("network_us"), 1)) µs, vc-mixer (sink thread: decode, mix, sink) "
                         + "\(fmt(listener.result("mixer_us"), 1)) µs, other threads \(fmt(listener.result("other_us"), 1)) µs; "
                         + "the floor (a bare loopback recvmmsg with timestamps and AEAD open of the same datagrams, "
                         + "\(Int(listener.result("floor_opened"))) opened) \(fmt(listener.result("floor_us"), 1)) µs per frame "
                         + "(\(fmt(100 * listener.result("floor_us") / listener.result("bare_us"), 1)) % of bare decode + mix); "
                         + "\(fmt(listener.result("switches_per_s"), 0)) context switches/s; \(Int(listener.result("concealed"))) frames concealed, "
                         + "\(Int(listener.result("late"))) late; the bare baseline in a tight loop (caches hot): "
                         + "\(fmt(listener.result("bare_hot_us"), 1)) µs (\(fmt(listener.result("engine_us") / listener.result("bare_hot_us")))x).")
        }
    }

    if only.contains("latency") {
        for (channel, ms) in [(BenchChannels.speech20, 20), (BenchChannels.speech10, 10)] {
            say("feed → sink latency, \(ms) ms frames: 8 streams, then 9 talkspurts ...")
            let c = Child(["latency", "--port", port, "--fingerprint", fingerprint, "--channel", channel,
                               "--verbose", args.string("verbose", "0")])
            c.finish()
            for (key, label) in [("continuous", "continuous talk"), ("spurts", "talkspurts")] {
                let med = c.result("\(key)_median_ms"), p95 = c.result("\(key)_p95_ms")
                let complete = c.result("\(key)_matched") == c.result("\(key)_expected")
                rows.append(Row(what: "feed → sink latency − floor, \(ms) ms frames (\(ms) ms sink blocks), \(label): median (p95)",
                                engine: "\(fmt(med, 1)) (\(fmt(p95, 1))) ms", baseline: "floor \(fmt(c.result("floor_ms"), 1)) ms",
                                ratio: "", goal: "median ≤ 12 ms", result: verdict(med <= 12 && complete)))
            }
            notes.append("latency \(ms) ms: floor = frame \(fmt(c.result("frame_ms"), 0)) ms + encoder lookahead \(fmt(c.result("lookahead_ms"), 1)) ms; "
                         + "continuous: latency − floor \(fmt(c.result("continuous_min_ms"), 1))–\(fmt(c.result("continuous_max_ms"), 1)) ms, "
                         + "\(Int(c.result("continuous_matched"))) of \(Int(c.result("continuous_expected"))) onsets heard, "
                         + "\(Int(c.result("continuous_concealed"))) frames concealed while talking and "
                         + "\(Int(c.result("continuous_concealed_at_end"))) after the feeder stopped; talkspurts: \(fmt(c.result("spurts_min_ms"), 1))–"
                         + "\(fmt(c.result("spurts_max_ms"), 1)) ms, \(Int(c.result("spurts_matched"))) of \(Int(c.result("spurts_expected"))) onsets heard, "
                         + "\(Int(c.result("spurts_concealed"))) frames concealed (\(Int(c.result("spurts_concealed_in_pauses"))) of them after "
                         + "a talkspurt's last fed frame), \(Int(c.result("spurts_late"))) late, jitter-buffer target at the end "
                         + "\(Int(c.result("spurts_target_ms"))) ms.")
        }
    }

    server.finish()
    notes.append("server: \(Int(server.result("voice_in"))) frames in, \(Int(server.result("voice_out"))) relayed, "
                 + "\(Int(server.result("media_drops"))) dropped, \(Int(server.result("send_failed"))) sends failed.")
    let seconds = Double(MonotonicClock.nanoseconds() - started) / 1e9

    say("")
    say("| measurement: VoiceCat / bare baseline | VoiceCat | bare baseline | ratio | goal | result |")
    say("|---|---:|---:|---:|---|---|")
    for r in rows { say("| \(r.what) | \(r.engine) | \(r.baseline) | \(r.ratio) | \(r.goal) | \(r.result) |") }
    say("")
    say(Legend.text)
    say("")
    say("Details of this run:")
    for n in notes { say("- \(n)") }
    say("")
    let placement = !pin ? "; placement left to the scheduler"
        : !pinsHeld ? "; pinning asked for but refused (see stderr): placement partly left to the scheduler"
        : "; pinned: each listener on CPU \(listenerCPU), the server (whole run) and talkers on CPU \(othersList)"
    say("Machine: \(machineDescription()); load average at the start \(startLoad), at the end \(loadAverage())\(placement); \(fmt(seconds, 0)) s.")
    let missed = rows.filter { $0.result == "NOT met" }.count
    say(missed == 0 ? "All goals met." : "\(missed) goal\(missed == 1 ? "" : "s") NOT met.")
}
