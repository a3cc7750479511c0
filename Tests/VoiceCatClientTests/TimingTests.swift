// What a listener hears in the ordinary ways hosts feed audio (issue #9): through the
// public client API, a real server on loopback, real Opus, the seeded impairment
// proxy. Judged by counts (concealed frames, talk events, packets) and alignment,
// with margins for a shared 2-core machine, not by wall-clock assertions.
import Foundation
import VoiceCatAudio
@testable import VoiceCatClient
import VoiceCatProtocol
import VoiceCatServerCore
import VoiceCatSimulation
import VoiceCatSystem
import VoiceCatTestSupport
import XCTest

/// Counts how often a thread that sleeps 5 ms at a time wakes more than 15 ms late:
/// how often this (shared) machine stalls the threads a real-time test depends on.
final class StallProbe: @unchecked Sendable {
    private let lock = NSLock()
    private var stalls: [Int] = []
    private var running = true
    private var thread: Thread?

    func start() {
        let t = Thread { [self] in
            while lock.withLock({ running }) {
                let before = MonotonicClock.nanoseconds()
                usleep(5000)
                let late = Int((MonotonicClock.nanoseconds() - before) / 1_000_000) - 5
                if late > 15 { lock.withLock { stalls.append(late) } }
            }
        }
        thread = t
        t.start()
    }

    /// Stops the probe; the stalls it saw, in ms.
    func stop() -> [Int] {
        lock.withLock { running = false }
        usleep(20_000)
        return lock.withLock { stalls }
    }
}

final class TimingTests: XCTestCase {
    var server: TestServer!
    var clients: [VoiceClient] = []

    override func setUpWithError() throws { server = try TestServer() }

    override func tearDown() {
        for c in clients { c.shutdown() }
        clients = []
        server.stop()
    }

    func client(_ name: String, channel: String, port: UInt16? = nil) throws -> VoiceClient {
        var cfg = ClientConfig()
        cfg.keepaliveMs = 1000
        cfg.externalPlayback = true
        let c = try VoiceClient(config: cfg)
        clients.append(c)
        try c.connect(host: "127.0.0.1", port: port ?? server.port, username: name, password: nil, pinnedFingerprint: nil,
                      timeoutMs: 3000)
        try c.joinChannel(channel)
        return c
    }

    /// alex publishing a continuous MIC stream that sam, in the same channel, receives
    /// (through `listenerPort`, an impairment proxy, when given).
    func talkerAndListener(suffix: String = "", listenerPort: UInt16? = nil) throws -> (alex: VoiceClient, sam: VoiceClient, sid: UInt32, ssrc: UInt32) {
        let alex = try client("alex" + suffix, channel: "Lobby")
        let sam = try client("sam" + suffix, channel: "Lobby", port: listenerPort)
        alex.setInputMode(.continuous)
        let sid = try alex.startStream(kind: .mic, externalFeed: true, channels: 1)
        let ssrc = try XCTUnwrap(alex.ssrc(ofStream: sid))
        try sam.waitForRemote(ssrc: ssrc)
        return (alex, sam, sid, ssrc)
    }

    func feed(_ c: VoiceClient, _ sid: UInt32, _ pcm: ArraySlice<Int16>) throws {
        let a = Array(pcm)
        try a.withUnsafeBufferPointer { try c.feed(streamID: sid, pcm: $0.baseAddress!, frames: a.count, channels: 1) }
    }

    func events(_ c: VoiceClient, ssrc: UInt32) -> (starts: Int, stops: Int) {
        var s = 0, t = 0
        while let e = c.pollEvent(timeoutMs: 0) {
            if e.ssrc == ssrc && e.type == .talkStart { s += 1 }
            if e.ssrc == ssrc && e.type == .talkStop { t += 1 }
        }
        return (s, t)
    }

    /// Records `ssrc`'s own timeline at `listener` (per-speaker sink, background mode):
    /// its blocks' left channel, one after another. The returned function stops the
    /// recording and gives what was heard.
    func recordSpeaker(_ listener: VoiceClient, ssrc: UInt32) throws -> () throws -> [Int16] {
        let lock = NSLock()
        var heard: [Int16] = []
        heard.reserveCapacity(48000 * 10)
        try listener.setSpeakerSink { b in
            guard b.ssrc == ssrc else { return }
            lock.lock()
            for i in 0..<b.frames { heard.append(b.pcm[i * b.channels]) }
            lock.unlock()
        }
        return {
            try listener.setSpeakerSink(nil)
            return lock.withLock { heard }
        }
    }

    /// Where 100 ms windows of `reference` (every `step` samples from 0.5 s on) sit in
    /// `heard`, counted from a little before its first sound: the lag in samples, -1
    /// where a window is not found.
    func lags(of reference: [Int16], in heard: [Int16], step: Int) -> [Int] {
        let onset = heard.firstIndex { abs(Int($0)) > 100 } ?? 0
        let out = Array(heard[max(0, onset - 4800)...])
        return stride(from: 24_000, to: reference.count - 9600, by: step).map { w in
            let r = Signal.align(input: reference, output: out, maxLag: 48 * 300, window: w..<(w + 4800))
            return r.ncc > 0.7 ? r.lag : -1
        }
    }

