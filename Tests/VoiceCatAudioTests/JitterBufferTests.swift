// The jitter buffer: ordering and accounting, and the playout policy pinned with
// exact counts on hand-made and seeded traces (simulated time, no clocks).
import VoiceCatAudio
import VoiceCatProtocol
import VoiceCatSimulation
import XCTest

final class JitterBufferTests: XCTestCase {
    @discardableResult
    func insert(_ jb: JitterBuffer, _ seq: UInt64, ts: UInt32, flags: FrameFlags = [], at t: Double = 0) -> JitterBuffer.InsertResult {
        let payload: [UInt8] = [UInt8(truncatingIfNeeded: seq)]
        return payload.withUnsafeBytes { jb.insert(seq: seq, timestamp: ts, flags: flags, payload: $0, arrivalMs: t) }
    }

    /// Plays `n` ticks: the first payload byte of each played packet, -1 for FEC, -2 for PLC, nil for silence.
    func play(_ jb: JitterBuffer, _ n: Int) -> [Int?] {
        (0..<n).map { _ in
            switch jb.next() {
            case .packet(let s): let v = Int(jb.payload(s)[0]); jb.release(s); return v
            case .fec: return -1
            case .conceal: return -2
            case .silence, .comfortNoise: return nil
            }
        }
    }

    /// A sent frame of a hand-made trace: `frame` is its position on the sample clock
    /// (timestamp / 960), `arrival` the receiver tick before which it is inserted
    /// (nil: lost).
    struct Sent {
        var frame: Int
        var arrival: Int?
        var flags: FrameFlags = []
        /// The packet's size (its first two bytes tag it).
        var bytes = 2
    }

    /// Inserts each frame just before its arrival tick and plays `ticks` ticks:
    /// what each tick produced (the index in `trace` of the frame played, -1 FEC,
    /// -2 PLC, nil silence).
    /// `timed`: as the receive path does, each tick is given its time (next(atMs:))
    /// and each frame arrives half a period before its tick.
    func drive(_ jb: JitterBuffer, _ trace: [Sent], ticks: Int, timed: Bool = false) -> [Int?] { drive(jb, trace, 0..<ticks, timed: timed) }

    /// The same over a range of ticks (to look at the counters in between).
    func drive(_ jb: JitterBuffer, _ trace: [Sent], _ ticks: Range<Int>, timed: Bool = false) -> [Int?] {
        var out: [Int?] = []
        var arriving: [Int: [Int]] = [:]
        for (i, f) in trace.enumerated() { if let a = f.arrival, ticks.contains(a) { arriving[a, default: []].append(i) } }
        for k in ticks {
            for i in arriving[k] ?? [] {
                let tag: [UInt8] = [UInt8(i & 0xff), UInt8(i >> 8)] + [UInt8](repeating: 0, count: max(0, trace[i].bytes - 2))
                _ = tag.withUnsafeBytes {
                    jb.insert(seq: UInt64(i), timestamp: UInt32(trace[i].frame * 960), flags: trace[i].flags, payload: $0,
                              arrivalMs: Double(k) * 20 - (timed ? 10 : 0))
                }
            }
            switch timed ? jb.next(atMs: Double(k) * 20) : jb.next() {
            case .packet(let s): let p = jb.payload(s); out.append(Int(p[0]) | Int(p[1]) << 8); jb.release(s)
            case .fec: out.append(-1)
            case .conceal: out.append(-2)
            case .silence, .comfortNoise: out.append(nil)
            }
        }
        return out
    }

    /// Talkspurt A (50 frames, its last frame lost in the network), a pause of
    /// `pauseMs`, talkspurt B (50 frames, marker first) whose timestamps advanced by
    /// the pause's wall-clock time (off A's frame grid, as LocalStream stamps them),
    /// ticked every 20 ms with tick times; frames arrive 7 ms into their period.
    /// Returns how many of B's frames were played, and the talk edges seen.
    func playsSecondTalkspurt(pauseMs: Double, lossLastOfA: Bool = true,
                              stall: Range<Double>? = nil) -> (played: Int, starts: Int, ends: Int) {
        let jb = JitterBuffer()
        var frames: [(seq: UInt64, ts: UInt32, flags: FrameFlags, at: Double, b: Bool)] = []
        for i in 0..<50 where !(lossLastOfA && i == 49) {
            frames.append((UInt64(i), UInt32(i * 960), i == 0 ? [.marker] : (i == 49 ? [.lastFrame] : []), Double(i) * 20 + 7, false))
        }
        let bStart = 50 * 960 + Int(pauseMs * 48) + 123
        for j in 0..<50 {
            frames.append((UInt64(50 + j), UInt32(bStart + j * 960), j == 0 ? [.marker] : (j == 49 ? [.lastFrame] : []),
                           1000 + pauseMs + 2.56 + Double(j) * 20 + 7, true))
        }
        var played = 0, starts = 0, ends = 0, next = 0
        for k in 0..<200 {
            let now = Double(k) * 20
            // A consumer stall: no tick; what arrives waits to be handed over with the
            // next tick, after the buffer's clock caught up (as RemoteSlot.drainInbox).
            if let stall, stall.contains(now) { continue }
            jb.catchUp(toMs: now)
            while next < frames.count && frames[next].at <= now {
                let f = frames[next]
                let tag: [UInt8] = [f.b ? 1 : 0]
                _ = tag.withUnsafeBytes { jb.insert(seq: f.seq, timestamp: f.ts, flags: f.flags, payload: $0, arrivalMs: f.at) }
                next += 1
            }
            if case .packet(let s) = jb.next(atMs: now) { if jb.payload(s)[0] == 1 { played += 1 }; jb.release(s) }
            if jb.talkEdge == .started { starts += 1 }
            if jb.talkEdge == .ended { ends += 1 }
        }
        return (played, starts, ends)
    }

    func testATalkspurtAfterALostLastFrameAndAShortPauseIsPlayed() {
        // Its timestamps are off the last talkspurt's grid (they advanced by the pause's
        // wall-clock time). With that talkspurt's last frame lost and a pause shorter
        // than the buffer waits before pausing (200 ms), the clock ran on the old grid,
        // where none of the new frames ever falls.
        for pauseMs in [60.0, 150.0, 400.0] {
            let r = playsSecondTalkspurt(pauseMs: pauseMs)
            XCTAssertGreaterThanOrEqual(r.played, 48, "a \(pauseMs) ms pause after a lost last frame")
            XCTAssertEqual(r.starts, 2, "\(pauseMs) ms: talk edges")
            XCTAssertEqual(r.ends, 2, "\(pauseMs) ms: talk edges")
        }
        let clean = playsSecondTalkspurt(pauseMs: 60, lossLastOfA: false)
        XCTAssertEqual(clean.played, 50)
    }

    func testAShortFrameStreamIsNotStalledByABlockThatComesALittleLate() {
        // 2.5 ms frames rendered in 20 ms blocks (8 ticks at once), one block in 50 coming
        // 30 ms late (a renderer's scheduling): the stall rule counts milliseconds, not
        // frame periods, so it drops nothing more than the buffer does without it
        // (counted in periods, 12 late periods of 2.5 ms tripped it at every such block).
        func dropped(stallRule: Bool) -> UInt64 {
            let jb = JitterBuffer(frameSamples: 120)
            if !stallRule { jb.tuning.stallMs = .infinity }
            return drive(jb)
        }
        XCTAssertEqual(dropped(stallRule: true), dropped(stallRule: false), "frames dropped for a block 30 ms late")
    }

    private func drive(_ jb: JitterBuffer) -> UInt64 {
        jb.reset(frameSamples: 120)
        var seq: UInt64 = 0
        var renderAt = 0.0
        for block in 0..<500 {
            // The late block, then the next on schedule (10 ms after it).
            renderAt += block % 50 == 49 ? 50 : (block % 50 == 0 && block > 0 ? 10 : 20)
            jb.catchUp(toMs: renderAt)
            while Double(seq) * 2.5 + 1 <= renderAt {
                let payload: [UInt8] = [1]
                _ = payload.withUnsafeBytes {
                    jb.insert(seq: seq, timestamp: UInt32(seq * 120), flags: seq == 0 ? [.marker] : [], payload: $0,
                              arrivalMs: Double(seq) * 2.5 + 1)
                }
                seq += 1
            }
            for _ in 0..<8 { if case .packet(let s) = jb.next(atMs: renderAt) { jb.release(s) } }
        }
        return jb.stats.late + jb.stats.skipped
    }

    func testAStallAcrossAPauseLosesOnlyWhatWasDueDuringIt() {
        // The consumer stops ticking from 900 ms to 1300 ms: the end of talkspurt A
        // (its last frame too) and the pause pass unheard, then B starts off A's grid.
        // The stall's catch-up stepped the clock along A's grid, on which none of B's
        // frames falls: B was lost whole (1 of 50 played).
        for pauseMs in [100.0, 250.0] {
            let r = playsSecondTalkspurt(pauseMs: pauseMs, lossLastOfA: false, stall: 900..<1300)
            let dueInStall = max(0, Int((1300 - (1000 + pauseMs)) / 20) + 1)
            XCTAssertGreaterThanOrEqual(r.played, 50 - dueInStall - 2, "stall over a \(pauseMs) ms pause")
        }
    }

