// When a fed stream's queue runs dry, how long it waits for the host before it ends
// the talkspurt (LocalStream.deadline, on a simulated clock): the dry slack after a
// real-time host's block, none once a call of a second or more has been sent.
@testable import VoiceCatClient
import VoiceCatAudio
import VoiceCatDevices
import VoiceCatProtocol
import VoiceCatSystem
import XCTest

/// Stream 1 of `c` as vc_stream_start builds it (a MIC fed by the host, the channel's
/// speech settings), with a connected client's send path to the discard port.
func discardingStream(on c: VoiceClient, inputRate: Int = 48000, externalFeed: Bool = true) throws -> (LocalStream, StreamSlot) {
    let slot = c.streams.slots[0]
    let s = try LocalStream(streamID: 1, ssrc: 5000, kind: .mic, externalFeed: externalFeed, inputChannels: 1, audio: .speech,
                            inputRate: inputRate, slot: slot, table: c.streams)
    let sock = try Socket.udp(familyOf: try SocketAddress(host: "127.0.0.1", port: 9))
    try sock.setNonBlocking()
    slot.path = SendSnapshot(key: SymmetricKey.random(), socket: sock, address: try SocketAddress(host: "127.0.0.1", port: 9),
                             serverMuted: false)
    return (s, slot)
}

final class DryQueueTests: XCTestCase {
    private let ms: UInt64 = 1_000_000
    /// The simulated clock's origin (a monotonic clock is far from 0).
    private let t0: UInt64 = 1_000_000_000_000

    private func feed(_ s: LocalStream, _ slot: StreamSlot, ms count: Int, at t: UInt64, rate: Int = 48000) throws {
        try feed(s, slot, samples: count * rate / 1000, at: t)
    }

    private func feed(_ s: LocalStream, _ slot: StreamSlot, samples: Int, at t: UInt64) throws {
        let pcm = [Int16](repeating: 1000, count: samples)
        try pcm.withUnsafeBufferPointer { p in try slot.lock.withLock { try s.feed(p.baseAddress!, frames: pcm.count, channels: 1, clock: { t }) } }
    }

    /// A real-time host: feeds `blocks` (when, how many µs of 48 kHz audio), the pacer
    /// pumping the stream at each deadline before every block. Returns how many times
    /// the talkspurt had ended (the queue taken for dry) when a block came, and the
    /// most whole frames left queued right after a block was fed (a real-time host's
    /// first frame goes out at once: a block of n frames leaves n - 1 at most), and
    /// the stream (and its client, which it needs alive). `pieces`: each block is fed
    /// as that many calls, 10 µs apart.
    private func play(_ blocks: [(at: UInt64, us: Int)], pieces: Int = 1, rate: Int = 48000,
                      externalFeed: Bool = true) throws -> (cuts: Int, maxLeft: Int, s: LocalStream, slot: StreamSlot, c: VoiceClient) {
        let c = try VoiceClient()
        let (s, slot) = try discardingStream(on: c, inputRate: rate, externalFeed: externalFeed)
        c.setInputMode(.continuous)
        var cuts = 0, maxLeft = 0
        for (k, b) in blocks.enumerated() {
            while let d = slot.lock.withLock({ s.deadline }), d <= b.at { slot.lock.withLock { s.pump(now: d) } }
            if k > 0 && slot.lock.withLock({ s.deadline }) == nil { cuts += 1 }
            let samples = b.us * rate / 1_000_000
            for p in 0..<pieces {
                try feed(s, slot, samples: samples * (p + 1) / pieces - samples * p / pieces, at: b.at + UInt64(p) * 10_000)
            }
            maxLeft = max(maxLeft, slot.lock.withLock { s.queuedFrames })
        }
        return (cuts, maxLeft, s, slot, c)
    }

    /// Blocks `ks` of `length` µs (default `us`) every `us` µs, each `shift(k)` µs later.
    private func blocks(_ ks: Range<Int>, every us: Int, length: Int? = nil,
                        shift: (Int) -> Int = { _ in 0 }) -> [(at: UInt64, us: Int)] {
        ks.map { k in
            let atUs: Int = k * us + shift(k)
            return (t0 + UInt64(atUs) * 1000, length ?? us)
        }
    }

    /// Pumps `s` at each deadline up to `until`.
    private func pump(_ s: LocalStream, _ slot: StreamSlot, until: UInt64) {
        while let d = slot.lock.withLock({ s.deadline }), d <= until { slot.lock.withLock { s.pump(now: d) } }
    }