    /// Ten 2 s talkspurts with 1 s pauses, on a clean loopback, two ways at once:
    /// alex pauses feeding (a TTS bot between sentences); bob feeds all the time and
    /// pushes to talk. Nothing is concealed, each talkspurt keeps one alignment, the
    /// pauses leave the target at its clean value, talk events follow the talkspurts.
    func testTalkspurtsWithPausesOnACleanPathPlayWithoutConcealment() throws {
        let alex = try client("alex", channel: "Lobby")
        let sam = try client("sam", channel: "Lobby")
        let bob = try client("bob", channel: "Music")
        let kim = try client("kim", channel: "Music")
        alex.setInputMode(.continuous)
        bob.setInputMode(.pushToTalk)
        let aSid = try alex.startStream(kind: .mic, externalFeed: true, channels: 1)
        let bSid = try bob.startStream(kind: .mic, externalFeed: true, channels: 1)
        let aSSRC = try XCTUnwrap(alex.ssrc(ofStream: aSid)), bSSRC = try XCTUnwrap(bob.ssrc(ofStream: bSid))
        try sam.waitForRemote(ssrc: aSSRC)
        try kim.waitForRemote(ssrc: bSSRC)
        while sam.pollEvent(timeoutMs: 0) != nil {}
        while kim.pollEvent(timeoutMs: 0) != nil {}
        let samRec = SinkRecorder(), kimRec = SinkRecorder()
        try sam.setSink { samRec.take($0, $1) }
        try kim.setSink { kimRec.take($0, $1) }

        let spurts = 10, spurtSamples = 96_000, pauseSamples = 48_000
        // This machine is shared: a thread can be descheduled for tens of ms. What is
        // seen of it, outside the library: a probe thread's stalls, and this thread
        // waking from its sleep more than 15 ms after a block's time (the host was late:
        // those frames are late on the wire), each counted once per episode; the time
        // spent inside feed is the library's and excuses nothing. A frame concealed or a
        // talkspurt realigned is excused where one of those was seen, and twice (of
        // 1,000 frames) for shorter stalls nobody can see. (Sink blocks more than 40 ms
        // apart are printed, not excused: the render thread is the library's.)
        let probe = StallProbe()
        probe.start()
        let speech = Signal.glidingVoice(seconds: 2, amplitude: 0.3)
        var spurtStartNs: [UInt64] = []
        var targets: [UInt32] = []
        var lateWakes = 0               // episodes of waking over 15 ms after a block's time
        var lateBefore = false
        var spurtFedLate = [Bool](repeating: false, count: spurts)   // woke over 5 ms late in it (past the least dry slack)
        usleep(200_000)
        let start = MonotonicClock.nanoseconds()
        var k: UInt64 = 0
        for spurt in 0..<(spurts * 3) {         // 20 ms blocks × 50 = 1 s per step: talk, talk, pause
            let talking = spurt % 3 != 2
            let offsetInSpurt = (spurt % 3) * 48_000
            if spurt % 3 == 0 { spurtStartNs.append(MonotonicClock.nanoseconds()); bob.setPushToTalk(true) }
            if !talking { bob.setPushToTalk(false) }
            for b in 0..<50 {
                let block = talking ? speech[(offsetInSpurt + b * 960)..<(offsetInSpurt + b * 960 + 960)]
                                    : ArraySlice(repeating: 0, count: 960)
                if talking { try feed(alex, aSid, block) }     // alex pauses feeding; bob never does
                try feed(bob, bSid, talking ? block : ArraySlice(Signal.glidingVoice(seconds: 0.02, amplitude: 0.3)))
                k += 960
                let due = start + k * 1_000_000_000 / 48000
                let now = MonotonicClock.nanoseconds()
                if due > now {
                    usleep(UInt32((due - now) / 1000))
                    let woke = MonotonicClock.nanoseconds()
                    let late = woke > due + 15_000_000
                    if late && !lateBefore { lateWakes += 1 }
                    lateBefore = late
                    if woke > due + 5_000_000 && talking { spurtFedLate[spurt / 3] = true }
                } else {
                    lateBefore = false
                }
                if spurt % 3 == 0 && b == 20 { targets.append(try sam.streamStats(ssrc: aSSRC).targetDepthMs) }
            }
        }
        usleep(600_000)
        let probeStalls = probe.stop()
        try sam.setSink(nil)
        try kim.setSink(nil)
        _ = pauseSamples
        print("scheduling stalls seen: the probe's over 15 ms \(probeStalls.count) (longest \(probeStalls.max() ?? 0) ms), "
              + "this thread waking over 15 ms late \(lateWakes) times, talkspurts with a wake over 5 ms late "
              + "\(spurtFedLate.filter { $0 }.count); sink blocks over 40 ms apart (not excused): sam \(samRec.renderStalls), "
              + "kim \(kimRec.renderStalls)")
        let stalls = probeStalls.count + lateWakes

        for (who, c, ssrc) in [("alex → sam (fed pauses)", sam, aSSRC), ("bob → kim (push-to-talk)", kim, bSSRC)] {
            let st = try c.streamStats(ssrc: ssrc)
            let ev = events(c, ssrc: ssrc)
            print("\(who): received \(st.jitter.packetsReceived), concealed \(st.jitter.plcFrames), fec \(st.jitter.fecRecovered), "
                  + "late \(st.jitter.late), underruns \(st.jitter.underruns), waited \(st.jitter.waited), skipped \(st.jitter.skipped), "
                  + "target \(st.targetDepthMs) ms, talkspurts played \(st.jitter.talkspurts), "
                  + "talk start/stop \(ev.starts)/\(ev.stops)")
            XCTAssertEqual(ev.starts, spurts, "\(who): one TALK_START per talkspurt")
            XCTAssertEqual(ev.stops, spurts, "\(who): one TALK_STOP per talkspurt")
            if Sanitizers.thread { continue }   // real-time quality: the normal build judges it
            XCTAssertLessThanOrEqual(Int(st.jitter.plcFrames), 3 * stalls + 2, "\(who): frames concealed on a clean path")
            XCTAssertLessThanOrEqual(Int(st.jitter.late), stalls + 1, "\(who): late frames on a clean path")
            if stalls == 0 { XCTAssertLessThanOrEqual(st.targetDepthMs, 60, "\(who): the pauses raised the target") }
        }
        print("alex → sam: talkspurts played \(try sam.streamStats(ssrc: aSSRC).jitter.talkspurts) for \(spurts) fed")
        print("alex → sam: target 400 ms into each talkspurt: \(targets)")
        // Real-time quality too (the target follows the render thread's timing, which a
        // ThreadSanitizer build slows and stalls): the normal build judges it.
        if stalls == 0 && !Sanitizers.thread {
            XCTAssertTrue(targets.dropFirst().allSatisfy { $0 <= 60 }, "a fed pause left the target raised: \(targets)")
        }

        // One alignment per talkspurt: where the start and the end of each talkspurt
        // sit in sam's output (the sink's timeline) differ by less than a millisecond.
        let (out, _, t0) = samRec.snapshot
        var spread: [Int] = []
        for s in 0..<spurts {
            let base = Int(Int64(spurtStartNs[s]) - Int64(t0)) * 48 / 1_000_000
            func lag(_ at: Int) -> Int? {
                let from = base + at
                guard from >= 0, from + 4800 + 48 * 200 < out.count else { return nil }
                let seg = Array(out[from..<(from + 4800 + 48 * 200)])
                let r = Signal.align(input: Array(speech[at..<(at + 4800)]), output: seg, maxLag: 48 * 200, window: 0..<4800)
                return r.ncc > 0.8 ? r.lag : nil
            }
            if let a = lag(9600), let b = lag(spurtSamples - 9600) { spread.append(abs(a - b)) } else { spread.append(-1) }
        }
        print("alex → sam: alignment change within each talkspurt (samples, -1: not found): \(spread)")
        if Sanitizers.thread { return }
        XCTAssertGreaterThanOrEqual(spread.filter { $0 >= 0 }.count, spurts - 1, "talkspurts not found in the output")
        // A talkspurt in which this thread woke later than the sender's least dry slack
        // (5 ms) may have been split by the sender (it ends a talkspurt whose queue ran
        // dry, as it must for a host that stopped feeding) and played with a new
        // alignment: only such a talkspurt's realignment is excused for it.
        let realigned = spread.indices.filter { spread[$0] > 48 }
        let unexplained = realigned.filter { !spurtFedLate[$0] }
        XCTAssertLessThanOrEqual(unexplained.count, stalls + 2,
                                 "talkspurts changed their alignment: \(spread) (those with a late wake: \(spurtFedLate))")
    }

    /// Sink mode: the mixer thread moves its ticks to the talkers' frames (RenderPhase)
    /// and keeps its promise to the host: never more than two blocks ahead of a steady
    /// schedule, whatever the talkers' phases do, and nothing concealed for it. Two
    /// talkers take turns, each talkspurt fed at another phase (7 ms further on).
    func testTheSinksTicksFollowTheTalkersAndStayInRealTime() throws {
        try sinkTicksFollowTheTalkers(channel: "Lobby", blockMs: 20)
    }