    /// Frames that came while nobody ticked and no talkspurt played (a host that has not
    /// pulled yet, a device suspended) are not played when the ticks come: a talkspurt
    /// that ended long before is dropped whole, as late, with no talk edge; one still
    /// coming starts on its recent frames with the usual wait and plays on without a gap.
    /// (Played, the first came out seconds late with TALK_START and TALK_STOP again.)
    func testFramesThatCameWhileNobodyTickedAreNotPlayedLate() {
        func feed(_ jb: JitterBuffer, frames: Range<Int>, last: Int? = nil) {
            for k in frames {
                let payload: [UInt8] = [UInt8(truncatingIfNeeded: k)]
                _ = payload.withUnsafeBytes {
                    jb.insert(seq: UInt64(k + 1), timestamp: UInt32(k * 960), flags: k == last ? [.lastFrame] : (k == frames.lowerBound ? [.marker] : []),
                              payload: $0, arrivalMs: Double(k) * 20 + 0.3)
                }
            }
        }
        // Never ticked before; after ticks that saw nothing; and so, with the frames
        // handed over at the first tick after the clock was caught up (as the receive
        // path does: catchUp stands in for the missed ticks, not for the consumer's).
        for (ticksBefore, handedOverLate) in [(0, false), (50, false), (50, true)] {
            let jb = JitterBuffer(capacity: 64, frameSamples: 960)
            for k in 0..<ticksBefore { _ = jb.next(atMs: Double(k) * 20 - 1000 - 5) }
            if handedOverLate { jb.catchUp(toMs: 3000) }
            feed(jb, frames: 0..<25, last: 24)   // 500 ms of talk, then nothing
            var played = 0, edges = 0
            for k in 0..<100 {
                if case .packet(let s) = jb.next(atMs: 3000 + Double(k) * 20) { played += 1; jb.release(s) }
                if jb.talkEdge != .none { edges += 1 }
            }
            XCTAssertEqual(played, 0, "a talkspurt that ended 2.5 s before the first tick (\(ticksBefore) ticks before it, handed over late: \(handedOverLate))")
            XCTAssertEqual(edges, 0, "no TALK_START / TALK_STOP for it again")
            XCTAssertEqual(jb.stats.late, 25, "its frames are counted as late")
        }
        // A talkspurt that started 3 s before the first tick and goes on.
        let jb = JitterBuffer(capacity: 64, frameSamples: 960)
        feed(jb, frames: 0..<150)
        var out: [Int] = []
        var firstDelay = Double.nan
        for k in 0..<100 {
            let now = 3000 + Double(k) * 20
            if k > 0 { feed(jb, frames: (149 + k)..<(150 + k)) }
            switch jb.next(atMs: now) {
            case .packet(let s):
                let f = Int(jb.payload(s)[0])
                if out.isEmpty { firstDelay = now - (Double(149 + (f - 149 + 256) % 256) * 20 + 0.3) }
                out.append(f); jb.release(s)
            case .silence, .comfortNoise: XCTAssertTrue(out.isEmpty, "silence after the start at tick \(k)")
            case .fec, .conceal: XCTFail("concealed at tick \(k)")
            }
        }
        XCTAssertGreaterThan(out.count, 90, "the talkspurt plays on")
        XCTAssertLessThanOrEqual(firstDelay, 40.0, "it starts on a frame that came within the usual wait")
        XCTAssertEqual(zip(out, out.dropFirst()).filter { ($1 - $0 + 256) % 256 != 1 }.count, 0, "no frame skipped after the start")
        XCTAssertGreaterThanOrEqual(jb.stats.late, 60, "the old frames it held are counted as late")
    }

    /// A talkspurt of a single frame (its first frame flagged last too: a host whose
    /// first block came alone and whose queue then ran dry) reports both edges at the
    /// tick that plays it. Only its end was reported, so a consumer counting starts and
    /// ends was one start behind from there: the next talkspurt, playing, was taken for
    /// ended once the first one's hangover passed (TALK_STOP during speech, TALK_START
    /// only at the next talkspurt).
    func testAOneFrameTalkspurtReportsItsStartAndItsEnd() {
        let jb = JitterBuffer(capacity: 64, frameSamples: 960)
        var edges: [JitterBuffer.TalkEdge] = []
        for k in 0..<40 {
            let now = Double(k) * 20
            if k == 0 { insert(jb, 1, ts: 0, flags: [.marker, .lastFrame], at: now - 5) }
            if (4...30).contains(k) { insert(jb, UInt64(k - 2), ts: UInt32(960 * (k + 1)), flags: k == 4 ? [.marker] : (k == 30 ? [.lastFrame] : []), at: now - 5) }
            if case .packet(let s) = jb.next(atMs: now) { jb.release(s) }
            if jb.talkEdge != .none { edges.append(jb.talkEdge) }
        }
        XCTAssertEqual(edges, [.startedAndEnded, .started, .ended])
        XCTAssertEqual(jb.stats.talkspurts, 2)
    }

    // MARK: Ordering and accounting

    func testReorderedFramesInsideTheWindowPlayInOrderAndDuplicatesAreDropped() {
        let jb = JitterBuffer(frameSamples: 960)
        var out: [Int?] = []
        // Arrival order 0 2 1 3 5 4, one tick per frame period.
        insert(jb, 0, ts: 0); insert(jb, 2, ts: 2 * 960)
        XCTAssertEqual(insert(jb, 2, ts: 2 * 960), .duplicate)
        out += play(jb, 1)
        insert(jb, 1, ts: 960)
        out += play(jb, 1)
        insert(jb, 3, ts: 3 * 960)
        out += play(jb, 1)
        insert(jb, 5, ts: 5 * 960); insert(jb, 4, ts: 4 * 960)
        out += play(jb, 4)
        XCTAssertEqual(out, [0, 1, 2, 3, 4, 5, -2])
        XCTAssertEqual(jb.stats.duplicates, 1)
        XCTAssertEqual(jb.stats.packetsLost, 0, "stragglers fill their gaps in the loss count")
        XCTAssertEqual(jb.stats.late, 0)
        XCTAssertEqual(jb.stats.underruns, 1)
    }

    func testALostFrameIsRebuiltFromTheNextFramesFEC() {
        let jb = JitterBuffer(frameSamples: 960)
        insert(jb, 0, ts: 0, flags: .fec)
        XCTAssertEqual(play(jb, 1), [0])
        insert(jb, 2, ts: 2 * 960, flags: .fec)   // 1 is lost
        insert(jb, 3, ts: 3 * 960, flags: .fec)
        XCTAssertEqual(play(jb, 3), [-1, 2, 3])
        XCTAssertEqual(jb.stats.packetsLost, 1)
        XCTAssertEqual(jb.stats.fecRecovered, 1)
        XCTAssertEqual(insert(jb, 1, ts: 960), .late)
        XCTAssertEqual(jb.stats.late, 1)
    }

    func testAFrameTimeTheSenderSkippedIsConcealedNotRebuiltOrWaitedFor() {
        // A sender whose host fell a frame behind real time skips a frame's time: the
        // timestamps jump by two frames, the seqs do not. Nothing was lost: the period is
        // concealed (the successor's FEC is of the frame before it, already played) and
        // not waited for; the frames keep their alignment.
        let trace = (0..<30).map { i -> Sent in
            let frame = i < 10 ? i : i + 1
            return Sent(frame: frame, arrival: max(0, frame - 1), flags: .fec)
        }
        let jb = JitterBuffer(frameSamples: 960)
        let out = drive(jb, trace, ticks: 31)
        XCTAssertEqual(Array(out[0..<10]), (0..<10).map { $0 })
        XCTAssertEqual(out[10], -2, "the skipped frame time is concealed")
        XCTAssertEqual(Array(out[11..<31]), (10..<30).map { $0 }, "the frames after it keep their alignment")
        XCTAssertEqual(jb.stats.packetsLost, 0)
        XCTAssertEqual(jb.stats.fecRecovered, 0)
        XCTAssertEqual(jb.stats.plcFrames, 1)
        XCTAssertEqual(jb.stats.waited, 0)
        // A frame the sender could not send (socket buffer full) leaves the same gap, but
        // the next frame it sends has the marker, and its FEC is of the unsent frame:
        // rebuilt from it.
        var unsent = trace
        unsent[10].flags = [.fec, .marker]
        let jb2 = JitterBuffer(frameSamples: 960)
        XCTAssertEqual(drive(jb2, unsent, ticks: 31)[10], -1)
    }

    func testWithoutFECAMissingFrameIsConcealedUnlessTheStreamCanRebuildIt() {
        for recovery in [false, true] {
            let jb = JitterBuffer(frameSamples: 960)
            jb.recoveryAvailable = recovery          // DRED, or FEC on the channel
            insert(jb, 0, ts: 0)
            XCTAssertEqual(play(jb, 1), [0])
            insert(jb, 2, ts: 2 * 960)
            XCTAssertEqual(play(jb, 2), [recovery ? -1 : -2, 2])
            XCTAssertEqual(jb.stats.fecRecovered, recovery ? 1 : 0)
            XCTAssertEqual(jb.stats.plcFrames, recovery ? 0 : 1)
        }
    }