    func testAFullQueueSaysWhatItHoldsWhenThatIsUnderAMillisecond() throws {
        // A partial frame of a few samples and a call of exactly max_queue_ms: refused
        // (nothing of it queued), and the refusal read "queue is full: 0 ms queued of at
        // most 100 ms, this call's 100 ms would not fit".
        let c = try VoiceClient()
        let slot = c.streams.slots[0]
        let s = try LocalStream(streamID: 1, ssrc: 5000, kind: .mic, externalFeed: true, inputChannels: 1, audio: .speech,
                                maxQueueMs: 100, slot: slot, table: c.streams)
        c.setInputMode(.continuous)
        try feed(s, slot, samples: 10, at: t0)
        XCTAssertThrowsError(try feed(s, slot, ms: 100, at: t0 + ms)) { e in
            XCTAssertTrue("\(e)".contains("queue is full: 10 samples at 48 kHz queued of at most 100 ms"), "\(e)")
        }
        XCTAssertEqual(slot.lock.withLock { s.queuedFrames }, 0, "part of the refused call was queued")
        try feed(s, slot, ms: 40, at: t0 + 2 * ms)
        XCTAssertThrowsError(try feed(s, slot, ms: 80, at: t0 + 3 * ms)) { e in
            XCTAssertTrue("\(e)".contains("queue is full: 20 ms queued of at most 100 ms"), "\(e)")   // a frame was sent at once
        }
    }

    func testACaptureDevicesLateReadsDoNotEndItsTalkspurt() throws {
        // A capture thread's read that comes late (not scheduled on a busy machine, a
        // slow plugin) finds the audio in the device's buffer: its periods then come
        // back to back. The stream's talkspurt goes on (CONTINUOUS: the gate never
        // closes). With a host's dry slack (5 ms for a steady feeder) a read 15 ms late
        // ended it in mid-word: a padded hole, GATE_CLOSED, a new talkspurt with a
        // jumped timestamp (helper-86, in 2 of 8 such reads; by itself on a busy
        // machine once per ~10 s). A device that stops delivering for longer than its
        // buffer does end it.
        func periods(_ n: Int, late: [Int: Int]) -> [(at: UInt64, us: Int)] {
            var readyUs = 0   // when the capture thread gets to period k
            return (0..<n).map { k in
                readyUs = max(readyUs, k * 20_000 + (late[k] ?? 0) * 1000)
                return (t0 + UInt64(readyUs) * 1000, 20_000)
            }
        }
        let late = [50: 15, 100: 35, 150: 60, 200: 90]
        let device = try play(periods(260, late: late), externalFeed: false)
        XCTAssertEqual(device.cuts, 0, "a late read ended the device stream's talkspurt")
        let host = try play(periods(260, late: late))
        XCTAssertEqual(host.cuts, 4, "a host's blocks that late are pauses (the slack it learns is up to 40 ms)")
        let stopped = try play(periods(60, late: [30: 150]), externalFeed: false)
        XCTAssertEqual(stopped.cuts, 1, "a device silent for 150 ms has stopped delivering")
    }

    func testBlocksOfAnyLengthAtRealTimeAreNotCut() throws {
        // Blocks that are not whole frames: a 30 ms block completes one frame or two, and
        // the next comes 30 ms after the last, whatever went out when. Right after a
        // block, no more frames wait than it can complete (they wait for their slots:
        // the talkspurt's start is held by the blocks' unevenness), so nothing piles up.
        for us in [30_000, 50_000, 70_000, 12_500] {
            let r = try play((0..<60).map { k in (t0 + UInt64(k * us) * 1000, us) })
            XCTAssertEqual(r.cuts, 0, "\(us / 1000) ms blocks")
            XCTAssertLessThanOrEqual(r.maxLeft, (us + 19_999) / 20_000, "\(us / 1000) ms blocks: frames held back")
        }
    }

    /// When each frame left (was taken from the queue) for a real-time host feeding
    /// blocks of `n` samples at `rate` for 2 s (each as `pieces` calls 10 µs apart,
    /// block k `late(k)` ns after its time), the pacer pumping at each deadline.
    private func sendTimes(blocksOf n: Int, pieces: Int = 1, rate: Int = 48000,
                           late: (Int) -> UInt64 = { _ in 0 }) throws -> [UInt64] {
        let c = try VoiceClient()
        let (s, slot) = try discardingStream(on: c, inputRate: rate)
        c.setInputMode(.continuous)
        var times: [UInt64] = []
        func taken(at t: UInt64) {
            let n = Int(slot.lock.withLock { s.framesTaken })
            while times.count < n { times.append(t) }
        }
        for k in 0..<(2 * rate / n) {
            let at = t0 + UInt64(k * n) * 1_000_000_000 / UInt64(rate) + late(k)
            while let d = slot.lock.withLock({ s.deadline }), d <= at { slot.lock.withLock { s.pump(now: d) }; taken(at: d) }
            for p in 0..<pieces {
                let piece = n * (p + 1) / pieces - n * p / pieces
                try feed(s, slot, samples: piece, at: at + UInt64(p) * 10_000)
                taken(at: at + UInt64(p) * 10_000)
            }
        }
        return times
    }

