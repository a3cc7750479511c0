import XCTest
import VoiceCatAudio
import VoiceCatProtocol
import VoiceCatSystem
@testable import VoiceCatClient

/// The renderer stops for a while (a host's sink that blocked, a paused server that
/// then delivers its backlog at once) while a talker goes on: the stream must come
/// back to its target delay, not play the backlog seconds late for good or take every
/// new frame for late. Simulated arrival and render times through the receive path
/// (inbox, jitter buffer); no sockets (the payloads are not Opus: their periods are
/// concealed, which does not change what the jitter buffer decides).
final class StallRecoveryTests: XCTestCase {
    private var receive: ReceiveSet!
    private let bus = MixBus(capacityFrames: 960)
    private var now = 100_000.0
    private let ssrc: UInt32 = 100
    private var seq: UInt64 = 0

    override func setUpWithError() throws {
        receive = try ReceiveSet(capacity: 4, networkWake: try WakeEvent())
        XCTAssertTrue(receive.add(RemoteStream(userID: 1, streamID: 1, ssrc: ssrc, kind: .mic, audio: .speech), username: "talker"))
    }

    private var slot: RemoteSlot { receive.slots[receive.slotIndex(ssrc: ssrc)!] }

    /// The talker's next frame, arriving at `at` (its timestamp advances a frame each).
    private func arrive(at: Double) {
        _ = [UInt8](repeating: 1, count: 60).withUnsafeBytes {
            slot.inbox.push(seq: seq, timestamp: UInt32(truncatingIfNeeded: seq * 960), flags: seq == 0 ? [.marker] : [],
                            arrivalMs: at, payload: $0)
        }
        seq += 1
    }

    /// `periods` of 20 ms: a frame arrives 7 ms into each, and the renderer renders at
    /// each period's end unless `stalled`.
    private func run(periods: Int, stalled: Bool = false) {
        for _ in 0..<periods {
            arrive(at: now + 7)
            now += 20
            if !stalled { receive.render(into: bus, frames: 960, nowMs: now) }
        }
    }

    private func jitterStats() throws -> (late: UInt64, plc: UInt64, depthMs: UInt32, targetMs: UInt32) {
        let st = try receive.stats(ssrc: ssrc, nowMs: now)
        return (st.jitter.late, st.jitter.plcFrames, st.currentDepthMs, st.targetDepthMs)
    }

    /// What the buffer holds right after the next frame arrived (before its render).
    private func depthAfterAnArrival() throws -> UInt32 {
        arrive(at: now + 7)
        let d = try jitterStats().depthMs
        now += 20
        receive.render(into: bus, frames: 960, nowMs: now)
        return d
    }

    func testAfterARenderStallTheStreamComesBackToItsTarget() throws {
        // The header (vc_set_mixed_output_sink): a sink that blocks leaves every stream
        // holding that much more audio, which its buffer sheds as late frames, so the mix
        // stays in real time. It kept it instead (a 200 ms stall left 160 ms more delay
        // for tens of seconds, 1 s left 940 ms), and after 2 s, more than its pool holds,
        // took every new frame for late for good: the talker was never heard again.
        for (stallMs, statsDuring) in [(200, false), (1000, false), (1000, true), (2000, false), (2000, true), (4000, false)] {
            setUp()
            try setUpWithError()
            now = 100_000; seq = 0
            run(periods: 100)
            let clean = try depthAfterAnArrival()
            let lateBefore = try jitterStats().late
            // A host reading the stream's statistics during the stall hands what came so
            // far to the buffer before the renderer is back.
            for k in 0..<(stallMs / 20) {
                run(periods: 1, stalled: true)
                if statsDuring && k % 25 == 24 { _ = try jitterStats() }
            }
            run(periods: 2)
            // Dropped as late, or by the inbox (64 frames) when it filled in the stall.
            let lostToStall = try jitterStats().late - lateBefore + slot.inbox.overflows.load(ordering: .relaxed)
            run(periods: 100)
            let lateBefore2 = try jitterStats().late
            run(periods: 100)
            let after = try depthAfterAnArrival()
            let st = try jitterStats()
            print("render stall of \(stallMs) ms\(statsDuring ? " (statistics read during it)" : ""): \(lostToStall) frames dropped "
                  + "late; 2 s later depth \(after) ms after an arrival (\(clean) before the stall), target \(st.targetMs) ms, "
                  + "\(st.late - lateBefore2) late since")
            XCTAssertEqual(st.late - lateBefore2, 0, "\(stallMs) ms stall: new frames taken for late")
            XCTAssertLessThanOrEqual(after, clean + 20, "\(stallMs) ms stall: still behind")
            XCTAssertLessThanOrEqual(st.targetMs, 40, "\(stallMs) ms stall: the stall was taken for jitter")
            XCTAssertGreaterThanOrEqual(Int(lostToStall), stallMs / 20 - 2, "\(stallMs) ms stall: what was due in it is dropped")
        }
    }

