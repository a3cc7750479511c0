// The sink renderer's phase (RenderPhase) and the jitter buffer's side of it
// (playedSlackTicks, moveClock): the policy alone, then closed loops in simulated
// time with a real JitterBuffer, judged by what was played (every frame, in order,
// nothing concealed) and by how long frames waited for their tick.
import VoiceCatAudio
import VoiceCatProtocol
import XCTest

final class RenderPhaseTests: XCTestCase {
    func testMovesOnlyAfterAWindowOfSlackAndKeepsAMargin() {
        var p = RenderPhase()
        XCTAssertEqual(p.rendered(slackMs: 12, endSlackMs: nil, held: false, quiet: false), 0)
        XCTAssertEqual(p.rendered(slackMs: nil, endSlackMs: nil, held: false, quiet: false), 0, "a block that played nothing does not count")
        XCTAssertEqual(p.rendered(slackMs: 14, endSlackMs: nil, held: false, quiet: false), 0)
        XCTAssertEqual(p.rendered(slackMs: 13, endSlackMs: nil, held: false, quiet: false), 12 - p.marginMs, "the least slack of the window, less the margin")
        for _ in 0..<9 { XCTAssertEqual(p.rendered(slackMs: p.marginMs + 0.5, endSlackMs: nil, held: false, quiet: false), 0, "under a step: stays") }
        XCTAssertEqual(p.leadMs, 12 - p.marginMs)
        XCTAssertEqual(p.moves, 1)
    }

    func testAConcealedFrameStartsTheCountAgain() {
        var p = RenderPhase()
        _ = p.rendered(slackMs: 10, endSlackMs: nil, held: false, quiet: false)
        _ = p.rendered(slackMs: 10, endSlackMs: nil, held: false, quiet: false)
        XCTAssertEqual(p.rendered(slackMs: nil, endSlackMs: nil, held: true, quiet: false), 0)
        XCTAssertEqual(p.rendered(slackMs: 10, endSlackMs: nil, held: false, quiet: false), 0)
        XCTAssertEqual(p.rendered(slackMs: 10, endSlackMs: nil, held: false, quiet: false), 0)
        XCTAssertEqual(p.rendered(slackMs: 10, endSlackMs: nil, held: false, quiet: false), 10 - p.marginMs)
    }

    func testATalkspurtEndThatWouldMissItsTickMovesTheTicksLater() {
        var p = RenderPhase()
        // Frames 2 ms before the tick; the last frame of a talkspurt comes 6 ms later.
        for _ in 0..<2 { XCTAssertEqual(p.rendered(slackMs: -4, endSlackMs: -4, held: false, quiet: false), 0) }
        XCTAssertEqual(p.rendered(slackMs: -4, endSlackMs: -4, held: false, quiet: false), -(4 + p.marginMs))
        XCTAssertEqual(p.leadMs, -(4 + p.marginMs))
        // A target the end does not set (a jittery stream still growing its cushion)
        // is left to the jitter buffer: no move.
        for _ in 0..<3 { XCTAssertEqual(p.rendered(slackMs: -4, endSlackMs: 3, held: false, quiet: false), 0) }
        // Behind the schedule by more than half a period: a free moment gives it back.
        for _ in 0..<3 { _ = p.rendered(slackMs: -6, endSlackMs: -6, held: false, quiet: false) }
        XCTAssertLessThan(p.leadMs, -10)
        XCTAssertEqual(p.rendered(slackMs: nil, endSlackMs: nil, held: false, quiet: true), p.periodMs)
    }

    func testTheLeadIsBoundedAndGivenBackAWholePeriodWhenNothingPlays() {
        var p = RenderPhase()
        var lead = 0.0
        for _ in 0..<30 { lead += p.rendered(slackMs: 15, endSlackMs: nil, held: false, quiet: false) }
        XCTAssertEqual(lead, p.leadMs)
        XCTAssertLessThan(p.leadMs, 2 * p.periodMs, "never two periods ahead of the schedule")
        XCTAssertGreaterThanOrEqual(p.leadMs, p.periodMs)
        XCTAssertEqual(p.rendered(slackMs: nil, endSlackMs: nil, held: false, quiet: true), -p.periodMs, "a free moment gives a period back")
        XCTAssertLessThan(p.leadMs, p.periodMs)
        XCTAssertEqual(p.rendered(slackMs: nil, endSlackMs: nil, held: false, quiet: true), 0, "less than a period ahead: stays")
    }

    /// One frame: its place on the sender's clock (frames), arrival (ms), flags.
    struct Sent { var frame: Int; var arrivalMs: Double; var flags: FrameFlags }

    /// Talkspurts of `talk` frames with `pause` frames between them; frame at slot s
    /// arrives at 20 s + offset(spurt) + a little jitter (0–0.8 ms); a talkspurt's
    /// last frame (padded, last-frame flag) comes `endLateMs` later, as a sender
    /// sends it once its queue has been dry for a while.
    func trace(spurts: Int, talk: Int, pause: Int, endLateMs: Double, offset: (Int) -> Double) -> [Sent] {
        var out: [Sent] = []
        for spurt in 0..<spurts {
            for j in 0..<talk {
                let slot = spurt * (talk + pause) + j
                var flags: FrameFlags = []
                if j == 0 { flags.insert(.marker) }
                if j == talk - 1 { flags.insert(.lastFrame) }
                let jitter = Double((slot * 7) % 5) * 0.2
                out.append(Sent(frame: slot, arrivalMs: Double(slot) * 20 + offset(spurt) + jitter + (j == talk - 1 ? endLateMs : 0),
                                flags: flags))
            }
        }
        return out
    }