    func testBlocksThatAreNotWholeFramesLeaveEveryFrameInItsSlot() throws {
        // 30 ms blocks bring one frame or two: sent as they complete, frames leave 30, 10,
        // 20, 30, 10 ms apart, jitter every listener had to learn (a new stream's first
        // talkspurt, with no cushion, concealed a frame for it). The first frame is held
        // by the worst of it and every frame leaves in its slot, 20 ms apart; also for
        // 50 ms blocks, 1024-sample periods (the worst 14 frames in: 18.67 ms), a 30 ms
        // block fed as two calls, and blocks shorter than a frame, held from the call
        // that completes the first frame (at 10.67 ms for 512-sample blocks, then 8 ms;
        // 720 and 480 samples: nothing to hold). `first`: when the first frame leaves
        // (µs after the first call).
        for (n, pieces, first) in [(1440, 1, 10_000), (2400, 1, 10_000), (1024, 1, 18_667), (1440, 2, 10_000),
                                   (512, 1, 18_667), (720, 1, 15_000), (480, 1, 10_000)] {
            let times = try sendTimes(blocksOf: n, pieces: pieces)
            let label = "\(n)-sample blocks in \(pieces) calls"
            XCTAssertGreaterThanOrEqual(times.count, 95, label)
            guard let t1 = times.first else { continue }
            XCTAssertEqual(Double(t1 - t0) / 1000, Double(first), accuracy: 1, "\(label): the first frame's hold")
            // To the µs: a 1024-sample block is 21,333,333.3 ns, the stream reckons 21,333,333.
            let off = times.enumerated().filter { k, t in abs(Int64(t) - Int64(t1 + UInt64(k) * 20 * ms)) > 1000 }.map { $0.offset }
            XCTAssertEqual(off, [], "\(label): frames out of their slot")
        }
        // A host whose blocks come a little earlier each time (its clock 0.02 % fast, or a
        // first wake-up later than the rest): each frame within 0.5 ms of its slot. (The
        // fast-clock follow once sent a frame the blocks explain as early at once, 10 ms
        // before its slot.)
        let wakes = try sendTimes(blocksOf: 1440, late: { k in UInt64(max(0, 70 - k)) * 5_000 })
        let early = wakes.enumerated().filter { k, t in abs(Int64(t) - Int64(wakes[0] + UInt64(k) * 20 * ms)) > 500_000 }
            .map { k, t in "frame \(k): \((Int64(t) - Int64(wakes[0] + UInt64(k) * 20 * ms)) / 1000) µs" }
        XCTAssertEqual(early, [], "30 ms blocks from a host a little fast")
        // Blocks of whole frames are not held: the first frame leaves with its call.
        for n in [960, 1920, 4800] {
            XCTAssertEqual(try sendTimes(blocksOf: n).first, t0, "\(n)-sample blocks")
        }
        // Nor at another rate (espeak-ng's 22,050 Hz, 16 kHz), where the resampler's
        // output keeps its filter delay rather than starting short by it: a first block
        // short of whole frames made whole-frame blocks uneven (40 ms blocks were held
        // 20 ms) and 20 ms blocks' first frame wait for the second block.
        for (rate, n) in [(22050, 441), (22050, 882), (22050, 2205), (16000, 320), (16000, 640)] {
            let times = try sendTimes(blocksOf: n, rate: rate)
            let label = "\(n)-sample blocks at \(rate) Hz"
            XCTAssertGreaterThanOrEqual(times.count, 95, label)
            XCTAssertEqual(times.first, t0, "\(label): the first frame waited")
            let off = times.enumerated().filter { k, t in abs(Int64(t) - Int64(t0 + UInt64(k) * 20 * ms)) > 1000 }.map { $0.offset }
            XCTAssertEqual(off, [], "\(label): frames out of their slot")
        }
        XCTAssertEqual(LocalStream.startHoldNs(blockNs: 10 * ms, audioNs: 10 * ms, frameNs: 20 * ms), 0, "less than a frame: nothing to hold")
        XCTAssertEqual(LocalStream.startHoldNs(blockNs: 510 * ms, audioNs: 510 * ms, frameNs: 20 * ms), 0, "a sentence")
        XCTAssertEqual(LocalStream.startHoldNs(blockNs: 90 * ms, audioNs: 90 * ms, frameNs: 20 * ms), 10 * ms)
    }

