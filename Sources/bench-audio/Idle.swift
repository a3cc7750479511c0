// The `idle` role: what a connected, joined client costs while nothing plays and
// nothing is sent. First in pull mode (external playback, no sink, nobody pulling),
// then with a mixed-output sink set (its mixer thread calls the sink every 20 ms).
// CPU per second of wall time of the client's own threads (vc-*, from their scheduler
// run time: the benchmark's main thread, which sleeps and then reads /proc, is not the
// client) and of the whole process, and context switches per second. Pull mode is
// measured over 10 s, two of the client's 5 s keepalive periods, so every window holds
// the same number of keepalives and pings (a 4 s window held none or one: 0.006-0.128
// ms/s over runs).
import Synchronization
import VoiceCatAllocCounter
import VoiceCatClient
import VoiceCatSystem

func runIdle(_ args: Arguments) throws {
    let seconds = args.double("seconds", 4)
    let pullSeconds = args.double("pull-seconds", 10)
    let client = try connectClient(args, "idler", channel: BenchChannels.speech20)
    sleepSeconds(0.5)

    func measure(_ label: String, seconds: Double) {
        let th0 = threadCPUByName()
        let s0 = CPUClock.contextSwitches()
        let c0 = CPUClock.process()
        let a0 = vc_alloc_count()
        let w0 = MonotonicClock.nanoseconds()
        sleepSeconds(seconds)
        let w1 = MonotonicClock.nanoseconds()
        let a1 = vc_alloc_count()
        let c1 = CPUClock.process()
        let s1 = CPUClock.contextSwitches()
        let wall = Double(w1 - w0) / 1e9
        // The busiest thread, by name (where the time goes).
        let threads = ThreadBreakdown.between(th0, threadCPUByName()).byName
        let clientNs = threads.filter { $0.key.hasPrefix("vc-") }.values.reduce(0, +)
        report("\(label)_client_ms_per_s", Double(clientNs) / 1e6 / wall)
        if let (name, ns) = threads.max(by: { $0.value < $1.value }) {
            report(label + "_busiest_thread", text: name)
            report("\(label)_busiest_ms_per_s", Double(ns) / 1e6 / wall)
        }
        report("\(label)_cpu_ms_per_s", Double(c1 - c0) / 1e6 / wall)
        report("\(label)_switches_per_s", Double(s1 - s0) / wall)
        report("\(label)_allocs_per_s", Double(a1 - a0) / wall)
    }

    measure("pull", seconds: pullSeconds)
    let sink = SinkCounter()
    try client.setSink { _, _ in sink.blocks.wrappingAdd(1, ordering: .relaxed) }
    sleepSeconds(0.3)
    measure("sink", seconds: seconds)
    report("sink_blocks", Double(sink.blocks.load(ordering: .relaxed)))
    client.shutdown()
    say("done")
}
