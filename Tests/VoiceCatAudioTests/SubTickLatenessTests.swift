// The jitter buffer's decisions when the consumer gives tick times (next(atMs:)):
// arrivals are placed within the period, so a cushion costs what it covers. Small
// hand-made arrival sequences in simulated time (no clocks), pinned with exact
// counts.
import VoiceCatAudio
import VoiceCatProtocol
import XCTest

final class SubTickLatenessTests: XCTestCase {
    /// One sent frame: its position on the sample clock (timestamp / 960), when it
    /// arrives in ms on the tick clock (ticks at 0, 20, 40, …; nil: lost), its flags.
    struct Sent {
        var frame: Int
        var arrivalMs: Double?
        var flags: FrameFlags = []
    }

    /// Ticks `ticks` times, every 20 ms from 0, inserting every frame that arrived
    /// up to the tick before it; with `tickTimes` the ticks are given their times.
    /// Returns per tick the index in `trace` of the frame played, -1 FEC, -2 PLC, nil
    /// silence.
    func drive(_ jb: JitterBuffer, _ trace: [Sent], ticks: Int, tickTimes: Bool = true) -> [Int?] {
        let order = trace.indices.filter { trace[$0].arrivalMs != nil }.sorted { trace[$0].arrivalMs! < trace[$1].arrivalMs! }
        var k = 0
        var out: [Int?] = []
        for tick in 0..<ticks {
            let now = Double(tick) * 20
            while k < order.count && trace[order[k]].arrivalMs! <= now {
                let i = order[k], f = trace[i]
                let tag: [UInt8] = [UInt8(i & 0xff), UInt8(i >> 8)]
                _ = tag.withUnsafeBytes {
                    jb.insert(seq: UInt64(i), timestamp: UInt32(f.frame * 960), flags: f.flags, payload: $0, arrivalMs: f.arrivalMs!)
                }
                k += 1
            }
            switch tickTimes ? jb.next(atMs: now) : jb.next() {
            case .packet(let s): let p = jb.payload(s); out.append(Int(p[0]) | Int(p[1]) << 8); jb.release(s)
            case .fec: out.append(-1)
            case .conceal: out.append(-2)
            case .silence, .comfortNoise: out.append(nil)
            }
        }
        return out
    }

    /// Talkspurts of `talk` frames with `pause` frames of pause between them; frame
    /// f (on the sender's wall clock, in frames) arrives at 20 f + `offset(f)` ms.
    /// `legacy`: the sender's timestamps stand still over the pauses.
    func talkspurts(count: Int, talk: Int, pause: Int, legacy: Bool = false, offset: (Int) -> Double) -> [Sent] {
        var out: [Sent] = []
        for spurt in 0..<count {
            for j in 0..<talk {
                let slot = spurt * (talk + pause) + j
                var flags: FrameFlags = []
                if j == 0 { flags.insert(.marker) }
                if j == talk - 1 { flags.insert(.lastFrame) }
                out.append(Sent(frame: legacy ? spurt * talk + j : slot, arrivalMs: Double(slot) * 20 + offset(slot), flags: flags))
            }
        }
        return out
    }

    /// Per talkspurt, the alignments (tick − sender slot) its frames were played with.
    func alignments(_ out: [Int?], talk: Int, pause: Int, count: Int) -> [Set<Int>] {
        var sets = [Set<Int>](repeating: [], count: count)
        for (tick, i) in out.enumerated() {
            guard let i, i >= 0 else { continue }
            let spurt = i / talk
            sets[spurt].insert(tick - (spurt * (talk + pause) + i % talk))
        }
        return sets
    }

    func testACoverThatCostsUpToHalfAPeriodIsTakenAtTalkspurtStartUnlessTunedCheaper() {
        // Frames arrive 5 ms before a tick, one in twenty 4 ms after it: 9 ms later,
        // but past the tick. Known to whole ticks, the 99.8 % cover costs a period more
        // than the 90 % one (cleanTargetTicks); known within the period, 0.45 of one,
        // under cleanStartTicks (0.5): every talkspurt after the first starts a period
        // later and none has to wait (no concealed period in speech).
        // Tuned to take the cover only when it costs at most a quarter period
        // (cleanStartTicks 0.25; here it costs 0.45), talkspurts start on their first
        // frame's tick instead and the first late frame is waited for (one concealed
        // period), after which the talkspurt plays one period later to its end.
        let offset: (Int) -> Double = { $0 % 20 == 7 ? 24 : 15 }
        let trace = talkspurts(count: 6, talk: 60, pause: 40, offset: offset)
        let ticks = 6 * 100 + 10

        for tickTimes in [false, true] {
            let jb = JitterBuffer(frameSamples: 960)
            let align = alignments(drive(jb, trace, ticks: ticks, tickTimes: tickTimes), talk: 60, pause: 40, count: 6)
            XCTAssertEqual(jb.stats.talkspurts, 6)
            XCTAssertEqual(jb.stats.late, 0)
            XCTAssertEqual(Array(align.dropFirst()), [Set([2]), [2], [2], [2], [2]], "a period of cushion from the start (tick times: \(tickTimes))")
            XCTAssertEqual(jb.stats.waited, 1, "only in the first talkspurt, before anything was known (tick times: \(tickTimes))")
        }

        let cheap = JitterBuffer(frameSamples: 960)
        cheap.tuning.cleanStartTicks = 0.25
        let cheapAlign = alignments(drive(cheap, trace, ticks: ticks), talk: 60, pause: 40, count: 6)
        XCTAssertEqual(cheap.stats.talkspurts, 6)
        XCTAssertEqual(cheap.stats.late, 0, "late frames are waited for, not given up")
        XCTAssertEqual(Array(cheapAlign.dropFirst()), [Set([1, 2]), [1, 2], [1, 2], [1, 2], [1, 2]],
                       "each talkspurt starts on its first frame's tick and realigns once")
        XCTAssertEqual(cheap.stats.waited, 6, "one period waited for per talkspurt")
        XCTAssertEqual(cheap.targetMs, 30, "the target covers the late frames: half a period (in 1/16 steps) beyond the frame in play")
    }