    /// The same on a channel of 10 ms frames with 10 ms sink blocks
    /// (vc_set_mixed_output_block_ms): every call carries 10 ms, the ticks follow the
    /// 10 ms frames, and the thread stays within two blocks (20 ms) ahead.
    func testTenMillisecondBlocksFollowTenMillisecondFrames() throws {
        server.stop()
        var ten = AudioConfig.speech
        ten.frameMicros = 10_000
        server = try TestServer { $0.channels = [ChannelConfig(name: "Lobby10", audio: ten)] }
        try sinkTicksFollowTheTalkers(channel: "Lobby10", blockMs: 10)
    }

    /// The block changes between 20 and 10 ms in the middle of talkspurts
    /// (vc_set_mixed_output_block_ms while the mixer thread runs): each new thread
    /// takes over the old one's schedule (no block comes early for it), nothing is
    /// concealed for it, and the half frame a 10 ms block leaves of a 20 ms frame is
    /// gone once the talker pauses.
    func testTheBlockChangesWhileTalkersTalk() throws {
        try sinkTicksFollowTheTalkers(channel: "Lobby", blockMs: 20, switchBlocks: true)
    }

    /// `switchBlocks`: the block alternates between `blockMs` and 10 ms, changed 15
    /// frames into each talkspurt.
    func sinkTicksFollowTheTalkers(channel: String, blockMs: Int, switchBlocks: Bool = false) throws {
        let alex = try client("alex", channel: channel)
        let bob = try client("bob", channel: channel)
        let sam = try client("sam", channel: channel)
        try sam.setMixedOutputBlock(ms: blockMs)
        alex.setInputMode(.continuous)
        bob.setInputMode(.continuous)
        let aSid = try alex.startStream(kind: .mic, externalFeed: true, channels: 1)
        let bSid = try bob.startStream(kind: .mic, externalFeed: true, channels: 1)
        let aSSRC = try XCTUnwrap(alex.ssrc(ofStream: aSid)), bSSRC = try XCTUnwrap(bob.ssrc(ofStream: bSid))
        try sam.waitForRemote(ssrc: aSSRC)
        try sam.waitForRemote(ssrc: bSSRC)
        // Each sink call's time and frames, from the mixer thread (preallocated; read
        // after the sink is cleared).
        let capacity = 2000
        let times = UnsafeMutablePointer<UInt64>.allocate(capacity: capacity)
        defer { times.deallocate() }
        let sizes = UnsafeMutablePointer<Int>.allocate(capacity: capacity)
        defer { sizes.deallocate() }
        let count = UnsafeMutablePointer<Int>.allocate(capacity: 1)
        defer { count.deallocate() }
        count.pointee = 0
        nonisolated(unsafe) let t = times, z = sizes, n = count
        try sam.setSink { _, frames in
            if n.pointee < capacity { t[n.pointee] = MonotonicClock.nanoseconds(); z[n.pointee] = frames; n.pointee += 1 }
        }
        let probe = StallProbe()
        probe.start()
        usleep(400_000)     // 20 periods or more before anyone talks: the schedule's base
        let speech = Signal.glidingVoice(seconds: 0.6, amplitude: 0.3)
        let spurts = 8
        for spurt in 0..<spurts {
            let (c, sid) = spurt % 2 == 0 ? (alex, aSid) : (bob, bSid)
            usleep(UInt32(7_000 * spurt % 20_000))
            let start = MonotonicClock.nanoseconds()
            for b in 0..<30 {
                if switchBlocks && b == 15 {
                    // From a thread of its own: the change waits for the mixer thread,
                    // and the feeder must keep real time.
                    let ms = spurt % 2 == 0 ? 10 : blockMs
                    Thread.detachNewThread { do { try sam.setMixedOutputBlock(ms: ms) } catch { XCTFail("\(error)") } }
                }
                try feed(c, sid, speech[(b * 960)..<(b * 960 + 960)])
                let due = start + UInt64(b + 1) * 20_000_000
                let now = MonotonicClock.nanoseconds()
                if due > now { usleep(UInt32((due - now) / 1000)) }
            }
            usleep(300_000)
        }
        let stalls = probe.stop().count
        try sam.setSink(nil)
        let calls = count.pointee
        XCTAssertGreaterThan(calls, 300 * 20 / blockMs, "the sink was called every \(blockMs) ms")
        XCTAssertEqual(Set((0..<calls).map { sizes[$0] }), switchBlocks ? [480, blockMs * 48] : [blockMs * 48],
                       "every call carries one block")
        // d_k = call k − the audio of the calls before it: constant for a steady
        // schedule, lower by the lead. Wake-up delays and stalls only raise it, so the
        // base is the least of the first quiet blocks (nothing moves before anyone talks).
        var audioNs: Int64 = 0
        let d = (0..<calls).map { k -> Double in
            defer { audioNs += Int64(sizes[k]) * 1_000_000 / 48 }
            return Double(Int64(times[k]) - audioNs) / 1e6
        }
        let base = d[5..<20].min()!
        let lead = d.map { base - $0 }
        print("sink schedule (\(blockMs) ms blocks): \(calls) calls, largest lead \(lead.max()!) ms, least \(lead.min()!) ms, stalls seen \(stalls)")
        XCTAssertLessThanOrEqual(lead.max()!, Double(2 * blockMs + 2), "the sink ran more than two blocks ahead of its schedule")
        for ssrc in [aSSRC, bSSRC] {
            let st = try sam.streamStats(ssrc: ssrc)
            print("ssrc \(ssrc): received \(st.jitter.packetsReceived), concealed \(st.jitter.plcFrames), late \(st.jitter.late), "
                  + "talkspurts \(st.jitter.talkspurts), target \(st.targetDepthMs) ms")
            if Sanitizers.thread { continue }
            XCTAssertLessThanOrEqual(Int(st.jitter.plcFrames), 3 * stalls + 2, "frames concealed on a clean path")
            // Each talker fed spurts / 2 talkspurts in 20 ms blocks at real time: none of
            // them may be cut where a block comes (on 10 ms frames a block is two frames,
            // and a sender that did not wait its slack for the next one cut them).
            // One cut is excused (a feeder wake over 5 ms late that the 15 ms probe did not see).
            XCTAssertLessThanOrEqual(Int(st.jitter.talkspurts), spurts / 2 + stalls + 1, "talkspurts cut while the host fed in real time")
        }
        if !Sanitizers.thread && stalls == 0 {
            // Either way: with 10 ms blocks the talkers' phases are never more than 5 ms
            // off, and as many moves go later as earlier.
            XCTAssertGreaterThan(lead.max()! - lead.min()!, 3, "the ticks never moved towards the talkers' frames")
        }
        if switchBlocks {
            // After the last pause nothing is left of a frame: a stream's buffer and
            // FIFO are empty (a half frame left would read 10 ms).
            for ssrc in [aSSRC, bSSRC] { XCTAssertEqual(try sam.streamStats(ssrc: ssrc).currentDepthMs, 0, "ssrc \(ssrc)") }
        }
    }