    func testTimestampsCrossing32BitsPlayThrough() {
        let jb = JitterBuffer(frameSamples: 960)
        var ts = UInt32.max - 960 * 2 + 1
        var played: [Int?] = []
        for s in UInt64(0)..<6 {
            insert(jb, s, ts: ts)
            ts &+= 960
            played += play(jb, 1)
        }
        XCTAssertEqual(played, [0, 1, 2, 3, 4, 5])
        XCTAssertEqual(jb.stats.plcFrames, 0)
        XCTAssertEqual(jb.stats.late, 0)
    }

    func testScriptedTraceCountsExactlyTheInjectedLossesAndDuplicates() {
        var trace: [TraceFrame] = []
        let lost: Set<UInt64> = [7, 30, 31, 32, 77, 150]
        let dup: Set<UInt64> = [3, 40, 41, 99]
        for s in UInt64(0)..<200 {
            let t = Double(s) * 20 + 30
            trace.append(TraceFrame(seq: s, timestamp: UInt32(s) * 960, flags: .fec, sendMs: Double(s) * 20,
                                    arrivalsMs: lost.contains(s) ? [] : (dup.contains(s) ? [t, t + 3] : [t])))
        }
        let model = JitterBufferModel()
        let r = JitterSimulation.run(trace, model: model)
        XCTAssertEqual(model.jb.stats.packetsLost, UInt64(lost.count))
        XCTAssertEqual(model.jb.stats.duplicates, UInt64(dup.count))
        XCTAssertEqual(model.jb.stats.packetsReceived, UInt64(200 - lost.count))
        XCTAssertEqual(r.framesPlayed, 200 - lost.count)
        XCTAssertEqual(r.lateLost, 0)
    }

    // MARK: Talkspurts, pauses, markers

    func testLastFrameEndsTheTalkspurtAndAMarkerStartsTheNextWithoutConcealment() {
        let jb = JitterBuffer(frameSamples: 960)
        var edges: [JitterBuffer.TalkEdge] = []
        func tick() -> Int? {
            let r = play(jb, 1)[0]
            if jb.talkEdge != .none { edges.append(jb.talkEdge) }
            return r
        }
        insert(jb, 0, ts: 0, flags: .marker)
        var out = [tick()]
        insert(jb, 1, ts: 960)
        out.append(tick())
        insert(jb, 2, ts: 2 * 960, flags: .lastFrame)
        out.append(tick())
        for _ in 0..<20 { out.append(tick()) }                 // a 400 ms pause: silence, not PLC
        insert(jb, 3, ts: 26 * 960, flags: .marker)            // timestamps advanced by the pause
        out.append(tick())
        insert(jb, 4, ts: 27 * 960, flags: .lastFrame)
        out.append(tick())
        XCTAssertEqual(out, [0, 1, 2] + [Int?](repeating: nil, count: 20) + [3, 4])
        XCTAssertEqual(edges, [.started, .ended, .started, .ended])
        XCTAssertEqual(jb.stats.talkspurts, 2)
        XCTAssertEqual(jb.stats.plcFrames, 0)
        XCTAssertEqual(jb.stats.underruns, 0)
        XCTAssertFalse(jb.talking)
    }

    func testDtxPauseIsSilenceComfortNoiseUpdatesPlayAndAMarkerReseeds() {
        // Talk, the first DTX frame (a pause follows), a comfort-noise update 400 ms
        // later, then the next talkspurt: the updates play in their own periods, the
        // pause is silence (not PLC), and comfort noise is not talk.
        let trace = [Sent(frame: 0, arrival: 0, flags: .marker), Sent(frame: 1, arrival: 1),
                     Sent(frame: 2, arrival: 2, flags: .dtx), Sent(frame: 22, arrival: 22, flags: .dtx),
                     Sent(frame: 50, arrival: 50, flags: .marker), Sent(frame: 51, arrival: 51, flags: .lastFrame)]
        let jb = JitterBuffer(frameSamples: 960)
        var edges: [JitterBuffer.TalkEdge] = []
        var out: [Int?] = []
        for k in 0..<53 {
            out += drive(jb, trace, k..<(k + 1))
            if jb.talkEdge != .none { edges.append(jb.talkEdge) }
        }
        var expected = [Int?](repeating: nil, count: 53)
        expected[0] = 0; expected[1] = 1; expected[2] = 2; expected[22] = 3; expected[50] = 4; expected[51] = 5
        XCTAssertEqual(out, expected)
        XCTAssertEqual(edges, [.started, .ended, .started, .ended], "comfort noise is not talk")
        XCTAssertEqual(jb.stats.talkspurts, 2)
        XCTAssertEqual(jb.stats.packetsLost, 0)
        XCTAssertEqual(jb.stats.plcFrames, 0)
        XCTAssertEqual(jb.stats.underruns, 0)
    }

    /// Talkspurts of `talk` frames every `talk + pause` frames on a clean path: each
    /// frame reaches the receiver one tick before its playout tick at the nominal
    /// alignment, except those in `late` (one tick later, a millisecond or two past a
    /// tick). `legacy`: the sender's timestamps stand still over each pause.
    func talkspurts(count: Int, talk: Int, pause: Int, late: Set<Int> = [], legacy: Bool = false) -> [Sent] {
        var out: [Sent] = []
        for spurt in 0..<count {
            for j in 0..<talk {
                let slot = spurt * (talk + pause) + j           // the sender's wall clock, in frames
                let frame = legacy ? spurt * talk + j : slot
                var flags: FrameFlags = [.fec]
                if j == 0 { flags.insert(.marker) }
                if j == talk - 1 { flags.insert(.lastFrame) }
                out.append(Sent(frame: frame, arrival: slot + (late.contains(out.count) ? 1 : 0), flags: flags))
            }
        }
        return out
    }

    /// For each talkspurt of `talk` frames, the number of distinct alignments
    /// (tick − frame position) its frames were played with.
    func alignments(_ trace: [Sent], _ out: [Int?], talk: Int) -> [Int] {
        var sets = [Set<Int>](repeating: [], count: (trace.count + talk - 1) / talk)
        for (tick, i) in out.enumerated() { if let i, i >= 0 { sets[i / talk].insert(tick - trace[i].frame) } }
        return sets.map(\.count)
    }

    func testACleanPathWithRareLateFramesDoesNotUnderrunAtTalkspurtStart() {
        // Ten 2 s talkspurts, 1 s pauses; one frame in 150 comes a millisecond or two
        // late and lands one tick later. The first one (before anything is known)
        // underruns once; from then on every talkspurt starts with the one-frame
        // cushion that history asks for, and none underruns or realigns.
        let late: Set<Int> = Set(stride(from: 149, to: 1000, by: 150))
        let trace = talkspurts(count: 10, talk: 100, pause: 50, late: late)
        let jb = JitterBuffer(capacity: 64, frameSamples: 960)
        let out = drive(jb, trace, ticks: 10 * 150 + 10)
        XCTAssertEqual(jb.stats.underruns, 1)
        XCTAssertEqual(jb.stats.plcFrames, 1, "one period waited for the first late frame, none after")
        XCTAssertEqual(jb.stats.late, 0)
        XCTAssertEqual(jb.stats.talkspurts, 10)
        XCTAssertEqual(alignments(trace, out, talk: 100), [1, 2, 1, 1, 1, 1, 1, 1, 1, 1])
        XCTAssertEqual(jb.targetMs, 40, "one frame of cushion beyond the frame in play")
    }

    func testAContinuousTalkspurtOnACleanPathKeepsOneAlignment() {
        // Two talkspurts (2 s, then 3 s after a 1 s pause) on a path where 30 % of the
        // frames land a tick later. The first teaches the buffer that jitter; the
        // second starts with the cushion for it and keeps one alignment to its end.
        var rng = TraceGenerator.Random(seed: 3)
        var trace: [Sent] = []
        for (start, length) in [(0, 100), (150, 150)] {
            for j in 0..<length {
                var flags: FrameFlags = j == 0 ? .marker : []
                if j == length - 1 { flags.insert(.lastFrame) }
                trace.append(Sent(frame: start + j, arrival: start + j + (rng.uniform() < 0.3 ? 1 : 0), flags: flags))
            }
        }
        let jb = JitterBuffer(frameSamples: 960)
        let out = drive(jb, trace, ticks: 310)
        var second = Set<Int>(), played = 0
        for (tick, i) in out.enumerated() { if let i, i >= 100 { second.insert(tick - trace[i].frame); played += 1 } }
        XCTAssertEqual(played, 150, "the whole second talkspurt played")
        XCTAssertEqual(second.count, 1, "one alignment from start to end")
        XCTAssertEqual(jb.stats.underruns, 1, "only in the first talkspurt, before the jitter was known")
        XCTAssertEqual(jb.stats.late, 0)
    }