    func testACaptureDeviceAtAnotherRateSendsAFrameWithEachPeriod() throws {
        // A device that runs at 44.1, 22.05 or 16 kHz is read a 20 ms period at a time
        // and converted to 48 kHz (CaptureWorker.Capture) before the stream takes it.
        // With the resampler's filter delay skipped, the first period came out short of
        // a frame by that delay, so every frame was complete only with the next period:
        // 20 ms more delay than a 48 kHz device for as long as the stream ran. Each
        // period gives its frame at once, as at 48 kHz.
        let backend = MemoryAudioBackend()
        for rate in [48000, 44100, 22050, 16000] {
            let name = "mem-mic-\(rate)"
            backend.addDevice(name, direction: .capture, channels: 1, sampleRate: rate)
                .setInput([Int16](repeating: 2000, count: rate * 2))
            let cap = try CaptureWorker.Capture.open(backend: backend, device: name, channels: 1, sampleRate: 48000,
                                                     quality: FormatConverter.defaultQuality)
            defer { cap.device.close() }
            XCTAssertEqual(cap.device.sampleRate, rate)
            let c = try VoiceClient()
            let (s, slot) = try discardingStream(on: c, externalFeed: false)
            c.setInputMode(.continuous)
            let buf = UnsafeMutablePointer<Int16>.allocate(capacity: cap.period)
            defer { buf.deallocate() }
            var late: [Int] = []
            for k in 0..<50 {
                let at = t0 + UInt64(k) * 20 * ms
                try cap.device.read(buf, frames: cap.period)
                let (pcm, frames) = cap.converter?.convert(buf, frames: cap.period) ?? (UnsafePointer(buf), cap.period)
                try slot.lock.withLock { try s.feed(pcm, frames: frames, channels: 1, clock: { at }) }
                pump(s, slot, until: at)
                if slot.lock.withLock({ s.framesTaken }) != UInt64(k + 1) { late.append(k) }
            }
            XCTAssertEqual(late, [], "\(rate) Hz: periods after which their frame had not left")
        }
    }