    /// A host feeding 5 s of speech in one call is heard whole, at real time.
    func testFiveSecondsFedInOneCallAreHeardWholeAtRealTime() throws {
        let (alex, sam, sid, ssrc) = try talkerAndListener()
        let rec = SinkRecorder()
        try sam.setSink { rec.take($0, $1) }
        usleep(100_000)
        let input = Signal.glidingVoice(seconds: 5, amplitude: 0.3)
        let fedAt = MonotonicClock.nanoseconds()
        try feed(alex, sid, input[...])
        let queued = try alex.queuedMs(streamID: sid)
        XCTAssertGreaterThan(queued, 4500, "the file is queued, not sent at once")
        try alex.drain(streamID: sid, timeoutMs: 10_000)
        let drainedAfterMs = Double(MonotonicClock.nanoseconds() - fedAt) / 1e6
        usleep(500_000)
        try sam.setSink(nil)
        let st = try sam.streamStats(ssrc: ssrc)
        print("5 s fed in one call: \(queued) ms queued, drained after \(Int(drainedAfterMs)) ms; received \(st.jitter.packetsReceived), "
              + "late \(st.jitter.late), concealed \(st.jitter.plcFrames), skipped \(st.jitter.skipped)")
        XCTAssertGreaterThanOrEqual(st.jitter.packetsReceived, 250)
        // Paced at real time: a listener drops next to nothing (a loaded machine may
        // delay a handful of frames past their time; 2 % is the allowance).
        XCTAssertLessThanOrEqual(st.jitter.late + st.jitter.skipped, 5)
        XCTAssertGreaterThan(drainedAfterMs, 4500, "sent faster than real time")
        // Heard whole: every 100 ms window of the 5 s is in the output.
        let (out, _, t0) = rec.snapshot
        let offset = max(0, Int(Int64(fedAt) - Int64(t0)) * 48 / 1_000_000)
        let shifted = Array(out[min(offset, out.count)...])
        var nccs: [Double] = []
        for w in stride(from: 0, to: 240_000 - 4800, by: 4800) {
            nccs.append(Signal.align(input: input, output: shifted, maxLag: 48 * 300, window: w..<(w + 4800)).ncc)
        }
        let heard = nccs.filter { $0 > 0.7 }.count   // a lost or concealed window falls far below
        print("5 s fed in one call: \(heard) of \(nccs.count) 100 ms windows heard; NCC per window \(nccs.map { (($0 * 100).rounded()) / 100 })")
        XCTAssertGreaterThanOrEqual(heard, nccs.count - 1)
    }

    /// A host feeding a whole file at another rate than 48 kHz (espeak-ng writes 22050
    /// Hz) is heard with one alignment from start to end, nothing dropped. Resampling
    /// 8 s in the feed call takes tens of ms; the talkspurt was anchored at the call's
    /// start, so its first frame left that much late against the rest, every listener
    /// held the difference as extra delay and shed it by dropping a frame of speech
    /// (one to three per file, "late", at frames 100, 200, 300). And the file's padded
    /// last frame left a dry slack late, as if the host could still feed (at 192 kHz a
    /// concealed frame before it, every run; DryQueueTests pins that rule).
    func testAWholeFileAtAnotherRateIsHeardWithOneAlignment() throws {
        for (rate, seconds) in [(22050, 8.0), (192_000, 6.0)] {
            let alex = try client("alex-\(rate)", channel: "Lobby")
            let sam = try client("sam-\(rate)", channel: "Lobby")
            alex.setInputMode(.continuous)
            let sid = try alex.startStream(kind: .mic, externalFeed: true, channels: 1, sampleRate: rate)
            let ssrc = try XCTUnwrap(alex.ssrc(ofStream: sid))
            try sam.waitForRemote(ssrc: ssrc)
            let stopRecording = try recordSpeaker(sam, ssrc: ssrc)
            usleep(100_000)
            let probe = StallProbe()
            probe.start()
            let input = Signal.glidingVoice(seconds: seconds, amplitude: 0.3, rate: rate)
            let reference = Signal.glidingVoice(seconds: seconds, amplitude: 0.3)   // the same sound at 48 kHz
            try input.withUnsafeBufferPointer { try alex.feed(streamID: sid, pcm: $0.baseAddress!, frames: input.count, channels: 1) }
            try alex.drain(streamID: sid, timeoutMs: 15_000)
            usleep(500_000)
            let stalls = probe.stop().count
            let heard = try stopRecording()
            let st = try sam.streamStats(ssrc: ssrc)
            let lags = lags(of: reference, in: heard, step: 48_000)
            print("\(seconds) s at \(rate) Hz fed in one call: received \(st.jitter.packetsReceived), late \(st.jitter.late), "
                  + "concealed \(st.jitter.plcFrames), skipped \(st.jitter.skipped), scheduling stalls \(stalls); "
                  + "lag each second (samples): \(lags)")
            XCTAssertGreaterThanOrEqual(Int(st.jitter.packetsReceived), Int(seconds * 50))
            let found = lags.filter { $0 >= 0 }
            XCTAssertGreaterThanOrEqual(found.count, lags.count - 1, "\(rate) Hz: the file is not heard whole: \(lags)")
            defer { alex.shutdown(); sam.shutdown() }   // the next rate's pair runs alone
            if Sanitizers.thread { continue }   // real-time quality: the normal build judges it
            // One dropped frame and one concealed frame are excused for a stall nobody
            // saw (this machine is shared: a render thread held back while the probe ran
            // sees a period of excess cushion and sheds one frame; CI once saw "late 1,
            // skipped 1, stalls 0" at 192 kHz, the lag one frame earlier from then on).
            // The defect this guards dropped a frame every 100 (3 in this file).
            // DryQueueTests checks the file's last frame leaves on time.
            let dropped = Int(st.jitter.skipped)
            XCTAssertLessThanOrEqual(Int(st.jitter.late), stalls + 1, "\(rate) Hz: frames late on a clean path")
            XCTAssertLessThanOrEqual(dropped, stalls + 1, "\(rate) Hz: frames dropped on a clean path")
            XCTAssertLessThanOrEqual(Int(st.jitter.plcFrames), stalls + 1, "\(rate) Hz: frames concealed on a clean path")
            if stalls == 0, let first = found.first {
                // A dropped frame moves the rest of the file earlier (the defect: by 960
                // samples at frames 100, 200, 300); a concealed one, later. The window
                // that holds an excused concealed frame reads its two alignments mixed
                // (CI under TSan: [4811, 4810, 4603, 5772, …]), so it may read early once
                // per concealed frame; the windows after it may not. An excused dropped
                // frame moves every window after it earlier, once.
                let early = found.filter { $0 < first - 48 }.count
                XCTAssertTrue(early <= Int(st.jitter.plcFrames) + dropped * found.count
                              && (found.last! >= first - 48 - 960 * dropped),
                              "\(rate) Hz: a frame of the file was dropped: \(lags)")
                let moves = zip(found, found.dropFirst()).filter { $1 - $0 > 48 }.count
                XCTAssertLessThanOrEqual(moves, Int(st.jitter.plcFrames), "\(rate) Hz: the alignment changed within the file: \(lags)")
            }
        }
    }