    func testSenderPausesDoNotRaiseTheTarget() {
        // Talk on a clean path, then a 1 s fed pause (last frame, then a marker), with
        // timestamps that advance by the pause (the new sender) or stand still (the
        // old one). Neither is jitter: the target and the alignment stay.
        for legacy in [false, true] {
            let trace = talkspurts(count: 4, talk: 150, pause: 50, legacy: legacy)
            let jb = JitterBuffer(frameSamples: 960)
            let out = drive(jb, trace, ticks: 4 * 200 + 5)
            XCTAssertEqual(jb.targetMs, 20, "legacy \(legacy): clean-path target")
            XCTAssertEqual(jb.stats.plcFrames, 0, "legacy \(legacy)")
            XCTAssertEqual(jb.stats.underruns, 0, "legacy \(legacy)")
            XCTAssertEqual(jb.stats.late, 0, "legacy \(legacy)")
            XCTAssertEqual(out.compactMap { $0 }.count, 600, "legacy \(legacy): every frame played, no PLC")
            XCTAssertEqual(alignments(trace, out, talk: 150), [1, 1, 1, 1], "legacy \(legacy)")
        }
    }

    func testAStreamThatStopsWithoutALastFrameIsConcealedOnlyUntilMaxStarved() {
        let jb = JitterBuffer(frameSamples: 960)
        var trace: [Sent] = []
        for f in 0..<50 { trace.append(Sent(frame: f, arrival: f, flags: f == 0 ? .marker : [])) }
        let out = drive(jb, trace, ticks: 80)
        XCTAssertEqual(Array(out.prefix(50)), (0..<50).map { $0 })
        XCTAssertEqual(jb.stats.plcFrames, 10, "200 ms of waiting, then silence")
        XCTAssertEqual(out[60...].filter { $0 != nil }.count, 0)
        XCTAssertFalse(jb.talking)
    }

    /// A talkspurt's last frame that comes after its tick (a sender's dry slack longer
    /// than the cushion) is too late to play, but it says the talker stopped: the
    /// buffer conceals only until it came, then the talkspurt ends (silence), not 200
    /// ms of concealment until it counts as starved.
    func testALastFrameThatComesTooLateEndsTheTalkspurtAtOnce() {
        let jb = JitterBuffer(frameSamples: 960)
        var trace: [Sent] = []
        for f in 0..<50 { trace.append(Sent(frame: f, arrival: f, flags: f == 0 ? .marker : [])) }
        trace.append(Sent(frame: 50, arrival: 53, flags: .lastFrame))   // three periods late
        let out = drive(jb, trace, ticks: 80)
        XCTAssertEqual(Array(out.prefix(50)), (0..<50).map { $0 })
        print("a last frame 3 periods late: \(out[50..<56].map { $0.map(String.init) ?? "-" }), concealed \(jb.stats.plcFrames)")
        XCTAssertLessThanOrEqual(jb.stats.plcFrames, 3, "concealed until the last frame came, not for 200 ms")
        XCTAssertEqual(out[54...].filter { $0 != nil }.count, 0, "silence once it came")
        XCTAssertFalse(jb.talking)
    }

    /// The end cover is counted in ms, whatever the frame length: 2.5 ms frames (the
    /// shortest) whose talkspurt ends come 6.5 ms late (a steady host's dry slack and
    /// its timer: over two periods) are covered from the third talkspurt on, and
    /// conceal an end frame each without the cover.
    func testTalkspurtEndsLateByMorePeriodsThanOneAreCoveredForShortFrames() {
        func run(covers: Bool) -> (concealed: UInt64, lateEnds: Int) {
            let jb = JitterBuffer(frameSamples: 120)
            var t = JitterBuffer.Tuning()
            t.coversEnds = covers
            jb.tuning = t
            var lateEnds = 0
            // Ten talkspurts of 200 frames (0.5 s) with 200 frames of pause; ticks every
            // 2.5 ms at a phase 1.1 ms after the frames' sending grid.
            var arrivals: [(ms: Double, frame: Int, flags: FrameFlags)] = []
            for spurt in 0..<10 {
                for j in 0..<200 {
                    let frame = spurt * 400 + j
                    var flags: FrameFlags = j == 0 ? .marker : []
                    var at = Double(frame) * 2.5 + 0.3 + Double((frame * 7) % 5) * 0.05
                    if j == 199 { flags = .lastFrame; at += 6.5 }
                    arrivals.append((at, frame, flags))
                }
            }
            arrivals.sort { $0.ms < $1.ms }
            var next = 0
            for k in 0..<4000 {
                let now = Double(k) * 2.5 + 1.1
                while next < arrivals.count && arrivals[next].ms <= now {
                    let a = arrivals[next]
                    let r = insert(jb, UInt64(a.frame), ts: UInt32(a.frame * 120), flags: a.flags, at: a.ms)
                    if a.flags.contains(.lastFrame) && r == .late && a.frame > 800 { lateEnds += 1 }
                    next += 1
                }
                if case .packet(let s) = jb.next(atMs: now) { jb.release(s) }
            }
            return (jb.stats.plcFrames, lateEnds)
        }
        let covered = run(covers: true), bare = run(covers: false)
        print("2.5 ms frames, ends 6.5 ms late: concealed \(covered.concealed) with the cover (late ends after the second talkspurt "
              + "\(covered.lateEnds)), \(bare.concealed) without (\(bare.lateEnds))")
        XCTAssertEqual(covered.lateEnds, 0, "ends covered once two were seen")
        XCTAssertGreaterThan(bare.lateEnds, 4, "without the cover the ends come too late")
        XCTAssertLessThan(covered.concealed, bare.concealed)
    }

    // MARK: FEC

    func testAnIsolatedLossIsRebuiltFromFECOnceLossesAreSeen() {
        // A clean path (no cushion needed) losing one frame in 40. Once losses are
        // seen, the cushion keeps the successor in hand at the lost frame's period
        // and every loss is rebuilt from its FEC at once.
        var trace: [Sent] = []
        for f in 0..<1200 { trace.append(Sent(frame: f, arrival: f % 40 == 20 ? nil : f, flags: f == 0 ? [.marker, .fec] : .fec)) }
        trace[1199].flags.insert(.lastFrame)
        let jb = JitterBuffer(frameSamples: 960)
        let out = drive(jb, trace, ticks: 1205)
        let losses = 1200 / 40
        XCTAssertEqual(jb.stats.packetsLost, UInt64(losses))
        XCTAssertEqual(jb.stats.underruns, 1)
        XCTAssertEqual(Int(jb.stats.fecRecovered) + Int(jb.stats.plcFrames) - Int(jb.stats.waited), losses,
                       "each loss rebuilt or concealed once")
        // The first loss finds no cushion: one period waited for the successor, then
        // rebuilt from it. That period of cushion is kept once losses are known.
        XCTAssertEqual(jb.stats.plcFrames, 1)
        XCTAssertEqual(jb.stats.waited, 1)
        XCTAssertEqual(jb.stats.fecRecovered, UInt64(losses))
        XCTAssertEqual(jb.stats.late, 0)
        XCTAssertEqual(jb.stats.skipped, 0)
        XCTAssertEqual(jb.targetMs, 40, "the cushion holds the successor")
        XCTAssertEqual(out.filter { $0 == -1 }.count, losses)
    }

    func testAMissingFrameWithNothingNewerIsWaitedForAndRebuiltFromItsSuccessor() {
        // Cushion 0 (clean path). Frame 30 is lost; its successor arrives one period
        // later. The buffer waits one period (concealed, the clock held) and then
        // rebuilds 30 from 31's FEC instead of giving it up to PLC.
        var trace: [Sent] = []
        for f in 0..<60 { trace.append(Sent(frame: f, arrival: f == 30 ? nil : f, flags: f == 0 ? [.marker, .fec] : .fec)) }
        let jb = JitterBuffer(frameSamples: 960)
        let out = drive(jb, trace, ticks: 61)
        XCTAssertEqual(Array(out[28...33]), [28, 29, -2, -1, 31, 32])
        XCTAssertEqual(jb.stats.waited, 1)
        XCTAssertEqual(jb.stats.fecRecovered, 1)
        XCTAssertEqual(jb.stats.plcFrames, 1)
        XCTAssertEqual(jb.stats.late, 0)
    }

    // MARK: Catch-up, drift, ratcheting