    func testACheapCoverIsTakenAtTalkspurtStart() {
        // Frames arrive 2 ms before a tick, one in twenty 1 ms after it: covering that
        // one costs 3 ms, under a quarter period, so every talkspurt after the first
        // starts with it and none has to wait or realign.
        let offset: (Int) -> Double = { $0 % 20 == 7 ? 21 : 18 }
        let trace = talkspurts(count: 6, talk: 60, pause: 40, offset: offset)
        let jb = JitterBuffer(frameSamples: 960)
        let align = alignments(drive(jb, trace, ticks: 6 * 100 + 10), talk: 60, pause: 40, count: 6)
        XCTAssertEqual(jb.stats.late, 0)
        XCTAssertEqual(Array(align.dropFirst()), [Set([2]), [2], [2], [2], [2]], "one alignment per talkspurt")
        XCTAssertEqual(jb.stats.waited, 1, "only in the first talkspurt")
    }

    func testARebasedMarkerIsTakenAsATypicalFrameNotTheEarliest() {
        // An old sender (timestamps stand still over each pause) whose frames arrive
        // 11, 15, 19, 23 or 27 ms after the tick before their own, in turn; each
        // talkspurt's first frame comes 27 ms after, the latest, and rebases the
        // timeline. Taken as the earliest, it can make the talkspurt start a period
        // later than its frames need; taken as typical (median lateness), the
        // talkspurts start where those of a sender whose timestamps advance do.
        let spread: [Double] = [11, 15, 19, 23, 27]
        func run(legacy: Bool, median: Bool) -> (align: [Set<Int>], late: UInt64, waited: UInt64) {
            let trace = talkspurts(count: 6, talk: 50, pause: 31, legacy: legacy) { slot in
                slot % 81 == 0 ? 27 : spread[slot % spread.count]
            }
            let jb = JitterBuffer(frameSamples: 960)
            jb.tuning.rebaseToMedian = median
            let align = alignments(drive(jb, trace, ticks: 6 * 81 + 10), talk: 50, pause: 31, count: 6)
            return (Array(align.dropFirst()), jb.stats.late, jb.stats.waited)
        }
        let modern = run(legacy: false, median: true)
        XCTAssertEqual(modern.align, [Set([2]), [2], [2], [2], [2]])
        XCTAssertEqual(modern.late, 0)
        let typical = run(legacy: true, median: true)
        XCTAssertEqual(typical.align, modern.align, "the old sender's talkspurts start as the new sender's")
        XCTAssertEqual(typical.late, 0)
        XCTAssertEqual(typical.waited, modern.waited)
        let earliest = run(legacy: true, median: false)
        // Taken as the earliest, talkspurts start a period later (how many depends on
        // how the baseline then settles among the frames that look early).
        XCTAssertTrue(earliest.align.contains(Set([3])), "taken as the earliest: a period later, \(earliest.align)")
        XCTAssertFalse(earliest.align.contains { $0.contains { $0 < 2 } })
    }

    func testAStreamWithNothingKnownWaitsATickWhenItsFirstFrameCameJustBeforeIt() {
        // A session's first talker has no history and nothing to be seeded from. Its
        // frames come 0.5 ms before the listener's ticks, one in five 1 ms after (a
        // feeder and a puller on one clock): played at the first tick, the first frame
        // that comes after its tick underruns (a concealed period in the first words,
        // and a realignment). Arriving that close to the tick, the first frame waits
        // one: one alignment, nothing concealed. Arriving well before it (8 ms), it
        // still plays at once; so it does when the tick times are not given.
        func run(_ offset: @escaping (Int) -> Double, tickTimes: Bool = true, margin: Double? = nil)
            -> (align: [Set<Int>], concealed: UInt64) {
            let jb = JitterBuffer(frameSamples: 960)
            if let margin { var t = jb.tuning; t.unknownStartMarginTicks = margin; jb.tuning = t }
            let trace = talkspurts(count: 3, talk: 50, pause: 20, offset: offset)
            let align = alignments(drive(jb, trace, ticks: 3 * 70 + 5, tickTimes: tickTimes), talk: 50, pause: 20, count: 3)
            return (align, jb.stats.plcFrames)
        }
        let close: (Int) -> Double = { $0 % 5 == 4 ? 21 : 19.5 }
        let waited = run(close)
        XCTAssertEqual(waited.align, [Set([2]), [2], [2]], "the first talkspurt starts a tick later, as the others")
        XCTAssertEqual(waited.concealed, 0)
        let atOnce = run(close, margin: 0)
        XCTAssertEqual(atOnce.align.first, Set([1, 2]), "without the margin: the first late frame realigns it")
        XCTAssertGreaterThan(atOnce.concealed, 0)
        let early = run { $0 % 5 == 4 ? 12 : 8 }
        XCTAssertEqual(early.align, [Set([1]), [1], [1]], "8 ms before the tick: played at once")
        XCTAssertEqual(early.concealed, 0)
        let untimed = run(close, tickTimes: false)
        XCTAssertEqual(untimed.align.first, Set([1, 2]), "whole-tick lateness: as before")
    }