    /// A host feeding blocks that are not whole frames in real time (10 ms blocks, as
    /// WebRTC-style audio APIs deliver them, and 30 ms ones, on 20 ms frames) is heard
    /// as one talkspurt with one alignment and nothing concealed. (Each 10 ms block was
    /// taken for the end of the talk: its half frame was padded with silence and sent
    /// with the last-frame flag, so the listener heard every other 10 ms replaced by
    /// silence, one talkspurt per block.)
    func testBlocksThatAreNotWholeFramesAreHeardAsOneTalkspurt() throws {
        for blockMs in [10, 30] {
            let (alex, sam, sid, ssrc) = try talkerAndListener(suffix: "-\(blockMs)")
            let stopRecording = try recordSpeaker(sam, ssrc: ssrc)
            usleep(100_000)
            let probe = StallProbe()
            probe.start()
            let seconds = 4.0
            let speech = Signal.glidingVoice(seconds: seconds, amplitude: 0.3)
            let block = blockMs * 48
            var lateWakes = 0   // this thread woke past the sender's least dry slack (5 ms)
            let start = MonotonicClock.nanoseconds()
            for k in 0..<(speech.count / block) {
                try feed(alex, sid, speech[(k * block)..<((k + 1) * block)])
                let due = start + UInt64((k + 1) * block) * 1_000_000_000 / 48000
                let now = MonotonicClock.nanoseconds()
                if due > now {
                    usleep(UInt32((due - now) / 1000))
                    if MonotonicClock.nanoseconds() > due + 5_000_000 { lateWakes += 1 }
                }
            }
            try alex.drain(streamID: sid, timeoutMs: 5000)
            usleep(400_000)
            let stalls = probe.stop().count + lateWakes
            let heard = try stopRecording()
            let st = try sam.streamStats(ssrc: ssrc)
            let lags = lags(of: speech, in: heard, step: 24_000)
            print("\(blockMs) ms blocks at real time: received \(st.jitter.packetsReceived), talkspurts \(st.jitter.talkspurts), "
                  + "late \(st.jitter.late), concealed \(st.jitter.plcFrames), stalls \(stalls); lag each 0.5 s (samples): \(lags)")
            if !Sanitizers.thread {
                XCTAssertLessThanOrEqual(Int(st.jitter.talkspurts), 1 + stalls, "\(blockMs) ms blocks: the talk was cut")
                // A new stream's first talkspurt plays at once, nothing known of its
                // lateness yet, so a frame a few ms late on this shared machine may be
                // concealed: up to 2 excused (of 200). (30 ms blocks complete one frame or
                // two; the sender holds the talkspurt's start 10 ms so that every frame
                // leaves in its slot. Before it did, every third frame left 10 ms late and
                // the first of those was concealed in 7 of 12 runs.)
                XCTAssertLessThanOrEqual(Int(st.jitter.plcFrames), 2 * stalls + 2, "\(blockMs) ms blocks: frames concealed on a clean path")
                let found = lags.filter { $0 >= 0 }
                XCTAssertGreaterThanOrEqual(found.count, lags.count - 1, "\(blockMs) ms blocks: not heard whole: \(lags)")
                // One alignment, but for what those excused frames explain: the player
                // realigns after an underrun, by up to a period (960 samples) each (a
                // window across the change reads in between: two steps for one move).
                if stalls == 0, let lo = found.min(), let hi = found.max() {
                    let plc = Int(st.jitter.plcFrames)
                    XCTAssertLessThanOrEqual(hi - lo, 48 + 960 * plc, "\(blockMs) ms blocks: the alignment changed: \(lags)")
                    let moves = zip(found, found.dropFirst()).filter { abs($1 - $0) > 48 }.count
                    XCTAssertLessThanOrEqual(moves, 2 * plc, "\(blockMs) ms blocks: the alignment changed: \(lags)")
                }
            }
            alex.shutdown()
            sam.shutdown()
        }
    }

    /// A host slower than real time (10 ms blocks every 10.5 ms: a feed-then-sleep loop
    /// 5 % slow) is heard with a bounded delay: the sender skips a frame's time each
    /// time the host falls a frame behind, and the listener conceals that frame. (Before,
    /// every frame came later than the last and the listener took it for jitter: its
    /// target grew to 148 ms in 6 s here, 200-320 ms over 12 s in a trial, concealing
    /// as often as now; with the skips about 80 ms, the slack the detection needs at
    /// 5 %: against 21 ms for a host in real time.)
    func testAHostSlowerThanRealTimeKeepsTheListenersDelay() throws {
        let (alex, sam, sid, ssrc) = try talkerAndListener(suffix: "-slow")
        let stopRecording = try recordSpeaker(sam, ssrc: ssrc)   // renders in the background
        usleep(100_000)
        let probe = StallProbe()
        probe.start()
        let speech = Signal.glidingVoice(seconds: 6, amplitude: 0.3)
        let start = MonotonicClock.nanoseconds()
        var targets: [UInt32] = []
        for k in 0..<(speech.count / 480) {
            try feed(alex, sid, speech[(k * 480)..<((k + 1) * 480)])
            let due = start + UInt64(k + 1) * 10_500_000
            let now = MonotonicClock.nanoseconds()
            if due > now { usleep(UInt32((due - now) / 1000)) }
            if k % 100 == 99 { targets.append(try sam.streamStats(ssrc: ssrc).targetDepthMs) }
        }
        try alex.drain(streamID: sid, timeoutMs: 5000)
        usleep(300_000)
        let stalls = probe.stop().count
        _ = try stopRecording()
        let st = try sam.streamStats(ssrc: ssrc)
        let skipped = try alex.streams.withStream(sid) { s, _ in s.framesSkipped }
        print("10 ms blocks 5 % slow: frame times skipped \(skipped), received \(st.jitter.packetsReceived), "
              + "talkspurts \(st.jitter.talkspurts), concealed \(st.jitter.plcFrames), late \(st.jitter.late), "
              + "target each second \(targets) ms, stalls \(stalls)")
        XCTAssertGreaterThanOrEqual(skipped, 10, "the host fell 15 frames behind")
        if Sanitizers.thread || stalls > 0 { return }
        XCTAssertLessThanOrEqual(targets.max() ?? 0, 110, "the listener took the slow host for jitter: \(targets)")
        XCTAssertLessThanOrEqual(Int(st.jitter.plcFrames), Int(skipped) + 5, "concealed beyond the frame times the host never fed")
        XCTAssertLessThanOrEqual(Int(st.jitter.talkspurts), 1)
    }