    func testASpikeBurstIsPlayedNotThrownAway() {
        // Jitter of up to three periods (frame f lands f % 4 ticks late) teaches a
        // three-frame cushion. Then a spike holds frames 200...203 and delivers them
        // together with 204: frame 200 is one period past its playout tick. The
        // buffer waits one period for it and plays the whole burst; nothing is
        // dropped to "catch up" afterwards: the history now covers that lateness.
        var trace: [Sent] = []
        for f in 0..<400 { trace.append(Sent(frame: f, arrival: (200...203).contains(f) ? 204 : f + f % 4, flags: f == 0 ? .marker : [])) }
        trace[399].flags.insert(.lastFrame)
        let jb = JitterBuffer(frameSamples: 960)
        _ = drive(jb, trace, 0..<190)
        XCTAssertEqual(jb.targetMs, 80, "three frames of cushion learned")
        let before = jb.stats
        let burst = drive(jb, trace, 190..<410)
        XCTAssertEqual(Array(burst[(203 - 190)...(208 - 190)]), [-2, 200, 201, 202, 203, 204])
        XCTAssertEqual(burst.compactMap { $0 }.filter { $0 >= 190 }.count, 210, "frames 190...399 all played")
        XCTAssertEqual(jb.stats.waited - before.waited, 1)
        XCTAssertEqual(jb.stats.plcFrames - before.plcFrames, 1)
        XCTAssertEqual(jb.stats.skipped, before.skipped)
        XCTAssertEqual(jb.stats.late, before.late)
        XCTAssertEqual(jb.targetMs, 100, "a 99.8 % cover one frame above the 90 % one is taken")
    }

    func testExcessCushionIsShedOneFrameAtATimeNotByAJump() {
        // A clean path whose delay drops by three periods at frame 200 (a route
        // change): the cushion is three frames too deep. It is shed by dropping one
        // frame each time the excess has lasted `catchUpTicks` divided by the whole
        // periods of it buffered (3, then 2, then 1), never by jumping the clock over
        // what is buffered.
        var trace: [Sent] = []
        for f in 0..<700 { trace.append(Sent(frame: f, arrival: f < 200 ? f + 3 : f, flags: f == 0 ? .marker : [])) }
        trace[699].flags.insert(.lastFrame)
        let jb = JitterBuffer(frameSamples: 960)
        let out = drive(jb, trace, ticks: 710)
        let catchUp = jb.tuning.catchUpTicks
        XCTAssertEqual(jb.stats.skipped, 3)
        XCTAssertEqual(jb.stats.late, 0)
        XCTAssertEqual(jb.stats.plcFrames, 0)
        // Where the drops were: the alignment (tick − frame) steps down by one each time.
        var steps: [Int] = []
        var last: Int? = nil
        for (tick, i) in out.enumerated() {
            guard let i, i >= 0 else { continue }
            let a = tick - i
            if let l = last, a != l { XCTAssertEqual(a, l - 1); steps.append(tick) }
            last = a
        }
        // The excess appears at tick 200 (frame 200 arrives three periods early);
        // each drop comes catchUpTicks / n after the excess (re)started being counted.
        let first = 200 + catchUp / 3 - 1, second = first + catchUp / 2
        XCTAssertEqual(steps, [first, second, second + catchUp])
    }

    func testTheEndOfADelayEpisodeIsShedWithinSeconds() {
        // A clean path 300 ms slower for 3 s (frames 1500-1649), then as before. The
        // stream starves past maxStarvedMs when the episode begins, and resumes on
        // the episode's first frame when it comes: nothing the path delayed is lost
        // (frames that came after the starving had passed their time were dropped
        // as late, 9 here, before). That frame's timing is taken as a typical
        // frame's, so the target does not learn the episode as jitter (it held
        // ~300 ms until the history forgot it). Once the path is fast again the buffer
        // holds 15 periods too many: n periods of excess are shed after
        // catchUpTicks / n each, but never two drops within `minShedGapTicks`
        // (one every `catchUpTicks` kept the listener 300 ms behind for 30 s more).
        var trace: [Sent] = []
        for f in 0..<4000 { trace.append(Sent(frame: f, arrival: (1500..<1650).contains(f) ? f + 15 : f, flags: f == 0 ? .marker : [])) }
        trace[3999].flags.insert(.lastFrame)
        let jb = JitterBuffer(frameSamples: 960)
        var out: [Int?] = []
        var highestTarget = 0.0
        for k in stride(from: 0, to: 4010, by: 10) {
            out += drive(jb, trace, k..<(k + 10), timed: true)
            if k >= 1400 { highestTarget = max(highestTarget, jb.targetMs) }
        }
        func alignment(at tick: Int) -> Int? { out[tick].flatMap { $0 >= 0 ? tick - $0 : nil } }
        XCTAssertEqual(alignment(at: 1400), 0)
        XCTAssertEqual(alignment(at: 1600), 15, "the buffer followed the path up")
        // (Its last frames may be among those shed when it ends.)
        XCTAssertTrue((1500..<1600).allSatisfy { out.contains($0) }, "frames of the episode dropped: \((1500..<1600).filter { !out.contains($0) })")
        XCTAssertEqual(jb.stats.late, 0)
        XCTAssertLessThanOrEqual(highestTarget, 40, "the episode taken for jitter")
        // Where the drops were: the alignment steps down by one each time.
        var drops: [Int] = []
        var last: Int? = nil
        for tick in 1600..<out.count { if let a = alignment(at: tick) { if let l = last, a < l { drops.append(tick) }; last = a } }
        XCTAssertEqual(drops.count, 15)
        let gap = 10        // minShedGapTicks: 200 ms between jumps a listener hears
        XCTAssertTrue(zip(drops, drops.dropFirst()).allSatisfy { $1 - $0 >= gap }, "drops closer than \(gap) ticks: \(drops)")
        let catchUp = jb.tuning.catchUpTicks
        let bound = (1...15).reduce(0) { $0 + max(catchUp / $1, gap) } + 10      // 351 ticks; 15 x 100 before
        XCTAssertLessThanOrEqual((drops.last ?? .max) - 1650, bound, "drops at \(drops)")
        XCTAssertEqual(alignment(at: 1650 + bound), 0)
        XCTAssertEqual(jb.stats.skipped, 15)
    }

    func testAPathThatFreezesAndDeliversItsBacklogResumesOnItsCushion() {
        // A clean path stalls for 300 ms (frames 500-514 held) and then delivers them
        // all at once, as a Wi-Fi scan or a stalled hop does. The stream starves past
        // maxStarvedMs (concealed, then silence); played from its oldest frame, the
        // backlog stayed as periods of delay for seconds (then shed a frame at a
        // time). It resumes on the frame that has a start's cushion; the older ones
        // are dropped as late. A backlog that starts with a marker (the talker stopped,
        // its last frame lost, and the next talkspurt's first frames were delayed) is
        // a new talkspurt: it plays from its first frame.
        func run(markerAt: Int?) -> (alignment: [Int?], late: UInt64, out: [Int?]) {
            var trace: [Sent] = []
            for f in 0..<800 where markerAt.map({ f < 480 || f >= $0 }) ?? true {
                trace.append(Sent(frame: f, arrival: (500..<515).contains(f) ? 515 : f, flags: f == 0 || f == markerAt ? .marker : []))
            }
            trace[trace.count - 1].flags.insert(.lastFrame)
            let jb = JitterBuffer(frameSamples: 960)
            let out = drive(jb, trace, ticks: 810, timed: true)
            // (The index played is a frame's index in `trace`; alignment is on frames.)
            let frameOf = { (i: Int) in trace[i].frame }
            return (out.indices.map { t in out[t].flatMap { $0 >= 0 ? t - frameOf($0) : nil } }, jb.stats.late, out.map { $0.map { $0 >= 0 ? frameOf($0) : $0 } })
        }
        let stall = run(markerAt: nil)
        XCTAssertEqual(stall.alignment[490], 0)
        XCTAssertTrue((511..<515).allSatisfy { stall.out[$0] == nil }, "silence once starved: \(stall.out[500..<516])")
        let resumed = (515..<560).compactMap { stall.alignment[$0] }
        XCTAssertFalse(resumed.isEmpty)
        XCTAssertTrue(resumed.allSatisfy { $0 <= 1 }, "the backlog kept as delay: alignment \(resumed)")
        XCTAssertGreaterThanOrEqual(stall.late, 13, "the frames whose time passed in the stall")
        let talkspurt = run(markerAt: 500)
        XCTAssertEqual(talkspurt.out[515], 500, "a new talkspurt plays from its first frame")
        XCTAssertEqual(talkspurt.late, 0)
    }

    func testAFreezeInAStreamsFirstSecondIsNotLearnedAsJitter() {
        // A clean path stalls 300 ms half a second into the stream (frames 25-39 held
        // until tick 40), then delivers its backlog at once. The stream starves past
        // maxStarvedMs; the first frame after it is taken as a typical one, so the
        // backlog is not learned as 15 periods of jitter: with 25 frames of history,
        // it was most of the histogram, and the target covered it (~300 ms) for seconds.
        var trace: [Sent] = []
        for f in 0..<500 { trace.append(Sent(frame: f, arrival: (25..<40).contains(f) ? 40 : f, flags: f == 0 ? .marker : [])) }
        trace[499].flags.insert(.lastFrame)
        let jb = JitterBuffer(frameSamples: 960)
        var targets: [Double] = []
        var out: [Int?] = []
        for k in stride(from: 0, to: 500, by: 10) {
            out += drive(jb, trace, k..<(k + 10), timed: true)
            if k >= 50 { targets.append(jb.targetMs) }
        }
        XCTAssertLessThanOrEqual(targets.max() ?? .infinity, 60, "the freeze was learned as jitter: \(targets)")
        let alignments = (100..<490).compactMap { t in out[t].flatMap { $0 >= 0 ? t - $0 : nil } }
        XCTAssertLessThanOrEqual(alignments.max() ?? .max, 1, "the backlog kept as delay")
    }