    func testABacklogDeliveredAtOnceIsNotKeptAsDelay() throws {
        // The server (or the path) stops for a while and then delivers what it held at
        // once, while the renderer goes on: the stream starves, then gets seconds of
        // frames in one burst. Played from the oldest, that backlog stayed as delay for
        // good (a 1 s stop left 780 ms), and past the pool (2 s) every new frame was
        // taken for late: the talker was never heard again. What exceeds the buffer's
        // bound (vc_set_jitter_bounds, 500 ms by default) is shed at once; a shorter
        // backlog is shed as excess cushion is (at a pause, a quiet frame, or a frame at
        // a time), as after a delay spike.
        for stopMs in [1000, 2000, 4000] {
            setUp()
            try setUpWithError()
            now = 100_000; seq = 0
            run(periods: 100)
            let clean = try depthAfterAnArrival()
            // Stopped: the renderer ticks, nothing arrives; then everything at once.
            let stopped = stopMs / 20
            for _ in 0..<stopped { now += 20; receive.render(into: bus, frames: 960, nowMs: now) }
            for _ in 0..<stopped { arrive(at: now + 7) }
            now += 20
            receive.render(into: bus, frames: 960, nowMs: now)
            run(periods: 100)
            let lateBefore = try jitterStats().late
            run(periods: 100)
            let after = try depthAfterAnArrival()
            let st = try jitterStats()
            print("a \(stopMs) ms stop then its backlog at once: 2 s later depth \(after) ms after an arrival (\(clean) before), "
                  + "target \(st.targetMs) ms, \(st.late - lateBefore) late since")
            XCTAssertEqual(st.late - lateBefore, 0, "\(stopMs) ms stop: new frames taken for late")
            XCTAssertLessThanOrEqual(after, 520, "\(stopMs) ms stop: more delay kept than the bound allows")
        }
    }

    func testAHostPullingSeveralPeriodsAtATimeIsNotStalled() throws {
        // A host that pulls 100 or 400 ms of the mix at a time takes that many periods at
        // once (a pull renders block after block, microseconds apart): its clock is then
        // that far ahead of the pull, not stalled until the next one.
        for pullMs in [100, 400, 500] {
            setUp()
            try setUpWithError()
            now = 100_000; seq = 0
            let blocks = pullMs / 20
            receive.setConsumerBurst(ms: Double(pullMs))   // as OutputStage tells it of pulls that large
            for _ in 0..<(12_000 / pullMs) {
                for _ in 0..<blocks { arrive(at: now + 7); now += 20 }
                for b in 0..<blocks { receive.render(into: bus, frames: 960, nowMs: now + Double(b) * 0.01) }
            }
            let st = try jitterStats()
            print("pulls of \(pullMs) ms: \(st.late) late, target \(st.targetMs) ms")
            XCTAssertEqual(st.late, 0, "\(pullMs) ms pulls: frames dropped between pulls")
        }
    }
}