    /// A host that pulls the mix in large or uneven pieces (vc_read_mixed_pcm with
    /// 4410 frames, about 92 ms; or sizes from 1 to 4410) at real-time pace, from
    /// before anyone talks, takes each piece's audio at once: the jitter buffer keeps
    /// that much in hand from the first talkspurt on, so a 5 s talkspurt on a clean
    /// path plays without a concealed frame (it underran 2-3 times before the buffer
    /// learned it). Pulls of 600 ms and 1 s are kept in hand too (the cushion was
    /// capped at 500 ms: 600 ms pulls concealed 2 frames and lost 2 late).
    func testPullsOfManyBlocksAtOnceConcealNothingOnACleanPath() throws {
        let cases = [("4410 at a time", [4410]), ("1 to 4410", [1, 7, 441, 1000, 3, 4410, 2, 999]),
                     ("28800 at a time", [28800]), ("48000 at a time", [48000])]
        for (k, (label, sizes)) in cases.enumerated() {
            let (alex, sam, sid, ssrc) = try talkerAndListener(suffix: "-\(k)")
            defer { alex.shutdown(); sam.shutdown() }   // the next case's pair runs alone (and its names are free)
            let probe = StallProbe()
            probe.start()
            let input = Signal.glidingVoice(seconds: 5, amplitude: 0.3)
            var out = [Int16](repeating: 0, count: 48000 * 9 * 2)
            var pulled = 0, k = 0
            let t0 = MonotonicClock.nanoseconds()
            var fed = false
            while pulled < 48000 * 7 {
                // The host's audio callback pulls before anyone talks (a talkspurt begun
                // before its largest pull was seen grows its cushion by waiting at it).
                if !fed && pulled >= 24_000 {
                    try feed(alex, sid, input[...])
                    fed = true
                }
                let n = sizes[k % sizes.count]
                k += 1
                try out.withUnsafeMutableBufferPointer { try sam.readMixed(into: $0.baseAddress! + pulled * 2, frames: n) }
                pulled += n
                let due = t0 + UInt64(pulled) * 1_000_000_000 / 48000
                let now = MonotonicClock.nanoseconds()
                if due > now { usleep(UInt32((due - now) / 1000)) }
            }
            let stalls = probe.stop().count
            let st = try sam.streamStats(ssrc: ssrc)
            // (The public late count includes the frames skipped to shed excess delay.)
            let late = Int(st.jitter.late) - Int(st.jitter.skipped)
            print("pulls of \(label): received \(st.jitter.packetsReceived), concealed \(st.jitter.plcFrames), underruns \(st.jitter.underruns), "
                  + "late \(late), skipped \(st.jitter.skipped), waited \(st.jitter.waited), target \(st.targetDepthMs) ms; stalls seen \(stalls)")
            XCTAssertGreaterThanOrEqual(st.jitter.packetsReceived, 250)
            // The floor: the burst's frames plus the one in play (100 ms pulls: 120 ms).
            let burstMs = UInt32((sizes.max()! + 959) / 960 * 20)
            XCTAssertGreaterThanOrEqual(st.targetDepthMs, burstMs + 20, "\(label): the pulls' burst is not kept in hand")
            if Sanitizers.thread { continue }   // real-time quality: the normal build judges it
            XCTAssertLessThanOrEqual(Int(st.jitter.plcFrames), 3 * stalls, "\(label): frames concealed on a clean path")
            XCTAssertLessThanOrEqual(late, stalls, "\(label): late frames on a clean path")
            // A talkspurt starts at a pull with the burst in hand, so with up to a pull
            // more than it needs: that excess is shed by skipping a frame or a few.
            XCTAssertLessThanOrEqual(Int(st.jitter.skipped), 5 + stalls, "\(label): frames skipped")
        }
    }

    /// A host that pulls the mix on its own clock (pull mode, the default bounds) while
    /// a bot feeds each 0.8 s sentence in one call, one every 1.007 s, so each starts 7
    /// ms further on in the pulls' period. The sender ends each talkspurt a slack after
    /// its queue ran dry (it cannot know sooner that no more audio comes), so the end
    /// frame comes a few ms later than the others; nothing of it may be concealed on a
    /// clean loopback, whatever the phase and the pulls' size. Pulls shorter than a
    /// frame start each talkspurt within a pull of its cushion, whatever its phase
    /// (the rest of a silent frame is dropped for it); pulls of a whole frame start it
    /// at the next frame, up to a frame later.
    func testBulkFedSentencesPulledOnAFixedClockStartOnTheirCushionAndConcealNothing() throws {
        for (k, pull) in [960, 240].enumerated() {
            let (alex, sam, sid, ssrc) = try talkerAndListener(suffix: "-\(k)")
            defer { alex.shutdown(); sam.shutdown() }
            while sam.pollEvent(timeoutMs: 0) != nil {}
            let speech = Signal.glidingVoice(seconds: 0.8, amplitude: 0.3)
            let sentences = 9
            let probe = StallProbe()
            probe.start()
            let t0 = MonotonicClock.nanoseconds()
            final class Sent: @unchecked Sendable {
                let lock = NSLock()
                var ns: [UInt64] = []
            }
            let sentNs = Sent()
            let feeder = Thread {
                for n in 0..<sentences {
                    let at = t0 + 300_000_000 + UInt64(n) * 1_007_000_000
                    let now = MonotonicClock.nanoseconds()
                    if at > now { usleep(UInt32((at - now) / 1000)) }
                    sentNs.lock.withLock { sentNs.ns.append(MonotonicClock.nanoseconds()) }
                    try? speech.withUnsafeBufferPointer { try alex.feed(streamID: sid, pcm: $0.baseAddress!, frames: speech.count, channels: 1) }
                }
            }
            feeder.start()
            let total = 48000 * (sentences + 1)
            var out = [Int16](repeating: 0, count: (total + pull) * 2)
            var pulled = 0
            var concealedBy: [UInt64] = []     // the count at the end of each sentence's second
            while pulled < total {
                try out.withUnsafeMutableBufferPointer { try sam.readMixed(into: $0.baseAddress! + pulled * 2, frames: pull) }
                pulled += pull
                if pulled % 48000 < pull && pulled > 48000 { concealedBy.append(try sam.streamStats(ssrc: ssrc).jitter.plcFrames) }
                let due = t0 + UInt64(pulled) * 1_000_000_000 / 48000
                let now = MonotonicClock.nanoseconds()
                if due > now { usleep(UInt32((due - now) / 1000)) }
            }
            let stalls = probe.stop().count
            let st = try sam.streamStats(ssrc: ssrc)
            // Each talkspurt's start in the pulled output (sample i plays at t0 + i / 48
            // ms: the pulls keep real time) less its send time, against the second's.
            let left = stride(from: 0, to: pulled * 2, by: 2).map { out[$0] }
            let onsets = Signal.onsets(left, above: 1000, after: 4800, quietBelow: 8)
            let sent = sentNs.lock.withLock { sentNs.ns }
            var spread = -1.0, mean = -1.0
            if onsets.count == sentences && sent.count == sentences {
                let offsets = (1..<sentences).map { k in Double(onsets[k]) / 48 - Double(Int64(sent[k]) - Int64(t0)) / 1e6 }
                spread = offsets.max()! - offsets.min()!
                mean = offsets.reduce(0, +) / Double(offsets.count)
            }
            print("pulls of \(pull): talkspurt starts found \(onsets.count), after their send times by \(String(format: "%.1f", mean)) ms "
                  + "on average (pulled, not yet played), spread \(String(format: "%.1f", spread)) ms")
            print("pulls of \(pull): received \(st.jitter.packetsReceived), concealed \(st.jitter.plcFrames), late \(st.jitter.late), "
                  + "underruns \(st.jitter.underruns), waited \(st.jitter.waited), target \(st.targetDepthMs) ms, "
                  + "talkspurts \(st.jitter.talkspurts), concealed by each second \(concealedBy); stalls seen \(stalls)")
            if Sanitizers.thread { continue }   // real-time quality: the normal build judges it
            XCTAssertLessThanOrEqual(Int(st.jitter.plcFrames), 3 * stalls, "pulls of \(pull): frames concealed on a clean path")
            XCTAssertLessThanOrEqual(Int(st.jitter.late), stalls, "pulls of \(pull): late frames on a clean path")
            XCTAssertLessThanOrEqual(st.targetDepthMs, 60, "pulls of \(pull): the target on a clean path")
            // (A stall of the feeding thread can split a sentence in two.)
            guard stalls == 0 else { continue }
            XCTAssertEqual(Int(st.jitter.talkspurts), sentences, "pulls of \(pull): one talkspurt per sentence")
            XCTAssertEqual(onsets.count, sentences, "pulls of \(pull): talkspurts found in the output")
            // 5 ms pulls: within a pull and the loopback's jitter (15 ms without the
            // drop: the phases, 7 ms apart, spread over the frame).
            if pull < 960 { XCTAssertLessThan(spread, 10, "pulls of \(pull): where a talkspurt starts moved with its phase") }
        }
    }