    func testAStallWhoseRestWasLostDoesNotWalkTheGap() {
        // A clean path stalls for 300 ms (frames 200-214 held until tick 215), and its
        // queue delivers only the first three; the rest, and 40 ms after the stall,
        // are lost (a tail drop). The stream resumes on frames 200-202, and frame 217
        // then comes 14 periods ahead of the clock: walked one concealed period a tick,
        // that gap was 14 periods concealed and ~250 ms of delay, shed later a frame
        // at a time (a review's finding). The missing frames are skipped at once.
        var trace: [Sent] = []
        for f in 0..<500 {
            let arrival: Int? = (200..<203).contains(f) ? 215 : (203..<217).contains(f) ? nil : f
            trace.append(Sent(frame: f, arrival: arrival, flags: f == 0 ? .marker : []))
        }
        trace[499].flags.insert(.lastFrame)
        let jb = JitterBuffer(frameSamples: 960)
        let out = drive(jb, trace, ticks: 510, timed: true)
        let concealed = (215..<300).filter { out[$0] == -2 }.count
        let alignments = (225..<490).compactMap { t in out[t].flatMap { $0 >= 0 ? t - $0 : nil } }
        XCTAssertLessThanOrEqual(concealed, 2, "the gap walked: \(out[214..<240].map { $0.map(String.init) ?? "-" })")
        XCTAssertLessThanOrEqual(alignments.max() ?? .max, 1, "the gap kept as delay: \(Set(alignments).sorted())")
        XCTAssertLessThanOrEqual(jb.stats.skipped, 1, "frames that came were dropped to shed it")
    }

    func testFramesStillOnASlowerPathAreNotSkippedWhenItGetsFaster() {
        // The path is 12 periods slow, then 10 periods faster from frame 300 on (a
        // route change): newer frames overtake the last ones still on the slow path
        // (297-299 come in their own ticks, 296 is lost). The cushion over the faster
        // frames is far over the target, yet the gap is not skipped at once there (a
        // review found stragglers thrown away): that is only right just after a
        // talkspurt resumed on a stall's frames.
        var trace: [Sent] = []
        for f in 0..<800 {
            trace.append(Sent(frame: f, arrival: f == 296 ? nil : f < 300 ? f + 12 : f + 2, flags: f == 0 ? .marker : []))
        }
        trace[799].flags.insert(.lastFrame)
        let jb = JitterBuffer(frameSamples: 960)
        let out = drive(jb, trace, ticks: 810, timed: true)
        // (The excess the faster path leaves is shed as usual, a frame at a time.)
        XCTAssertEqual(jb.stats.late, 0, "stragglers dropped as late: \(out[300..<320].map { $0.map(String.init) ?? "-" })")
        XCTAssertTrue(out.contains(297))
    }

    func testAStragglerAfterAStarvingDoesNotTakeTheResumesRebase() {
        // The delay episode of testTheEndOfADelayEpisodeIsShedWithinSeconds, with a
        // late copy of frame 1499 (played before the starving) coming at tick 1511,
        // after the talkspurt ended and before the episode's first frame. It is
        // dropped as late; it must not be taken as the resume's first frame (its
        // rebase then used up, the episode's frames were learned as jitter: the
        // target rose to 80 ms, a review found).
        var trace: [Sent] = []
        for f in 0..<2000 { trace.append(Sent(frame: f, arrival: (1500..<1650).contains(f) ? f + 15 : f, flags: f == 0 ? .marker : [])) }
        trace.append(Sent(frame: 1499, arrival: 1511))
        trace[1999].flags.insert(.lastFrame)
        let jb = JitterBuffer(frameSamples: 960)
        var highest = 0.0
        for k in stride(from: 0, to: 2000, by: 10) {
            _ = drive(jb, trace, k..<(k + 10), timed: true)
            if k >= 1400 { highest = max(highest, jb.targetMs) }
        }
        XCTAssertLessThanOrEqual(highest, 40, "the episode taken for jitter")
        XCTAssertEqual(jb.stats.late, 1, "the straggler, and nothing the path delayed")
    }

    func testAStallsBacklogIsNotSkippedPastAPauseOrIntoTheNextTalkspurt() {
        // A 500 ms stall (frames 490-514 held until tick 515) that holds the end of
        // talkspurt A and perhaps the start of B (a marker). With A's last frame (or
        // a DTX frame) buffered, the delay goes for free in the pause after it: the
        // frames before it are not dropped (a review found 8 of them, 160 ms of
        // speech, dropped for nothing: B started at the same tick either way). A
        // marker in the backlog bounds the skip: B plays from its first frame.
        func played(aEnd: Int, endFlag: FrameFlags, bStart: Int) -> Set<Int> {
            var trace: [Sent] = []
            for f in 0..<800 where f <= aEnd || f >= bStart {
                var flags: FrameFlags = f == 0 || f == bStart ? .marker : []
                if f == aEnd { flags.formUnion(endFlag) }
                if f == 799 { flags.insert(.lastFrame) }
                trace.append(Sent(frame: f, arrival: (490..<515).contains(f) ? 515 : f, flags: flags))
            }
            let out = drive(JitterBuffer(frameSamples: 960), trace, ticks: 820, timed: true)
            return Set(out.compactMap { $0 }.filter { $0 >= 0 }.map { trace[$0].frame })
        }
        for endFlag in [FrameFlags.lastFrame, .dtx] {
            let p = played(aEnd: 507, endFlag: endFlag, bStart: 530)
            XCTAssertTrue((500...507).allSatisfy(p.contains), "A's end before a pause (\(endFlag)): \((500...507).filter { !p.contains($0) }) dropped")
            XCTAssertTrue((530..<540).allSatisfy(p.contains))
        }
        var p = played(aEnd: 505, endFlag: .lastFrame, bStart: 511)
        XCTAssertTrue((500...505).allSatisfy(p.contains), "A's end: \((500...505).filter { !p.contains($0) }) dropped")
        XCTAssertTrue((511..<521).allSatisfy(p.contains), "B's start: \((511..<521).filter { !p.contains($0) }) dropped")
        // A's last frame lost: the skip may drop A's backlog, never B's first frames.
        p = played(aEnd: 505, endFlag: [], bStart: 509)
        XCTAssertTrue((509..<519).allSatisfy(p.contains), "B's start: \((509..<519).filter { !p.contains($0) }) dropped")
    }

    func testAClockHeldWhileThePathGotSlowerIsNotShed() {
        // The reverse: bench-jitter's "delay step +80 ms" (20 ms ± 5 ms, 4 periods
        // slower from frame 4500 on; its third run). The buffer holds its clock while
        // the first slower frames are missing, so their cushion over the old path's
        // baseline looks 4 periods too deep until the history moves on; nothing is
        // buffered beyond them, so nothing is dropped for it. (Shed by the cushion
        // alone, 51 frames were lost here against 9: each drop underran again.)
        var n = TraceGenerator.Network()
        n.baseDelayMs = 20; n.jitterMs = 5; n.stepAtFrame = 4500; n.stepMs = 80
        let trace = TraceGenerator.generate(frames: 9000, talk: .continuous, network: n, seed: 3003)
        let r = JitterSimulation.run(trace, model: JitterBufferModel(), tickMs: 20, phase: 0.05)
        XCTAssertLessThanOrEqual(r.lateLost, 12, "the step's own losses only")
    }

    func testASinglePeriodOfExcessWaitsForAPauseWhenTheRendererReportsLevels() {
        // A clean path whose delay drops by one period at frame 200: the cushion is a
        // period too deep. Without level reports it is shed after `catchUpTicks`, by
        // dropping whatever frame plays then (mid-word, in speech: a 20 ms jump a
        // listener hears). A renderer that reports levels has it shed at the first
        // quiet moment (here from tick 400), and, were there none, after
        // `quietCatchUpTicks`. A deeper excess keeps `catchUpTicks` either way.
        func steps(dropBy periods: Int, report: ((Int) -> Bool)?) -> (ticks: [Int], skipped: UInt64) {
            var trace: [Sent] = []
            for f in 0..<1200 { trace.append(Sent(frame: f, arrival: f < 200 ? f + periods : f, flags: f == 0 ? .marker : [])) }
            trace[1199].flags.insert(.lastFrame)
            let jb = JitterBuffer(frameSamples: 960)
            var out: [Int?] = []
            for k in 0..<1210 {
                out += drive(jb, trace, k..<(k + 1))
                if let report { jb.reportPlayedLevel(quiet: report(k)) }
            }
            var ticks: [Int] = []
            var last: Int? = nil
            for (tick, i) in out.enumerated() {
                guard let i, i >= 0 else { continue }
                if let l = last, tick - i != l { ticks.append(tick) }
                last = tick - i
            }
            return (ticks, jb.stats.skipped)
        }
        let catchUp = JitterBuffer.Tuning().catchUpTicks, patience = JitterBuffer.Tuning().quietCatchUpTicks
        XCTAssertGreaterThan(patience, catchUp)
        let unreported = steps(dropBy: 1, report: nil)
        XCTAssertEqual(unreported.ticks, [200 + catchUp - 1])
        let pause = steps(dropBy: 1, report: { $0 >= 400 })
        XCTAssertEqual(pause.ticks, [401], "dropped after the first quiet frame, not mid-word at \(200 + catchUp - 1)")
        XCTAssertEqual(pause.skipped, 1)
        let loud = steps(dropBy: 1, report: { _ in false })
        XCTAssertEqual(loud.ticks, [200 + patience - 1], "no pause came: shed after quietCatchUpTicks")
        let deep = steps(dropBy: 3, report: { _ in false })
        XCTAssertEqual(deep.ticks.first, 200 + patience / 3 - 1, "three periods of excess and no pause: quietCatchUpTicks / 3")
        XCTAssertEqual(deep.skipped, 3)
    }