    func testAFreshStreamSeededWithAnotherStreamsLatenessStartsWithItsCushion() {
        // Frames arrive 12 ms into their own slot, one in five 22 ms: 2 ms after the
        // tick that plays the others one period on. A stream that has seen this path
        // knows its talkspurts need half a period of cushion. A new stream on the same
        // path knows nothing: it plays its first frame at once, and the first late
        // frame underruns (a concealed period in the first words, and a realignment).
        // Seeded with the first stream's lateness, its first talkspurt starts like the
        // others, a period later, and nothing is concealed.
        let offset: (Int) -> Double = { $0 % 5 == 4 ? 22 : 12 }
        let donor = JitterBuffer(frameSamples: 960)
        _ = drive(donor, talkspurts(count: 1, talk: 300, pause: 0, offset: offset), ticks: 305)
        XCTAssertEqual(donor.framesObserved, 298, "every frame but the marker and the last is jitter")
        let prior = LatenessPrior()
        donor.copyLateness(into: prior)
        XCTAssertEqual(prior.frames, 298)

        let trace = talkspurts(count: 3, talk: 50, pause: 20, offset: offset)
        func run(seeded: Bool) -> (align: [Set<Int>], concealed: UInt64) {
            let jb = JitterBuffer(frameSamples: 960)
            if seeded { jb.seed(from: prior) }
            let align = alignments(drive(jb, trace, ticks: 3 * 70 + 5), talk: 50, pause: 20, count: 3)
            return (align, jb.stats.plcFrames)
        }
        let fresh = run(seeded: false)
        XCTAssertEqual(fresh.align.first, Set([1, 2]), "unseeded: the first talkspurt realigns at its first late frame")
        XCTAssertGreaterThan(fresh.concealed, 0)
        XCTAssertEqual(Array(fresh.align.dropFirst()), [Set([2]), [2]])
        let seeded = run(seeded: true)
        XCTAssertEqual(seeded.align, [Set([2]), [2], [2]], "seeded: one alignment per talkspurt from the first")
        XCTAssertEqual(seeded.concealed, 0)

        // A prior of another frame length is rescaled (lateness is kept in periods):
        // the same path seen by a 10 ms stream (arrivals 2 ms into the slot, one in five
        // 12 ms: half a 20 ms period later) seeds the 20 ms stream the same way.
        let donor10 = JitterBuffer(frameSamples: 480)
        var trace10: [Sent] = []
        for f in 0..<600 {
            var flags: FrameFlags = f == 0 ? [.marker] : []
            if f == 599 { flags.insert(.lastFrame) }
            trace10.append(Sent(frame: f, arrivalMs: Double(f) * 10 + (f % 5 == 4 ? 12 : 2), flags: flags))
        }
        let order = trace10.indices.sorted { trace10[$0].arrivalMs! < trace10[$1].arrivalMs! }
        var k = 0
        for tick in 0..<605 {
            let now = Double(tick) * 10
            while k < order.count && trace10[order[k]].arrivalMs! <= now {
                let f = trace10[order[k]]
                _ = [UInt8(0)].withUnsafeBytes {
                    donor10.insert(seq: UInt64(f.frame), timestamp: UInt32(f.frame * 480), flags: f.flags, payload: $0,
                                   arrivalMs: f.arrivalMs!)
                }
                k += 1
            }
            if case .packet(let s) = donor10.next(atMs: now) { donor10.release(s) }
        }
        donor10.copyLateness(into: prior)
        XCTAssertEqual(run(seeded: true).align, [Set([2]), [2], [2]], "seeded from a 10 ms stream")

        // An empty prior changes nothing.
        let none = LatenessPrior()
        JitterBuffer(frameSamples: 960).copyLateness(into: none)
        XCTAssertEqual(none.frames, 0)
        let jb = JitterBuffer(frameSamples: 960)
        jb.seed(from: none)
        XCTAssertEqual(alignments(drive(jb, trace, ticks: 3 * 70 + 5), talk: 50, pause: 20, count: 3), fresh.align)
    }
}