    /// DTX: in a pause the talker sends only sparse comfort-noise updates and the
    /// listener plays comfort noise, not digital silence; talk state follows.
    func testDTXPauseSendsComfortNoiseUpdatesAndTheListenerPlaysComfortNoise() throws {
        let alex = try client("alex", channel: "Lobby")   // DTX on
        let sam = try client("sam", channel: "Lobby")
        alex.setInputMode(.continuous)
        let sid = try alex.startStream(kind: .mic, externalFeed: true, channels: 1)
        let ssrc = try XCTUnwrap(alex.ssrc(ofStream: sid))
        try sam.waitForRemote(ssrc: ssrc)
        while sam.pollEvent(timeoutMs: 0) != nil {}
        let rec = SinkRecorder()
        try sam.setSink { rec.take($0, $1) }
        var rng = TraceGenerator.Random(seed: 5)
        let hiss = (0..<(48_000 * 3)).map { _ in Int16((rng.uniform() - 0.5) * 6) }   // far below speech
        let speech = Signal.voiceLike(seconds: 1, amplitude: 0.3)
        // Speech, 3 s of hiss far below speech, speech: one fed talkspurt.
        try feed(alex, sid, (speech + hiss + speech)[...])
        let quietT = MonotonicClock.nanoseconds() + 1_000_000_000
        usleep(2_000_000)   // the encoder has settled into DTX a second into the hiss
        let quietStart = alex.connectionStats().packetsOut
        usleep(1_500_000)
        let quietPackets = alex.connectionStats().packetsOut - quietStart
        try alex.drain(streamID: sid, timeoutMs: 5000)
        usleep(800_000)
        try sam.setSink(nil)
        let ev = events(sam, ssrc: ssrc)
        // The listener's output in the second half of the pause.
        let (out, _, t0) = rec.snapshot
        let from = Int(Int64(quietT) - Int64(t0)) * 48 / 1_000_000 + 72_000
        let pause = out[max(0, from)..<min(out.count, from + 48_000)]
        let nonzero = pause.filter { $0 != 0 }.count
        print("DTX pause of 3 s: \(quietPackets) packets sent in 1.5 s of it; listener output in the pause: \(nonzero) of \(pause.count) samples "
              + "nonzero, RMS \(String(format: "%.1f", Signal.rms(pause))); talk start/stop \(ev.starts)/\(ev.stops)")
        XCTAssertLessThanOrEqual(quietPackets, 8, "a DTX pause sends only sparse updates (75 frames)")
        XCTAssertGreaterThanOrEqual(quietPackets, 2, "comfort-noise updates must be sent")
        XCTAssertGreaterThan(nonzero, pause.count / 2, "the listener played digital silence in a DTX pause")
        XCTAssertLessThan(Signal.rms(pause), 100, "comfort noise is quiet")
        XCTAssertEqual(ev.starts, 2)
        XCTAssertEqual(ev.stops, 2)
    }

    /// While nothing renders the mix (no sink, no pulls, a playback device away) talk
    /// state follows arrivals; a DTX pause's comfort-noise updates are not talk: each
    /// one (every 400 ms) was a TALK_START/STOP pair of its own (helper-86: 5 pairs for 2
    /// talkspurts with a playback device away).
    func testComfortNoiseUpdatesAreNotTalkWhileNothingRenders() throws {
        let alex = try client("alex", channel: "Lobby")   // DTX on
        let sam = try client("sam", channel: "Lobby")     // external playback, never pulled
        alex.setInputMode(.continuous)
        let sid = try alex.startStream(kind: .mic, externalFeed: true, channels: 1)
        let ssrc = try XCTUnwrap(alex.ssrc(ofStream: sid))
        try sam.waitForRemote(ssrc: ssrc)
        while sam.pollEvent(timeoutMs: 0) != nil {}
        var rng = TraceGenerator.Random(seed: 6)
        let hiss = (0..<(48_000 * 3)).map { _ in Int16((rng.uniform() - 0.5) * 6) }
        let speech = Signal.voiceLike(seconds: 1, amplitude: 0.3)
        let before = alex.connectionStats().packetsOut
        try feed(alex, sid, (speech + hiss + speech)[...])
        try alex.drain(streamID: sid, timeoutMs: 8000)
        usleep(800_000)
        let sent = alex.connectionStats().packetsOut - before
        let ev = events(sam, ssrc: ssrc)
        print("nothing renders: \(sent) packets for 1 s + 3 s of DTX + 1 s; talk start/stop \(ev.starts)/\(ev.stops)")
        XCTAssertLessThan(sent, 200, "the pause went out as DTX (250 frames without)")
        XCTAssertEqual(ev.starts, 2)
        XCTAssertEqual(ev.stops, 2)
    }

    /// SCREEN_AUDIO on a channel without DTX stops after 200 ms of digital silence
    /// and resumes with the marker.
    func testZeroGateStopsScreenAudioAfterDigitalSilence() throws {
        let alex = try client("alex", channel: "Music")   // DTX off
        let sid = try alex.startStream(kind: .screenAudio, externalFeed: true, channels: 1)
        let tone = Signal.tone(440, seconds: 1, amplitude: 0.2)
        let zeros = [Int16](repeating: 0, count: 48_000)
        try feed(alex, sid, (tone + zeros + Array(tone[0..<24_000]))[...])
        try alex.drain(streamID: sid, timeoutMs: 5000)
        usleep(150_000)
        // 50 tone frames; 10 frames of zeros, then the 11th flagged last and nothing
        // for the rest of the second; 25 tone frames; the talkspurt's padded last frame.
        XCTAssertEqual(alex.connectionStats().packetsOut, 50 + 11 + 25 + 1)
    }

    /// Through the impairment proxy with the benchmark's network models: late loss
    /// and delay stay within what bench-jitter measures for them (wide margins).
    /// A path that freezes for 300 ms every 5 s and then delivers what it held (a
    /// Wi-Fi scan, a stalled hop), under continuous voice that is never quiet: the
    /// listener conceals each freeze and resumes on its cushion. The backlog played
    /// from its oldest frame stayed as periods of delay, shed a voiced frame at a
    /// time over seconds (docs/benchmarks.md, "A stall's backlog ..."). The freezes
    /// start after 4 s of a clean path: a freeze in a stream's first second is most
    /// of its lateness history, and the target then covers it for seconds (policy:
    /// docs/benchmarks.md).
    /// A clean loopback path through the impairment proxy (5 ms ± 2 ms).
    static let cleanPath: Impairment = { var m = Impairment(); m.baseDelayMs = 5; m.jitterMs = 2; return m }()