    func testASmallPacketInLoudAudioIsNotDroppedForItsSizeWhenTheRendererReportsLevels() {
        // helper-95: a tone started while others played had a period of excess from its
        // start; its Opus packets settled from ~68 bytes to 31 and the first small one
        // was dropped mid-note (a 20 ms jump in the tone), though the renderer reported
        // every block loud. Size stands in for level only when no level is reported.
        func drops(report: Bool) -> [Int] {
            var trace: [Sent] = []
            for f in 0..<800 {
                trace.append(Sent(frame: f, arrival: f < 200 ? f + 1 : f, flags: f == 0 ? .marker : [], bytes: f >= 300 ? 30 : 68))
            }
            trace[799].flags.insert(.lastFrame)
            let jb = JitterBuffer(frameSamples: 960)
            var out: [Int?] = []
            for k in 0..<810 {
                out += drive(jb, trace, k..<(k + 1))
                if report { jb.reportPlayedLevel(quiet: false) }
            }
            // The ticks at which the frame played is not the one after the last.
            var at: [Int] = []
            var last = -1
            for (tick, i) in out.enumerated() {
                guard let i, i >= 0 else { continue }
                if last >= 0 && i != last + 1 { at.append(tick) }
                last = i
            }
            return at
        }
        XCTAssertEqual(drops(report: false), [299], "no levels: the first small packet (frame 300, due at tick 299) is taken for a quiet frame")
        let patience = JitterBuffer.Tuning().quietCatchUpTicks
        XCTAssertEqual(drops(report: true), [200 + patience - 1], "loud: the excess waits for a pause, or quietCatchUpTicks")
    }

    func testBeyondTheTargetAMissingFrameIsWaitedForOnlyWhenLateFramesComeSoon() {
        // A continuous stream on time but for one frame in 67, which comes late. The
        // target (98 %) covers the on-time frames only. When the late frames come one
        // period late (a jitter tail), a missing frame is waited for beyond the target
        // and played. When they come four periods late (spikes), waiting a period
        // would not bring it: once the buffer has seen that, it no longer waits and
        // the frame is late either way.
        func run(lateBy: Int, likelihood: Double) -> JitterStats {
            var trace: [Sent] = []
            for f in 0..<2000 { trace.append(Sent(frame: f, arrival: f % 67 == 33 ? f + lateBy : f, flags: f == 0 ? .marker : [])) }
            trace[1999].flags.insert(.lastFrame)
            let jb = JitterBuffer(frameSamples: 960)
            jb.tuning.cleanQuantile = jb.tuning.startQuantile    // no clean-path cover: target 0
            jb.tuning.waitLikelihood = likelihood
            jb.tuning.catchUpTicks = 10                          // shed a waited period soon
            _ = drive(jb, trace, ticks: 2010)
            return jb.stats
        }
        let lateFrames = UInt64((0..<2000).filter { $0 % 67 == 33 }.count)
        let tail = run(lateBy: 1, likelihood: 0.5)
        XCTAssertEqual(tail.late, 0, "each late frame waited for and played")
        XCTAssertEqual(tail.waited, lateFrames)
        let spikes = run(lateBy: 4, likelihood: 0.5)
        XCTAssertEqual(spikes.late, lateFrames, "none could be waited for within a period")
        XCTAssertEqual(spikes.waited, 1, "only the first, before any frame that late was seen")
        let always = run(lateBy: 4, likelihood: 0)
        XCTAssertEqual(always.late, lateFrames)
        XCTAssertEqual(always.waited, lateFrames, "waiting anyway: a period held for nothing each time")
    }

    func testTalkspurtsSeparatedBySilenceDoNotRatchetLatency() {
        // Ten identical talkspurts (the same jitter pattern, a delay spike in each),
        // separated by a second of silence: each must end up no later than the first.
        var rng = TraceGenerator.Random(seed: 7)
        let pattern = (0..<50).map { j in j == 20 ? 90.0 : abs(rng.normal()) * 15 }
        var trace: [TraceFrame] = []
        for spurt in 0..<10 {
            for j in 0..<50 {
                let seq = UInt64(spurt * 50 + j)
                let slot = spurt * 100 + j          // 50 frames of silence after each spurt
                let send = Double(slot) * 20
                var flags: FrameFlags = []
                if j == 0 { flags.insert(.marker) }
                if j == 49 { flags.insert(.lastFrame) }
                trace.append(TraceFrame(seq: seq, timestamp: UInt32(slot * 960), flags: flags, sendMs: send,
                                        arrivalsMs: [send + 20 + pattern[j]]))
            }
        }
        let r = JitterSimulation.run(trace, model: JitterBufferModel())
        XCTAssertEqual(r.framesPlayed + r.lateLost, 500)
        var bySpurt = [[Double]](repeating: [], count: 10)
        for (d, q) in zip(r.delaysMs, r.playedSeqs) { bySpurt[Int(q) / 50].append(d) }
        // The latency each talkspurt ends with: its last ten frames played.
        let ends = bySpurt.map { $0.suffix(10).reduce(0, +) / 10 }
        let means = bySpurt.map { $0.reduce(0, +) / Double($0.count) }
        print("buffer delay per talkspurt (ms): mean \(means.map { Int($0) }), at the end \(ends.map { Int($0) })")
        // From the second talkspurt on, the same talkspurt must end with the same
        // latency every time: nothing accumulates across talkspurts.
        for e in ends.dropFirst(2) { XCTAssertLessThanOrEqual(e, ends[1] + 1, "latency ratcheted up across talkspurts") }
        XCTAssertLessThan(ends.max()!, 100)
    }

    func testSenderClockDriftKeepsPlayoutDelayBounded() {
        for rate in [1.001, 0.999] {
            var n = TraceGenerator.Network()
            n.jitterMs = 5
            n.senderClockRate = rate
            let frames = 30_000  // 10 minutes of 20 ms frames
            let trace = TraceGenerator.generate(frames: frames, network: n, seed: 11)
            let model = JitterBufferModel()
            let r = JitterSimulation.run(trace, model: model)
            let firstMinute = r.delaysMs.prefix(3000), lastMinute = r.delaysMs.suffix(3000)
            let a = firstMinute.reduce(0, +) / 3000, b = lastMinute.reduce(0, +) / 3000
            print("sender clock x\(rate): mean delay first minute \(Int(a)) ms, last minute \(Int(b)) ms, max \(Int(r.delaysMs.max()!)) ms, "
                  + "skipped \(model.jb.stats.skipped), waited \(model.jb.stats.waited)")
            XCTAssertLessThan(b, a + 20, "delay drifted upward")
            XCTAssertLessThan(r.delaysMs.max()!, 100)
            // 30,000 frames at 0.1 %: the fast sender's 30 surplus frames are dropped
            // (a few more for the jitter); the slow sender's deficit is waited for.
            XCTAssertGreaterThan(Double(r.framesPlayed), Double(frames) * 0.998)
        }
    }

    /// The target stops where waiting no longer pays: a tail of rare delay spikes is
    /// given up (less delay, a little more late loss), a body of jitter is covered as
    /// with the quantile alone.
    func testATailOfDelaySpikesIsGivenUpAndABodyOfJitterIsCovered() {
        func run(_ n: TraceGenerator.Network, rescue: Bool) -> (delay: Double, late: Double) {
            let trace = TraceGenerator.generate(frames: 9000, network: n, seed: 31)
            let model = JitterBufferModel()
            if !rescue { model.jb.tuning.rescueShare = 0 }
            let r = JitterSimulation.run(trace, model: model)
            return (r.delaysMs.reduce(0, +) / Double(r.delaysMs.count), 100 * Double(r.lateLost) / Double(r.framesArrived))
        }
        var spikes = TraceGenerator.Network()
        spikes.jitterMs = 4; spikes.spikeProbability = 0.01; spikes.spikeMs = 100
        let (a, b) = (run(spikes, rescue: true), run(spikes, rescue: false))
        print("1 % spikes: \(a) with the stop rule, \(b) with the 98 % target alone")
        XCTAssertLessThan(a.delay, 0.85 * b.delay, "the spike tail is still waited for")
        XCTAssertLessThan(a.late, 3.0, "more than the spikes are given up")
        var body = TraceGenerator.Network()
        body.jitterMs = 15
        let (c, d) = (run(body, rescue: true), run(body, rescue: false))
        print("jitter 15 ms: \(c) with the stop rule, \(d) with the 98 % target alone")
        XCTAssertEqual(c.delay, d.delay, accuracy: 0.5, "a body of jitter is covered as before")
        XCTAssertLessThan(c.late, 2.5)
    }