    func testAHeldTalkspurtsTimestampsKeepStepWithItsSendTimes() throws {
        // Two talkspurts of 30 ms blocks, each held 10 ms at its start, 500 ms apart:
        // every packet's timestamp, counted from the first packet's, is its send time
        // counted from the first's (to a sample or two; a talkspurt's padded last frame
        // leaves when the queue is found dry, the slack after its slot). Reckoned from
        // the call that started it, a held talkspurt's timestamps lagged its send times
        // by the hold, a hold more with each talkspurt: listeners took that for jitter.
        let c = try VoiceClient()
        c.setInputMode(.continuous)
        let slot = c.streams.slots[0]
        let s = try LocalStream(streamID: 1, ssrc: 5000, kind: .mic, externalFeed: true, inputChannels: 1, audio: .speech,
                                slot: slot, table: c.streams)
        let rx = try Socket.bindUDP(try SocketAddress(host: "127.0.0.1", port: 0))
        try rx.setNonBlocking()
        let to = try rx.localAddress()
        let tx = try Socket.udp(familyOf: to)
        try tx.setNonBlocking()
        slot.path = SendSnapshot(key: SymmetricKey.random(), socket: tx, address: to, serverMuted: false)
        var sent: [(at: UInt64, ts: UInt32, marker: Bool, last: Bool)] = []
        var buf = [UInt8](repeating: 0, count: 2048)
        func collect(at t: UInt64) throws {
            while let (n, _) = try buf.withUnsafeMutableBytes({ try rx.receiveFrom(into: $0) }) {
                let h = try buf.withUnsafeBytes { try FrameHeader.parse(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
                sent.append((t, h.timestamp, h.flags.contains(.marker), h.flags.contains(.lastFrame)))
            }
        }
        let speech = Signal.glidingVoice(seconds: 2, amplitude: 0.3)
        let spurts: [UInt64] = [t0, t0 + 1250 * ms]
        for (i, start) in spurts.enumerated() {
            for k in 0..<25 {
                let at = start + UInt64(k) * 30 * ms
                while let d = slot.lock.withLock({ s.deadline }), d <= at { slot.lock.withLock { s.pump(now: d) }; try collect(at: d) }
                let block = Array(speech[((i * 25 + k) * 1440)..<((i * 25 + k + 1) * 1440)])
                try block.withUnsafeBufferPointer { p in
                    try slot.lock.withLock { try s.feed(p.baseAddress!, frames: 1440, channels: 1, clock: { at }) }
                }
                try collect(at: at)
            }
            while let d = slot.lock.withLock({ s.deadline }) { slot.lock.withLock { s.pump(now: d) }; try collect(at: d) }
        }
        XCTAssertEqual(sent.filter { $0.marker }.count, 2, "two talkspurts")
        XCTAssertGreaterThanOrEqual(sent.count, 74)
        guard let first = sent.first else { return }
        XCTAssertEqual(first.at, t0 + 10 * ms, "the first frame is held 10 ms")
        XCTAssertEqual(sent.filter { $0.last }.count, 2, "two talkspurts ended")
        let off = sent.filter { p in
            guard !p.last else { return false }
            let byClock = Int64((p.at - first.at) * 48 / 1_000_000), byStamp = Int64(p.ts &- first.ts)
            return abs(byClock - byStamp) > 2
        }.map { "\(($0.at - t0) / ms) ms: ts \($0.ts &- first.ts)" }
        XCTAssertEqual(off, [], "timestamps out of step with send times")
    }

    func testAHostWhoseClockDriftsIsNeitherCutNorHeldBack() throws {
        // 40 ms blocks from a host clock 0.1 % slow, then one 0.1 % fast, for 20 s. Slow:
        // each block comes 40 µs later than the last one's audio ends; against the talkspurt's
        // schedule that adds up past any slack (5 ms after 125 blocks), against the host's
        // own last block it never does. Fast: each first frame is complete a little before
        // its slot; held for it, the delay would grow by 40 µs a block.
        // Also 30 ms blocks, whose talkspurt is held 10 ms at its start: the hold does not
        // grow either.
        for (interval, length) in [(40_040, 40_000), (39_960, 40_000), (30_030, 30_000), (29_970, 30_000)] {
            let r = try play((0..<500).map { k in (t0 + UInt64(k * interval) * 1000, length) })
            XCTAssertEqual(r.cuts, 0, "blocks every \(interval) µs")
            XCTAssertLessThanOrEqual(r.maxLeft, 1, "blocks every \(interval) µs: nothing is held back")
        }
    }

    func testBlocksOfSeveralFramesThatComeLateTeachTheSlack() throws {
        // 40 ms blocks on time, but every fifth comes 12 ms late: the first late one may
        // end the talkspurt (5 ms of slack); the slack learns it, and the rest are waited for.
        let blocks: [(at: UInt64, us: Int)] = (0..<100).map { k in
            let us = k * 40_000 + (k % 5 == 4 ? 12_000 : 0)
            return (t0 + UInt64(us) * 1000, 40_000)
        }
        let r = try play(blocks)
        XCTAssertLessThanOrEqual(r.cuts, 1)
        XCTAssertLessThanOrEqual(r.maxLeft, 1, "the blocks after a late one are not held back")
    }

    func testARealTimeHostsBlocksAreWaitedForTheSlack() throws {
        let c = try VoiceClient()
        let (s, slot) = try discardingStream(on: c)
        c.setInputMode(.continuous)
        // 40 ms blocks every 40 ms (two frames each: the second is paced 20 ms later).
        for k in 0..<5 {
            let t = t0 + UInt64(k) * 40 * ms
            try feed(s, slot, ms: 40, at: t)
            slot.lock.withLock { s.pump(now: t + 20 * ms) }
            // Dry until the next block: the talkspurt lasts a frame plus the 5 ms slack past
            // the last frame taken, so a block a little late does not cut it.
            XCTAssertEqual(slot.lock.withLock { s.deadline }, t + 45 * ms, "block \(k)")
        }
    }

    /// Pumps at each frame's time from `from` until the queue is empty; the last pump's time.
    private func pumpDry(_ s: LocalStream, _ slot: StreamSlot, from: UInt64) -> UInt64 {
        var t = from
        while slot.lock.withLock({ s.queuedFrames }) > 0 {
            t += 20 * ms
            slot.lock.withLock { s.pump(now: t) }
        }
        return t
    }

    func testAWholeFileEndsOnTimeOnceSent() throws {
        for rate in [48000, 22050] {
            let c = try VoiceClient()
            let (s, slot) = try discardingStream(on: c, inputRate: rate)
            c.setInputMode(.continuous)
            // 1.51 s in one call: paced a frame at a time (at 48 kHz 75 frames, the last
            // taken at 1480 ms), a partial frame left over.
            try feed(s, slot, ms: 1510, at: t0, rate: rate)
            let last = pumpDry(s, slot, from: t0)
            // Nothing more can come of that call: the padded last frame is due with its slot.
            XCTAssertEqual(slot.lock.withLock { s.deadline }, last + 20 * ms, "\(rate) Hz")
            guard rate == 48000 else { continue }
            XCTAssertEqual(last, t0 + 1480 * ms)
            // A short call afterwards is a real-time host's block again: the slack is back.
            try feed(s, slot, ms: 20, at: last + 10 * ms)
            XCTAssertEqual(slot.lock.withLock { s.deadline }, last + 20 * ms, "the next frame is due in its slot")
            slot.lock.withLock { s.pump(now: last + 20 * ms) }
            XCTAssertEqual(slot.lock.withLock { s.deadline }, last + 45 * ms)
        }
    }

    func testBlocksOfASecondAtRealTimeAreWaitedFor() throws {
        let c = try VoiceClient()
        let (s, slot) = try discardingStream(on: c)
        c.setInputMode(.continuous)
        // Exactly a second is a real-time block, not a file: the slack.
        try feed(s, slot, ms: 1000, at: t0)
        var last = pumpDry(s, slot, from: t0)
        XCTAssertEqual(slot.lock.withLock { s.deadline }, last + 25 * ms)
        // Longer blocks at real time: the first is taken for a file and its talkspurt ends
        // on time; its successor comes right after, so from then on the slack is waited.
        let (s2, slot2) = try discardingStream(on: c)
        try feed(s2, slot2, ms: 1200, at: t0)
        last = pumpDry(s2, slot2, from: t0)
        XCTAssertEqual(slot2.lock.withLock { s2.deadline }, last + 20 * ms)
        slot2.lock.withLock { s2.pump(now: last + 20 * ms) }
        XCTAssertNil(slot2.lock.withLock { s2.deadline }, "the talkspurt ended")
        for k in 1...2 {
            let t = t0 + UInt64(k) * 1200 * ms + 1 * ms   // 1 ms after the block's time
            try feed(s2, slot2, ms: 1200, at: t)
            last = pumpDry(s2, slot2, from: t)
            XCTAssertEqual(slot2.lock.withLock { s2.deadline }, last + 25 * ms, "block \(k)")
        }
    }

    func testStoppingAfterAFailedCloseSendsNothing() throws {
        // The talkspurt's padded last frame could not be sent (the server muted this user
        // just then); the stream is idle when it is stopped: nothing more goes out (a
        // silent frame would open and close the gate, GATE_OPENED then GATE_CLOSED, on a
        // stream nobody hears).
        let c = try VoiceClient()
        let (s, slot) = try discardingStream(on: c)
        c.setInputMode(.continuous)
        try feed(s, slot, samples: 960 + 480, at: t0)
        slot.lock.withLock { s.pump(now: t0 + 10 * ms) }   // a 30 ms block's first frame is held 10 ms
        let open = try XCTUnwrap(slot.path)
        let sent = slot.lock.withLock { s.packetsSent }
        XCTAssertEqual(sent, 1)
        slot.path = open.with(serverMuted: true)
        let end = try XCTUnwrap(slot.lock.withLock { s.deadline })
        slot.lock.withLock { s.pump(now: end) }
        XCTAssertNil(slot.lock.withLock { s.deadline }, "the talkspurt ended")
        slot.path = open
        slot.lock.withLock { s.finish() }
        XCTAssertEqual(slot.lock.withLock { s.packetsSent }, sent, "packets sent by stopping an idle stream")
    }

    func testTheSenderThreadDoesNotWaitForAStreamBeingFed() throws {
        // Two streams with audio fed ahead of real time, sent by the client's sender
        // thread. While one stream's lock is held (its host is resampling a whole file
        // into it, tens of ms), the other's frames still go out at their time.
        let c = try VoiceClient()
        c.setInputMode(.continuous)
        let sock = try Socket.udp(familyOf: try SocketAddress(host: "127.0.0.1", port: 9))
        try sock.setNonBlocking()
        c.streams.publish(SendSnapshot(key: SymmetricKey.random(), socket: sock,
                                       address: try SocketAddress(host: "127.0.0.1", port: 9), serverMuted: false))
        var streams: [(LocalStream, StreamSlot)] = []
        for k in 0..<2 {
            let id = try c.streams.reserve()
            let slot = try XCTUnwrap(c.streams.slot(for: id))
            let s = try LocalStream(streamID: id, ssrc: 5000 + UInt32(k), kind: .mic, externalFeed: true, inputChannels: 1,
                                    audio: .speech, slot: slot, table: c.streams)
            c.streams.install(s)
            streams.append((s, slot))
        }
        c.streams.pacer.start(owner: c, table: c.streams)
        defer { c.streams.pacer.stopAndJoin() }
        let pcm = [Int16](repeating: 1000, count: 48_000)
        for (s, slot) in streams {
            let due = try pcm.withUnsafeBufferPointer { p in
                try slot.lock.withLock { () -> UInt64? in
                    try s.feed(p.baseAddress!, frames: pcm.count, channels: 1, clock: MonotonicClock.nanoseconds)
                    return s.deadline
                }
            }
            c.streams.rescheduled(due)
        }
        usleep(100_000)
        let (busy, busySlot) = streams[0], (other, otherSlot) = streams[1]
        let sent = { otherSlot.lock.withLock { other.packetsSent } }
        let before = sent()
        busySlot.lock.lock()
        usleep(200_000)
        let during = sent() - before
        busySlot.lock.unlock()
        usleep(100_000)
        print("frames of the other stream sent while one stream's lock was held for 200 ms: \(during); "
              + "the held stream sent \(busySlot.lock.withLock { busy.packetsSent }) in all")
        XCTAssertGreaterThanOrEqual(during, 7, "the sender thread waited for the stream being fed")
        XCTAssertGreaterThanOrEqual(busySlot.lock.withLock { busy.packetsSent }, 15, "the held stream catches up once released")
    }

    func testABlockFedInPiecesIsOneBlock() throws {
        // A host that feeds each block as several calls right after each other (a ring
        // buffer's wrap, a loop over its callback's buffer): not late between blocks, the
        // slack stays the least, no talkspurt is cut.
        for (us, pieces) in [(40_000, 2), (20_000, 2), (20_000, 960), (10_000, 4), (30_000, 3)] {
            let r = try play((0..<60).map { k in (t0 + UInt64(k * us) * 1000, us) }, pieces: pieces)
            XCTAssertEqual(r.cuts, 0, "\(us / 1000) ms blocks in \(pieces) calls")
            XCTAssertEqual(r.slot.lock.withLock { r.s.drySlackNs }, LocalStream.minDrySlackNs, "\(us / 1000) ms blocks in \(pieces) calls")
        }
    }

    func testAShortPauseOrAFlushDoesNotSetTheSlack() throws {
        // 20 ms blocks, then one comes 30 ms late (or after a 30 ms pause: alike): it is
        // learned, at most twice the slack, not the whole 30 ms at once.
        let r = try play(blocks(0..<40, every: 20_000) { k in k < 20 ? 0 : 30_000 })
        XCTAssertEqual(r.cuts, 1)
        let slack = r.slot.lock.withLock { r.s.drySlackNs }
        XCTAssertGreaterThan(slack, LocalStream.minDrySlackNs, "learned")
        XCTAssertLessThanOrEqual(slack, 15_000_000, "learned 10 ms at most (twice the least slack), × 1.5")
        // A flush (barge-in), then feeding 30 ms later: not late against the flushed audio.
        let f = try play(blocks(0..<20, every: 20_000))
        f.slot.lock.withLock { f.s.flush() }
        try feed(f.s, f.slot, ms: 20, at: t0 + 430 * ms)
        XCTAssertEqual(f.slot.lock.withLock { f.s.drySlackNs }, LocalStream.minDrySlackNs)
        // Empty calls between blocks are no blocks.
        var withEmpty: [(at: UInt64, us: Int)] = []
        for b in blocks(0..<40, every: 20_000) { withEmpty += [b, (b.at + 5 * ms, 0)] }
        let e = try play(withEmpty)
        XCTAssertEqual(e.cuts, 0)
        XCTAssertEqual(e.slot.lock.withLock { e.s.drySlackNs }, LocalStream.minDrySlackNs)
    }

    func testAHostSlowerThanRealTimeSkipsAFrameTimeEachFrameItFallsBehind() throws {
        // 20 ms blocks every 21 ms (a feed-then-sleep loop 5 % slow) for 20 s: the
        // talkspurt goes on, and each time the host has fallen a whole frame behind (by
        // the least lateness over the last 10 to 20 frames) a frame's time is
        // skipped: about one in twenty, so listeners conceal the audio that never came at
        // a known place and its lateness never grows into their jitter estimate.
        let r = try play((0..<950).map { k in (t0 + UInt64(k * 21_000) * 1000, 20_000) })
        let skipped = r.slot.lock.withLock { r.s.framesSkipped }
        print("5 % slow host, 950 blocks: \(skipped) frame times skipped, \(r.cuts) cuts")
        XCTAssertEqual(r.cuts, 0)
        XCTAssertGreaterThanOrEqual(skipped, 44)
        XCTAssertLessThanOrEqual(skipped, 48)
        // Then 2 s in one call: paced from where the host is, not from a schedule it fell
        // 950 ms behind (whose first 47 frames would all be due at once).
        try feed(r.s, r.slot, ms: 2000, at: t0 + 950 * 21 * ms)
        XCTAssertGreaterThanOrEqual(r.slot.lock.withLock { r.s.queuedFrames }, 97, "a burst of frames")
        // A host in real time skips nothing: however jittery its blocks; at another rate
        // (the resampler's start-up delay leaves every frame a constant block later
        // than the first partial frame's time: not growth); after one stall, keeping
        // its new phase; with a stretch of late blocks shorter than a window.
        let j = try play(blocks(0..<400, every: 20_000) { k in (k % 3) * 9_000 })
        XCTAssertEqual(j.slot.lock.withLock { j.s.framesSkipped }, 0, "jittery blocks")
        for (rate, us) in [(44100, 10_000), (16000, 5_000), (24000, 20_000)] {
            let r = try play(blocks(0..<(10_000_000 / us), every: us), rate: rate)
            XCTAssertEqual(r.slot.lock.withLock { r.s.framesSkipped }, 0, "\(rate) Hz in \(us / 1000) ms blocks")
        }
        let stall = try play(blocks(0..<400, every: 20_000) { k in k < 100 ? 0 : 30_000 })
        XCTAssertEqual(stall.slot.lock.withLock { stall.s.framesSkipped }, 0, "one stall")
        for shift in [21_000, 25_000] {   // 10 ms blocks: the talkspurt rides the stall out
            let r = try play(blocks(0..<800, every: 10_000) { k in k < 200 ? 0 : shift })
            XCTAssertEqual(r.slot.lock.withLock { r.s.framesSkipped }, 0, "one \(shift / 1000) ms stall, 10 ms blocks")
        }
        let stretch = try play(blocks(0..<400, every: 20_000) { k in (100..<115).contains(k) ? 25_000 : 0 })
        XCTAssertEqual(stretch.slot.lock.withLock { stretch.s.framesSkipped }, 0, "15 late blocks")
        // Frames fed ahead and sent late by the sender (its thread held off) are not the
        // host's lateness.
        let c = try VoiceClient()
        let (f, fslot) = try discardingStream(on: c)
        c.setInputMode(.continuous)
        try feed(f, fslot, ms: 5000, at: t0)
        pump(f, fslot, until: t0 + 1000 * ms)
        fslot.lock.withLock { f.pump(now: t0 + 1450 * ms) }   // held off 450 ms: what was due goes at once
        pump(f, fslot, until: t0 + 6000 * ms)
        XCTAssertEqual(fslot.lock.withLock { f.framesSkipped }, 0, "a held-off sender thread")
    }

    func testARealTimeHostWhosePeriodsVaryByASampleSkipsNothing() throws {
        // Device-like 20 ms periods of 959-961 samples (a converter's output), each fed
        // when its audio has passed plus 0-5 ms of scheduling jitter, for 60 s; and exact
        // 960-sample periods but one of 959 and one of 961. Per completed frame, a
        // sample's shift moved the lateness by a whole frame (the frame completes a
        // period later) and jitter then took it for growth: a skip, then every frame held.
        var seed: UInt64 = 12345
        func next(_ n: UInt64) -> UInt64 {
            seed = seed &* 6364136223846793005 &+ 1442695040888963407
            return (seed >> 33) % n
        }
        for varying in [true, false] {
            let c = try VoiceClient()
            let (s, slot) = try discardingStream(on: c)
            c.setInputMode(.continuous)
            var position = 0   // samples fed
            var maxLeft = 0, cuts = 0
            for k in 0..<3000 {
                let n = varying ? 959 + Int(next(3)) : (k == 100 ? 959 : k == 1000 ? 961 : 960)
                position += n
                let at = t0 + UInt64(position) * 1_000_000_000 / 48000 + next(5_000_000)
                pump(s, slot, until: at)
                if k > 0 && slot.lock.withLock({ s.deadline }) == nil { cuts += 1 }
                try feed(s, slot, samples: n, at: at)
                if k > 100 { maxLeft = max(maxLeft, slot.lock.withLock { s.queuedFrames }) }
            }
            let skipped = slot.lock.withLock { s.framesSkipped }
            XCTAssertEqual(skipped, 0, varying ? "959-961 sample periods" : "one 959 and one 961")
            XCTAssertEqual(cuts, 0)
            XCTAssertLessThanOrEqual(maxLeft, 1, "frames held back")
        }
    }

    func testSkipsForAVerySlowHostAreSpreadOut() throws {
        // 10 % slow: a frame behind every 10 frames. Each skip is one concealed frame at
        // every listener: never two in a row (at most one in five frames).
        let c = try VoiceClient()
        let (s, slot) = try discardingStream(on: c)
        c.setInputMode(.continuous)
        var skipsAt: [Int] = []
        for k in 0..<1500 {
            let at = t0 + UInt64(k) * 22 * ms
            pump(s, slot, until: at)
            let before = slot.lock.withLock { s.framesSkipped }
            try feed(s, slot, ms: 20, at: at)
            if slot.lock.withLock({ s.framesSkipped }) > before { skipsAt.append(k) }
        }
        let gaps = zip(skipsAt, skipsAt.dropFirst()).map { $1 - $0 }
        print("10 % slow host: \(skipsAt.count) skips in 1500 blocks, least gap \(gaps.min() ?? 0) blocks")
        XCTAssertGreaterThanOrEqual(skipsAt.count, 120, "150 frames behind over 33 s")
        XCTAssertGreaterThanOrEqual(gaps.min() ?? 99, 5)
    }
}
