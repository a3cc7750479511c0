// The `idle` role: what a connected, joined client costs while nothing plays and
// nothing is sent. First in pull mode (external playback, no sink, nobody pulling),
// then with a mixed-output sink set (its mixer thread calls the sink every 20 ms).
// Process CPU (getrusage) per second of wall time, and context switches per second.
import Synchronization
import VoiceCatAllocCounter
import VoiceCatClient
import VoiceCatSystem

func runIdle(_ args: Arguments) throws {
    let port = UInt16(args.int("port", 0))
    let seconds = args.double("seconds", 4)
    let client = try connectClient(port, "idler", channel: BenchChannels.speech20)
    sleepSeconds(0.5)

    func measure(_ label: String) {
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
        report("\(label)_cpu_ms_per_s", Double(c1 - c0) / 1e6 / wall)
        report("\(label)_switches_per_s", Double(s1 - s0) / wall)
        report("\(label)_allocs_per_s", Double(a1 - a0) / wall)
    }

    measure("pull")
    let sink = SinkCounter()
    try client.setSink { _, _ in sink.blocks.wrappingAdd(1, ordering: .relaxed) }
    sleepSeconds(0.3)
    measure("sink")
    report("sink_blocks", Double(sink.blocks.load(ordering: .relaxed)))
    client.shutdown()
    say("done")
}