    // MARK: Bounds

    func testBoundsClampTheTarget() {
        let jb = JitterBuffer(frameSamples: 960)
        jb.setBounds(minMs: 60, maxMs: 100)
        XCTAssertEqual(jb.targetMs, 80, "three frames of cushion, plus the frame in play")
        // A clean stream starts three ticks after its first frame.
        var trace: [Sent] = []
        for f in 0..<20 { trace.append(Sent(frame: f, arrival: f, flags: f == 0 ? .marker : [])) }
        trace.append(Sent(frame: 20, arrival: 20, flags: .lastFrame))
        let out = drive(jb, trace, ticks: 30)
        // No history yet, but the bound holds from the first talkspurt (it started at
        // once before, cushionless, whatever the host had asked for).
        XCTAssertEqual(out.firstIndex { $0 == 0 }, 3, "the first talkspurt waits for the lower bound")
        // Jitter beyond the maximum: the target stays at the bound.
        let jb2 = JitterBuffer(frameSamples: 960)
        jb2.setBounds(minMs: 0, maxMs: 40)
        var rng = TraceGenerator.Random(seed: 2)
        var t2: [Sent] = []
        for f in 0..<300 { t2.append(Sent(frame: f, arrival: f + Int(rng.uniform() * 6), flags: f == 0 ? .marker : [])) }
        _ = drive(jb2, t2, ticks: 310)
        XCTAssertEqual(jb2.targetMs, 60, "capped at two frames of cushion")
        // Bad bounds are clamped, not trusted.
        jb2.setBounds(minMs: -5, maxMs: .nan)
        XCTAssertEqual(jb2.bounds.minMs, 0)
        XCTAssertEqual(jb2.bounds.maxMs, JitterBuffer.maxTargetMs)
        jb2.setBounds(minMs: 120, maxMs: 40)
        XCTAssertEqual(jb2.bounds.minMs, 120)
        XCTAssertEqual(jb2.bounds.maxMs, 120, "max is raised to min")
        jb2.setBounds(minMs: 1e9, maxMs: 1e9)
        XCTAssertEqual(jb2.bounds.minMs, JitterBuffer.maxTargetMs)
    }

    /// A device cannot move its clock while it plays, but may write a shorter block of
    /// silence: when a talkspurt's first frame would have its cushion a fraction of a
    /// period before the next tick (startEarlyTicks), the next tick comes then. Every
    /// talkspurt then waits its cushion and no more, whatever its phase against the
    /// device's ticks; on a clock nothing moves (a host that pulls) it waits up to a
    /// period more.
    func testStartsAlignedInSilenceWaitTheirCushionWhateverTheirPhase() {
        var trace: [TraceFrame] = []
        // Ten talkspurts of 50 frames, 2 s apart and 7 ms more each time (phases all
        // across the period); a 20 ms path with up to ±3 ms of jitter, none on the first
        // frames; the sender's timestamps advance by the pauses.
        for spurt in 0..<10 {
            let startMs = Double(spurt) * 2007
            for j in 0..<50 {
                let send = startMs + Double(j) * 20
                var flags: FrameFlags = []
                if j == 0 { flags.insert(.marker) }
                if j == 49 { flags.insert(.lastFrame) }
                let jitter = j == 0 ? 0 : Double((j * 5 + spurt) % 7) - 3
                trace.append(TraceFrame(seq: UInt64(spurt * 50 + j), timestamp: UInt32(send * 48), flags: flags, sendMs: send,
                                        arrivalsMs: [send + 20 + jitter]))
            }
        }
        func run(aligned: Bool) -> (first: [Double], mean: Double, concealed: Int, late: Int) {
            let m = JitterBufferModel()
            m.alignStarts = aligned
            // A start's cushion of more than a period: every first frame is here a tick
            // before it is due.
            m.jb.setBounds(minMs: 50, maxMs: 500)
            let r = JitterSimulation.run(trace, model: m, tickMs: 20, phase: 0.37)
            let first = zip(r.playedSeqs, r.delaysMs).filter { $0.0 % 50 == 0 && $0.0 > 0 }.map(\.1)
            return (first, r.meanDelayMs, r.concealedTicks, r.lateLost)
        }
        let a = run(aligned: true), f = run(aligned: false)
        func spread(_ x: [Double]) -> Double { x.max()! - x.min()! }
        print("first frames' delay (ms), aligned: \(a.first.map { Int($0.rounded()) }), on a fixed clock: \(f.first.map { Int($0.rounded()) }); "
              + "mean \(a.mean) against \(f.mean) ms")
        XCTAssertEqual(a.first.count, 9)
        XCTAssertLessThan(spread(a.first), 0.5, "aligned starts wait the same cushion")
        XCTAssertGreaterThan(spread(f.first), 10, "the fixed clock's phase was not varied")
        XCTAssertLessThan(a.mean, f.mean - 5, "the phase's wait is gone")
        XCTAssertEqual(a.concealed, 0)
        XCTAssertEqual(a.late, 0)
    }

    /// The move a start asks for is whole samples and a hair short of the excess, so
    /// the frame starts on the moved tick whatever the rounding of its cushion: one ask
    /// per start, never a second of almost a period (helper-96: with the exact excess,
    /// 261 of 5,900 starts missed the moved tick by rounding and asked again).
    func testEachAlignedStartAsksOnceAndStartsOnTheMovedTick() {
        // 200 talkspurts of 20 frames, each at another phase (1013.37 ms apart), on a
        // path of 25 ms with up to ±6 ms of jitter in fractions of a millisecond.
        var trace: [TraceFrame] = []
        for spurt in 0..<200 {
            for j in 0..<20 {
                let send = Double(spurt) * 1013.37 + Double(j) * 20
                var flags: FrameFlags = j == 0 ? .marker : []
                if j == 19 { flags.insert(.lastFrame) }
                let jitter = 6 * sin(Double(spurt * 20 + j) * 1.7)
                trace.append(TraceFrame(seq: UInt64(spurt * 20 + j), timestamp: UInt32((send * 48).rounded()), flags: flags,
                                        sendMs: send, arrivalsMs: [send + 25 + jitter]))
            }
        }
        let m = JitterBufferModel()
        m.alignStarts = true
        m.jb.setBounds(minMs: 50, maxMs: 500)   // a start's cushion of more than a period: every start asks
        var arrivals: [(t: Double, i: Int)] = []
        for (i, f) in trace.enumerated() { for a in f.arrivalsMs { arrivals.append((a, i)) } }
        arrivals.sort { $0.t < $1.t }
        var k = 0, now = arrivals[0].t + 7.3
        var moves = 0, missed = 0, starts = 0
        var movedBefore = false
        while now < arrivals.last!.t + 500 {
            while k < arrivals.count && arrivals[k].t <= now {
                let f = trace[arrivals[k].i]
                m.put(seq: f.seq, timestamp: f.timestamp, flags: f.flags, arrivalMs: arrivals[k].t)
                k += 1
            }
            let before = m.jb.stats.talkspurts
            _ = m.tick(nowMs: now)
            if m.jb.stats.talkspurts > before { starts += 1 }
            if movedBefore && m.jb.stats.talkspurts == before { missed += 1 }
            let move = m.clockMoveMs()
            if move > 0 { moves += 1 }
            XCTAssertLessThan(move, 20, "a move of a period or more")
            movedBefore = move > 0
            now += 20 - move
        }
        print("aligned starts: \(moves) moves for \(starts) talkspurts, \(missed) moved ticks without the start")
        XCTAssertGreaterThan(moves, starts * 3 / 4, "the starts asked for moves")
        XCTAssertEqual(missed, 0, "a moved tick without the start it was moved for")
    }

    func testBoundsSetTheTalkspurtStartCushion() {
        // With history, a talkspurt waits for the lower bound.
        let jb = JitterBuffer(frameSamples: 960)
        jb.setBounds(minMs: 60, maxMs: 500)
        var trace: [Sent] = []
        for f in 0..<10 { trace.append(Sent(frame: f, arrival: f, flags: f == 0 ? .marker : (f == 9 ? .lastFrame : []))) }
        for f in 60..<70 { trace.append(Sent(frame: f, arrival: f, flags: f == 60 ? .marker : (f == 69 ? .lastFrame : []))) }
        let out = drive(jb, trace, ticks: 80)
        XCTAssertEqual(out.firstIndex { $0 == 10 }, 63, "three ticks of cushion at the second talkspurt (frame 60)")
        XCTAssertEqual(jb.stats.plcFrames, 0)
    }
}