    /// A talker feeding `seconds` of voice-like speech to a listener (a sink that
    /// discards) whose path goes through a proxy on `cleanPath`: 7 s fed, 4 s played,
    /// the rest fed; returns then, with the rest still to play.
    func speechThroughProxy(seed: UInt64, suffix: String, seconds: Double) throws
        -> (proxy: ImpairmentProxy, alex: VoiceClient, sam: VoiceClient, ssrc: UInt32) {
        let proxy = try ImpairmentProxy(targetPort: server.port, downstream: TimingTests.cleanPath, seed: seed)
        let (alex, sam, sid, ssrc) = try talkerAndListener(suffix: suffix, listenerPort: proxy.port)
        try sam.setSink { _, _ in }
        let voice = Signal.voiceLike(seconds: seconds, amplitude: 0.3)
        try feed(alex, sid, voice[..<(48000 * 7)])
        usleep(4_000_000)
        try feed(alex, sid, voice[(48000 * 7)...])
        return (proxy, alex, sam, ssrc)
    }

    func testAFrozenPathsBacklogDoesNotStayAsDelay() throws {
        var freezes = TimingTests.cleanPath
        freezes.freezeEveryMs = 5000; freezes.freezeMs = 300
        let (proxy, alex, sam, ssrc) = try speechThroughProxy(seed: 11, suffix: "-fz", seconds: 13)
        defer { proxy.stop() }
        proxy.setImpairment(upstream: Impairment(), downstream: freezes)
        var depths: [UInt32] = [], targets: [UInt32] = []
        for _ in 0..<85 {
            usleep(100_000)
            let s = try sam.streamStats(ssrc: ssrc)
            depths.append(s.currentDepthMs)
            targets.append(s.targetDepthMs)
        }
        try sam.setSink(nil)
        let st = try sam.streamStats(ssrc: ssrc)
        let sorted = depths.sorted()
        let p75 = sorted[sorted.count * 3 / 4], p90 = sorted[sorted.count * 9 / 10]
        print("freezes through the proxy: received \(st.jitter.packetsReceived), late \(st.jitter.late), skipped \(st.jitter.skipped), "
              + "concealed \(st.jitter.plcFrames), buffered ms p75 \(p75) p90 \(p90): \(depths), targets \(targets)")
        XCTAssertGreaterThan(st.jitter.packetsReceived, 550)
        XCTAssertGreaterThanOrEqual(st.jitter.plcFrames, 10, "no freeze came: \(depths)")
        // A freeze comes within the first 5 s of the 8.5 s sampled. Played from its
        // oldest frame, its backlog stayed as delay until the next freeze (the code
        // before: p75 100-120 ms); resumed on the cushion, the depth is the clean
        // path's (0-20 ms).
        XCTAssertLessThanOrEqual(p75, 60, "the backlog stayed as delay: \(depths)")
        XCTAssertLessThanOrEqual(p90, 120, "the backlog stayed as delay: \(depths)")
        alex.shutdown(); sam.shutdown()
    }

    func testAPathThatGetsSlowerLosesNothingItDelayed() throws {
        // The path gets 300 ms slower for 3 s (a congested hop), mid-speech: the
        // stream starves past maxStarvedMs, then the delayed frames come one by one.
        // The clock had passed them while concealing: they were dropped as late
        // (about 9, 180 ms of speech), and their lateness was learned as jitter (the
        // target ~300 ms for seconds). They are played now, and the target stays the
        // clean path's.
        var slow = TimingTests.cleanPath
        slow.baseDelayMs = 305
        let (proxy, alex, sam, ssrc) = try speechThroughProxy(seed: 12, suffix: "-ep", seconds: 12)
        defer { proxy.stop() }
        let before = try sam.streamStats(ssrc: ssrc)
        proxy.setImpairment(upstream: Impairment(), downstream: slow)
        var targets: [UInt32] = []
        for _ in 0..<30 {
            usleep(100_000)
            targets.append(try sam.streamStats(ssrc: ssrc).targetDepthMs)
        }
        // (Measured before the path is fast again: the proxy delays each datagram on
        // its own, so the frames sent after the episode overtake the last delayed
        // ones, which a path that drains a queue would not do.)
        let st = try sam.streamStats(ssrc: ssrc)
        proxy.setImpairment(upstream: Impairment(), downstream: TimingTests.cleanPath)
        usleep(500_000)
        try sam.setSink(nil)
        print("a path 300 ms slower for 3 s: received \(st.jitter.packetsReceived), late \(st.jitter.late - before.jitter.late), "
              + "underruns \(st.jitter.underruns - before.jitter.underruns), skipped \(st.jitter.skipped - before.jitter.skipped), "
              + "concealed \(st.jitter.plcFrames - before.jitter.plcFrames), targets \(targets)")
        XCTAssertGreaterThanOrEqual(st.jitter.underruns - before.jitter.underruns, 1, "the episode did not starve the stream")
        XCTAssertLessThanOrEqual(st.jitter.late - before.jitter.late, 2, "frames the path delayed were dropped as late")
        XCTAssertLessThanOrEqual(targets.max() ?? 0, 150, "the episode was learned as jitter: \(targets)")
        alex.shutdown(); sam.shutdown()
    }

    func testImpairedProfilesStayWithinTheBenchmark() throws {
        var wifi = Impairment()
        wifi.baseDelayMs = 15; wifi.jitterMs = 12; wifi.spikeProbability = 0.01; wifi.spikeMs = 150
        let bursty = { () -> Impairment in var n = Impairment.burstyLoss(percent: 5); n.baseDelayMs = 30; n.jitterMs = 8; return n }()
        // bench-jitter (docs/benchmarks.md): VoiceCat's mean delay and late loss on these traces.
        for (name, net, benchDelayMs, benchLatePct) in [("Wi-Fi", wifi, 81.0, 3.25), ("5 % bursty loss", bursty, 37.4, 0.0)] {
            let proxy = try ImpairmentProxy(targetPort: server.port, downstream: net, seed: 7)
            defer { proxy.stop() }
            let (alex, sam, sid, ssrc) = try talkerAndListener(suffix: "-\(name.count)", listenerPort: proxy.port)
            try sam.setSink { _, _ in }
            let input = Signal.voiceLike(seconds: 8, amplitude: 0.3)
            try feed(alex, sid, input[...])
            var depths: [UInt32] = []
            for _ in 0..<80 {
                usleep(100_000)
                depths.append(try sam.streamStats(ssrc: ssrc).currentDepthMs)
            }
            try sam.setSink(nil)
            let st = try sam.streamStats(ssrc: ssrc)
            let arrived = max(1, st.jitter.packetsReceived)
            let latePct = 100 * Double(st.jitter.late) / Double(arrived)
            let meanDepth = Double(depths.reduce(0, +)) / Double(depths.count)
            print("\(name) through the proxy: received \(st.jitter.packetsReceived), lost \(st.jitter.packetsLost), "
                  + "late \(String(format: "%.2f", latePct)) % (bench \(benchLatePct) %), mean buffered \(String(format: "%.1f", meanDepth)) ms "
                  + "(bench delay \(benchDelayMs) ms), fec \(st.jitter.fecRecovered), concealed \(st.jitter.plcFrames)")
            XCTAssertLessThanOrEqual(latePct, max(2 * benchLatePct, 1.5), "\(name): more late loss than the benchmark")
            XCTAssertLessThanOrEqual(meanDepth, 1.5 * benchDelayMs + 40, "\(name): more delay than the benchmark")
            alex.shutdown(); sam.shutdown()
        }
    }
}
