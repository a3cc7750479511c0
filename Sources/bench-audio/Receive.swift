// The `listen` role: receive + decode + mix of N streams against bare decoders.
//
// Live: a client (external playback with a mixed-output sink, so its own vc-mixer
// thread renders the mix every 20 ms and hands it to the sink, which only counts the
// blocks) receives N streams that a `talk` process sends through the `serve`
// process. Its whole CPU (getrusage RUSAGE_SELF: every thread of this process, user
// and system) over a few windows, divided by the frames it received.
//
// Bare: after the client is gone, in this process, N OpusDecoderBox decode the same
// packets (the same PacketPool the talker sent) and a MixBus adds them and limits
// the block, exactly as the renderer's decode and mix do, without the engine around
// them. Measured twice: at the real-time cadence (one block every 20 ms, sleeping in
// between, as the engine must run, wakeups included; the reference of the ratio) and
// in a tight loop (caches hot; the codec's best case).
import Glibc
import Synchronization
import VoiceCatAllocCounter
import VoiceCatAudio
import VoiceCatClient
import VoiceCatProtocol
import VoiceCatSystem

final class SinkCounter: @unchecked Sendable {
    let blocks = Atomic<Int>(0)
}

func runListener(_ args: Arguments) throws {
    let n = args.int("streams", 1)
    let windows = args.int("windows", 3)
    let seconds = args.double("seconds", 2)
    let client = try connectClient(args, "listener", channel: BenchChannels.speech20, maxRemoteStreams: max(32, n))
    guard let audio = client.currentChannelAudio else { fail("no channel settings") }
    let sink = SinkCounter()
    try client.setSink { _, _ in sink.blocks.wrappingAdd(1, ordering: .relaxed) }
    ParentWatch.shared.start()
    say("ready")

    let deadline = MonotonicClock.milliseconds() + 15_000
    while client.remoteStreams().count < n {
        if MonotonicClock.milliseconds() > deadline { fail("only \(client.remoteStreams().count) of \(n) streams arrived") }
        sleepSeconds(0.02)
    }
    sleepSeconds(args.double("warmup", 1.5))

    var perFrame: [Double] = []
    var threads = ThreadBreakdown()
    var frames: UInt64 = 0, blocks = 0, allocs: UInt64 = 0, cpu: UInt64 = 0, switches: UInt64 = 0
    for _ in 0..<windows {
        let th0 = threadCPUByName()
        let p0 = client.connectionStats().packetsIn
        let b0 = sink.blocks.load(ordering: .relaxed)
        let s0 = CPUClock.contextSwitches()
        let c0 = CPUClock.process()
        let a0 = vc_alloc_count()
        sleepSeconds(seconds)
        let a1 = vc_alloc_count()
        let c1 = CPUClock.process()
        let s1 = CPUClock.contextSwitches()
        let b1 = sink.blocks.load(ordering: .relaxed)
        let p1 = client.connectionStats().packetsIn
        threads.add(ThreadBreakdown.between(th0, threadCPUByName()))
        let got = p1 - p0
        perFrame.append(Double(c1 - c0) / Double(max(got, 1)) / 1000)
        frames += got; blocks += b1 - b0; allocs += a1 - a0; cpu += c1 - c0; switches += s1 - s0
    }
    var concealed: UInt64 = 0, late: UInt64 = 0, lost: UInt64 = 0
    for s in client.remoteStreams() {
        guard let st = try? client.streamStats(ssrc: s.ssrc) else { continue }
        concealed += st.jitter.plcFrames; late += st.jitter.late; lost += st.jitter.packetsLost
    }
    let f = Double(max(frames, 1))
    report("frames", Double(frames))
    report("expected_frames", Double(windows) * seconds * 1e6 / Double(audio.frameMicros) * Double(n))
    report("blocks", Double(blocks))
    report("engine_us", median(perFrame))
    report("engine_us_min", perFrame.min() ?? .nan)
    report("engine_us_max", perFrame.max() ?? .nan)
    report("network_us", Double(threads.sum(["vc-network"])) / f / 1000)
    report("mixer_us", Double(threads.sum(["vc-mixer"])) / f / 1000)
    report("other_us", (Double(cpu) - Double(threads.sum(["vc-network", "vc-mixer"]))) / f / 1000)
    report("switches_per_s", Double(switches) / (Double(windows) * seconds))
    report("allocs", Double(allocs))
    report("concealed", Double(concealed))
    report("late", Double(late))
    report("lost", Double(lost))
    say("live-done")

    // The parent stops the talker, then closes our stdin.
    ParentWatch.shared.wait()
    client.shutdown()
    let bare = try BareDecodeMix(audio: audio, streams: n)
    var paced: [Double] = []
    for _ in 0..<3 { paced.append(bare.pacedRun(blocks: 50)) }
    var hot: [Double] = []
    for _ in 0..<3 { hot.append(bare.hotRun(blocks: max(50, 8000 / n))) }
    report("bare_us", median(paced))
    report("bare_hot_us", median(hot))
    say("done")
}

/// N decoders and a mix bus, doing what the renderer does per block without the engine.
final class BareDecodeMix {
    let audio: AudioConfig
    let streams: Int
    let pool: PacketPool
    let decoders: [OpusDecoderBox]
    let bus = MixBus(capacityFrames: 960)
    let decoded = UnsafeMutablePointer<Int16>.allocate(capacity: 2880 * 2)
    let out = UnsafeMutablePointer<Int16>.allocate(capacity: 960 * 2)
    private var frame = 0

    init(audio: AudioConfig, streams: Int) throws {
        self.audio = audio
        self.streams = streams
        pool = try PacketPool(audio: audio, signals: min(streams, Bench.signalCount), framesPerSignal: Bench.framesPerSignal)
        decoders = try (0..<streams).map { _ in try OpusDecoderBox() }
        decoded.initialize(repeating: 0, count: 2880 * 2)
        out.initialize(repeating: 0, count: 960 * 2)
    }

    deinit { decoded.deallocate(); out.deallocate() }

    /// One 20 ms block: each stream's frames decoded and added, then limited.
    func block() {
        let fs = audio.frameSamples
        let perBlock = 960 / fs
        bus.clear(frames: 960)
        for i in 0..<streams {
            for j in 0..<perBlock {
                pool.packet(stream: i, frame: frame + j).withUnsafeBytes { p in
                    _ = try? decoders[i].decode(p, frames: fs, into: decoded)
                }
                bus.add(decoded, frames: fs, gain: 1, at: j * fs)
            }
        }
        bus.render(into: out, frames: 960)
        frame += perBlock
    }

    /// Thread CPU per decoded frame (µs), blocks back to back.
    func hotRun(blocks: Int) -> Double {
        let c = CPUClock.thread()
        for _ in 0..<blocks { block() }
        return Double(CPUClock.thread() - c) / Double(blocks * streams * 960 / audio.frameSamples) / 1000
    }

    /// Thread CPU per decoded frame (µs), one block every 20 ms. The thread's CPU
    /// includes its wakeups, which any real-time consumer of the blocks pays too.
    func pacedRun(blocks: Int) -> Double {
        let t0 = MonotonicClock.nanoseconds() + 20_000_000
        sleepUntil(ns: t0)
        let c = CPUClock.thread()
        for b in 0..<blocks {
            sleepUntil(ns: t0 + UInt64(b) * 20_000_000)
            block()
        }
        return Double(CPUClock.thread() - c) / Double(blocks * streams * 960 / audio.frameSamples) / 1000
    }
}