    struct Run {
        var played: [Int] = []          // indices into the trace, in playout order
        var concealed = 0
        var waitsMs: [Double] = []      // tick time − arrival of each frame played
        var leads: [Double] = []
    }

    /// Renders every 20 ms, moved by RenderPhase when `aligned`, as the sink driver
    /// does: at each tick, insert what arrived, move the buffer's clock by the move
    /// decided at the block before, then play.
    func render(_ trace: [Sent], ticks: Int, aligned: Bool) -> Run {
        let jb = JitterBuffer()
        var phase = RenderPhase()
        var run = Run()
        var now = 0.0, moved = 0.0, k = 0
        for _ in 0..<ticks {
            while k < trace.count && trace[k].arrivalMs <= now {
                let f = trace[k]
                let tag: [UInt8] = [UInt8(k & 0xff), UInt8(k >> 8)]
                _ = tag.withUnsafeBytes { jb.insert(seq: UInt64(k), timestamp: UInt32(f.frame * 960), flags: f.flags, payload: $0, arrivalMs: f.arrivalMs) }
                k += 1
            }
            jb.moveClock(earlierByMs: moved)
            let playout = jb.next(atMs: now)
            switch playout {
            case .packet(let s):
                let p = jb.payload(s)
                let i = Int(p[0]) | Int(p[1]) << 8
                run.played.append(i)
                run.waitsMs.append(now - trace[i].arrivalMs)
                jb.release(s)
            case .conceal, .fec: run.concealed += 1
            case .silence, .comfortNoise: break
            }
            let slack = jb.playedSlackTicks
            moved = 0
            if aligned {
                let end = jb.playedEndSlackTicks
                moved = phase.rendered(slackMs: slack.isNaN ? nil : slack * 20, endSlackMs: end.isNaN ? nil : end * 20,
                                       held: playout == .conceal && jb.talking,
                                       quiet: (playout == .silence || playout == .comfortNoise) && !jb.talking)
            }
            run.leads.append(phase.leadMs)
            now += 20 - moved
        }
        return run
    }

    /// One talker, frames 3 ms after the tick (17 ms of waiting at a fixed phase):
    /// the ticks move to the arrivals; every frame still plays, in order, nothing is
    /// concealed (talkspurt ends included, whose last frame comes 5.5 ms late).
    func testTicksMoveToTheArrivalsWithoutConcealingAnything() {
        let t = trace(spurts: 4, talk: 100, pause: 25, endLateMs: 5.5) { _ in 3 }
        let fixed = render(t, ticks: 520, aligned: false)
        let moved = render(t, ticks: 520, aligned: true)
        XCTAssertEqual(fixed.played, Array(t.indices))
        XCTAssertEqual(moved.played, Array(t.indices), "every frame played once, in order")
        XCTAssertEqual(moved.concealed, 0, "nothing concealed, talkspurt ends included")
        func median(_ xs: [Double]) -> Double { xs.sorted()[xs.count / 2] }
        let settled = moved.waitsMs.enumerated().filter { $0.offset % 100 >= 10 }.map(\.element)
        print("wait for the tick: fixed phase median \(median(fixed.waitsMs)) ms, moved \(median(settled)) ms; lead at the end \(moved.leads.last!) ms")
        XCTAssertGreaterThan(median(fixed.waitsMs), 15, "the fixed phase waits most of a period")
        // What is kept: a talkspurt end's lateness (6 ms assumed, 5.5–6.3 seen), the
        // margin (1.5 ms) and the target's bin (1.25 ms).
        XCTAssertLessThan(median(settled), 10, "frames wait for their tick only for what is kept in hand")
        XCTAssertGreaterThan(settled.min()!, 0)
    }

    /// Each talkspurt comes 8 ms earlier in the period than the one before (a sender
    /// whose talkspurts start wherever its host fed them): the ticks follow, stay less
    /// than two periods ahead of the schedule and give a period back in the pauses.
    func testTheLeadStaysBoundedAsTheTalkersPhaseWanders() {
        let t = trace(spurts: 8, talk: 50, pause: 25, endLateMs: 5.5) { spurt in 18 - 8 * Double(spurt) }
        let run = render(t, ticks: 620, aligned: true)
        XCTAssertEqual(run.played, Array(t.indices), "every frame played once, in order")
        XCTAssertEqual(run.concealed, 0)
        XCTAssertLessThan(run.leads.max()!, 40)
        XCTAssertGreaterThan(run.leads.min()!, -20)
        let settled = run.waitsMs.enumerated().filter { $0.offset % 50 >= 10 }.map(\.element)
        let sorted = settled.sorted()
        print("wandering phase: waits median \(sorted[sorted.count / 2]) ms, max \(sorted.last!) ms; leads \(Set(run.leads.map { Int($0) }).sorted())")
        XCTAssertLessThan(sorted[sorted.count / 2], 10)
    }
}
