// The `listen` role: receive + decode + mix of N streams against bare decoders.
//
// Live: a client (external playback with a mixed-output sink, so its own vc-mixer
// thread renders the mix every 20 ms and hands it to the sink, which only counts the
// blocks) receives N streams that a `talk` process sends through the `serve`
// process. Its whole CPU (getrusage RUSAGE_SELF: every thread of this process, user
// and system) over a few windows, divided by the frames it received.
//
// Bare: in this process, at the same time, a thread of its own (bench-bare) does
// what the renderer does per 20 ms block without the engine around it: N
// OpusDecoderBox decode the same packets (the same PacketPool the talker sends) to
// float, with as many channels as the stream has, as the renderer does, and a
// MixBus adds them and limits the block, one block every 20 ms (the cadence the
// engine runs at, its wakeups included). Its CPU (scheduler run time) per decoded
// frame; the engine's is the process's less that thread's. Running both at once
// puts them under the same load (this machine is shared: identical work varies by
// up to 2x between seconds), each window's ratio compares like with like, and the
// figure is the median of the windows' ratios. Also, once the client is gone, the
// baseline in a tight loop (caches hot; the codec's best case), for reference.
//
// The kernel's and the cipher's part, for reference (as the send role times a bare
// sendto): after each block the baseline's thread also sends itself, over loopback,
// the block's datagrams as the engine receives them (20-byte header, the same
// packets, sealed with ChaCha20-Poly1305), then times only the receiving side: one
// recvmmsg per 32 with kernel timestamps, as MediaInput reads, and an AEAD open of
// each. That is work any receiver of this protocol does before its jitter buffer;
// it is left out of the baseline's decode + mix figure (timed around it) and
// reported per frame beside it.
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
    pinToCPUsIfAsked(args)
    let n = args.int("streams", 1)
    let windows = args.int("windows", 6)
    let seconds = args.double("seconds", 1.2)
    // --control 1: an A/A check of the method. A second bare thread (no floor step)
    // takes the engine's place: the client only fetches the channel's settings and
    // leaves, and "VoiceCat" below is then the process less the baseline's thread per
    // frame the second thread decoded. An unbiased method reads 1.00x.
    let control = args.int("control", 0) == 1
    let client = try connectClient(args, "listener", channel: BenchChannels.speech20, maxRemoteStreams: max(32, n))
    guard let audio = client.currentChannelAudio else { fail("no channel settings") }
    // Built before the talker starts: encoding its packets takes a while.
    let bare = try BareDecodeMix(audio: audio, streams: n)
    let stand = control ? try BareDecodeMix(audio: audio, streams: n, name: "bench-control", floor: false) : nil
    let sink = SinkCounter()
    if control { client.shutdown() } else { try client.setSink { _, _ in sink.blocks.wrappingAdd(1, ordering: .relaxed) } }
    ParentWatch.shared.start()
    say("ready")

    let deadline = MonotonicClock.milliseconds() + 15_000
    while !control, client.remoteStreams().count < n {
        if MonotonicClock.milliseconds() > deadline { fail("only \(client.remoteStreams().count) of \(n) streams arrived") }
        sleepSeconds(0.02)
    }
    bare.start()
    if let stand {
        // The engine's renderer keeps its own phase against the baseline's; a third of a block here.
        sleepSeconds(0.007)
        stand.start()
    }
    /// Frames received by the engine (or decoded by the control thread) so far.
    func received() -> UInt64 {
        if let stand { return UInt64(stand.blocks.load(ordering: .acquiring) * stand.framesPerBlock) }
        return client.connectionStats().packetsIn
    }
    sleepSeconds(args.double("warmup", 1.5))
    let bareClock = NamedThreadClock(BareDecodeMix.threadName)
    guard bareClock.found else { fail("the baseline's thread was not found") }

    /// The streams' jitter counters, summed (allocates: outside the counted windows).
    func jitterTotals() -> (concealed: UInt64, late: UInt64, lost: UInt64) {
        var t: (UInt64, UInt64, UInt64) = (0, 0, 0)
        for s in control ? [] : client.remoteStreams() {
            guard let st = try? client.streamStats(ssrc: s.ssrc) else { continue }
            t.0 += st.jitter.plcFrames; t.1 += st.jitter.late; t.2 += st.jitter.packetsLost
        }
        return t
    }
    var perFrame: [Double] = [], paced: [Double] = [], floors: [Double] = []
    var threads = ThreadBreakdown()
    var frames: UInt64 = 0, blocks = 0, allocs: UInt64 = 0, cpu: UInt64 = 0, switches: UInt64 = 0, bareBlocks = 0
    var concealed: UInt64 = 0, late: UInt64 = 0, lost: UInt64 = 0
    for _ in 0..<windows {
        let j0 = jitterTotals()
        let th0 = threadCPUByName()
        let p0 = received()
        let b0 = sink.blocks.load(ordering: .relaxed)
        let s0 = CPUClock.contextSwitches()
        let d0 = bare.blocks.load(ordering: .acquiring)
        let x0 = bareClock.read()
        let (fl0, ex0) = bare.floorTotals()
        let c0 = CPUClock.process()
        let a0 = vc_alloc_count()
        sleepSeconds(seconds)
        let a1 = vc_alloc_count()
        let c1 = CPUClock.process()
        let (fl1, ex1) = bare.floorTotals()
        let x1 = bareClock.read()
        let d1 = bare.blocks.load(ordering: .acquiring)
        let s1 = CPUClock.contextSwitches()
        let b1 = sink.blocks.load(ordering: .relaxed)
        let p1 = received()
        threads.add(ThreadBreakdown.between(th0, threadCPUByName()))
        let j1 = jitterTotals()
        concealed += j1.concealed - j0.concealed; late += j1.late - j0.late; lost += j1.lost - j0.lost
        let got = p1 - p0
        // The engine: the process less the baseline's thread.
        let engine = Double(c1 - c0) - Double(x1 - x0)
        perFrame.append(engine / Double(max(got, 1)) / 1000)
        // The baseline's thread less its floor step (sending itself the datagrams, and
        // reading and opening them: the floor is the second part).
        let bareFrames = Double(max(1, (d1 - d0) * bare.framesPerBlock))
        paced.append((Double(x1 - x0) - Double(fl1 - fl0) - Double(ex1 - ex0)) / bareFrames / 1000)
        floors.append(Double(fl1 - fl0) / bareFrames / 1000)
        frames += got; blocks += b1 - b0; allocs += a1 - a0; cpu += UInt64(max(0, engine)); switches += s1 - s0
        bareBlocks += d1 - d0
    }
    bare.stop()
    stand?.stop()
    let ratios = (0..<windows).map { perFrame[$0] / paced[$0] }
    if args.int("verbose", 0) == 1 { fputs("engine \(perFrame)\nbare \(paced)\n", stderr) }
    let f = Double(max(frames, 1))
    report("frames", Double(frames))
    report("expected_frames", Double(windows) * seconds * 1e6 / Double(audio.frameMicros) * Double(n))
    report("blocks", Double(blocks))
    report("engine_us", median(perFrame))
    report("engine_us_min", perFrame.min() ?? .nan)
    report("engine_us_max", perFrame.max() ?? .nan)
    report("bare_us", median(paced))
    report("bare_us_min", paced.min() ?? .nan)
    report("bare_us_max", paced.max() ?? .nan)
    report("ratio", median(ratios))
    // The engine less the floor (kernel read + AEAD open), over the bare decode + mix.
    report("ratio_less_floor", median((0..<windows).map { (perFrame[$0] - floors[$0]) / paced[$0] }))
    report("floor_us", median(floors))
    report("floor_opened", Double(bare.floorOpened.load(ordering: .relaxed)))
    report("ratio_min", ratios.min() ?? .nan)
    report("ratio_max", ratios.max() ?? .nan)
    report("network_us", Double(threads.sum(["vc-network"])) / f / 1000)
    report("mixer_us", Double(threads.sum(["vc-mixer"])) / f / 1000)
    report("other_us", (Double(cpu) - Double(threads.sum(["vc-network", "vc-mixer"]))) / f / 1000)
    // The baseline's thread sleeps once per block: its switches are not the engine's.
    report("switches_per_s", (Double(switches) - Double(bareBlocks)) / (Double(windows) * seconds))
    report("allocs", Double(allocs))
    report("concealed", Double(concealed))
    report("late", Double(late))
    report("lost", Double(lost))
    say("live-done")

    // The parent stops the talker, then closes our stdin.
    ParentWatch.shared.wait()
    if !control { client.shutdown() }
    var hot: [Double] = []
    for _ in 0..<3 { hot.append(bare.hotRun(blocks: max(50, 8000 / n))) }
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
    let decoded = UnsafeMutablePointer<Float>.allocate(capacity: 2880 * 2)
    let out = UnsafeMutablePointer<Int16>.allocate(capacity: 960 * 2)
    private var frame = 0
    /// The floor step: a loopback socket pair, the datagrams as the engine gets them.
    private let key = SymmetricKey.random()
    private let floorRx: Socket
    private let floorTx: Socket
    private let floorTo: SocketAddress
    private let floorSend: DatagramBatch
    private let floorRecv = DatagramBatch(capacity: 32, slotSize: MediaLimits.maxDatagramBytes, timestamps: true)
    private var floorSeq: UInt64 = 0
    /// Thread CPU of the floor's receiving side, and of its sending side (ns).
    private let floorNs = Atomic<UInt64>(0)
    private let floorExtraNs = Atomic<UInt64>(0)
    /// Datagrams the floor step read and opened (a check that it did the work).
    let floorOpened = Atomic<Int>(0)
    /// Blocks the paced thread has done.
    let blocks = Atomic<Int>(0)
    private let stopFlag = Atomic<Bool>(false)
    private var thread: SystemThread?
    static let threadName = "bench-bare"
    let name: String
    /// Whether each block is followed by the floor step (the A/A control has none).
    let floor: Bool
    var framesPerBlock: Int { streams * 960 / audio.frameSamples }

    init(audio: AudioConfig, streams: Int, name: String = BareDecodeMix.threadName, floor: Bool = true) throws {
        self.audio = audio
        self.streams = streams
        self.name = name
        self.floor = floor
        pool = try PacketPool(audio: audio, signals: min(streams, Bench.signalCount), framesPerSignal: Bench.framesPerSignal)
        decoders = try (0..<streams).map { _ in
            let d = try OpusDecoderBox()
            d.setChannels(audio.channels)   // as the engine decodes a mono stream
            return d
        }
        decoded.initialize(repeating: 0, count: 2880 * 2)
        out.initialize(repeating: 0, count: 960 * 2)
        floorRx = try Socket.bindUDP(try SocketAddress(host: "127.0.0.1", port: 0))
        try floorRx.enableReceiveTimestamps()
        floorRx.setReceiveBuffer(4 << 20)
        floorTo = try floorRx.localAddress()
        floorTx = try Socket.udp(familyOf: floorTo)
        floorTx.setSendBuffer(4 << 20)
        floorSend = DatagramBatch(capacity: streams * 960 / audio.frameSamples, slotSize: MediaLimits.maxDatagramBytes)
    }

    /// (floor ns, the floor step's sending side ns) so far.
    func floorTotals() -> (UInt64, UInt64) { (floorNs.load(ordering: .acquiring), floorExtraNs.load(ordering: .acquiring)) }

    /// The block's datagrams sent to ourselves (untimed part), then read with
    /// timestamps and opened as MediaInput does (the floor).
    private func floorStep() {
        let fs = audio.frameSamples
        let perBlock = 960 / fs
        var c = CPUClock.thread()
        for i in 0..<streams {
            for j in 0..<perBlock {
                floorSeq += 1
                let h = FrameHeader(type: .voice, ssrc: UInt32(i + 1), seq: floorSeq, timestamp: UInt32(truncatingIfNeeded: floorSeq &* UInt64(fs)))
                let n = pool.packet(stream: i, frame: frame - perBlock + j).withUnsafeBytes { p in
                    MediaCrypto.seal(header: h, payload: p, key: key, into: floorSend.nextSlot())
                }
                floorSend.commit(length: n, to: floorTo)
            }
        }
        _ = floorSend.send(on: floorTx)
        var t = CPUClock.thread()
        floorExtraNs.wrappingAdd(t - c, ordering: .releasing)
        c = t
        var opened = 0
        while let got = try? floorRecv.receive(from: floorRx), got > 0 {
            var realtime = timespec()
            clock_gettime(CLOCK_REALTIME, &realtime)
            for k in 0..<got {
                guard !floorRecv.wasTruncated(k), floorRecv.receiveTimeRealtimeNs(k) != nil else { continue }
                if (try? MediaCrypto.open(floorRecv.datagram(k), key: key)) != nil { opened += 1 }
            }
            if got < floorRecv.capacity { break }
        }
        t = CPUClock.thread()
        floorNs.wrappingAdd(t - c, ordering: .releasing)
        floorOpened.wrappingAdd(opened, ordering: .relaxed)
    }

    deinit { decoded.deallocate(); out.deallocate(); floorRx.close(); floorTx.close() }

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
                if audio.channels == 1 {
                    bus.addMono(decoded, frames: fs, gain: 1, at: j * fs)
                } else {
                    bus.add(decoded, frames: fs, gain: 1, at: j * fs)
                }
            }
        }
        bus.render(into: out, frames: 960)
        frame += perBlock
    }

    /// Starts a thread that does one block every 20 ms until stop().
    func start() {
        thread = SystemThread(name: name) { [self] in
            var next = MonotonicClock.nanoseconds()
            while !stopFlag.load(ordering: .acquiring) {
                next += 20_000_000
                sleepUntil(ns: next)
                block()
                if floor { floorStep() }
                blocks.wrappingAdd(1, ordering: .releasing)
            }
        }
    }

    func stop() {
        stopFlag.store(true, ordering: .releasing)
        thread?.join()
        thread = nil
    }

    /// Thread CPU per decoded frame (µs), blocks back to back.
    func hotRun(blocks: Int) -> Double {
        let c = CPUClock.thread()
        for _ in 0..<blocks { block() }
        return Double(CPUClock.thread() - c) / Double(blocks * streams * 960 / audio.frameSamples) / 1000
    }
}
