// A consumer that takes several periods at one instant (a host pulling 100 ms at a
// time): every frame of the burst must be here when it pulls.
import VoiceCatAudio
import VoiceCatProtocol
import XCTest

final class ConsumerBurstTests: XCTestCase {
    /// Frames sent every 20 ms from `startMs` (arrival = send + `delay(k)`), one
    /// talkspurt of `frames`; the consumer pulls `blocks(p)` periods at each pull, every
    /// pull's span later, all at the pull's time. Returns the playout of every tick.
    func run(burstMs: Double, frames: Int, startMs: Double, pullFrames: Int, seconds: Double,
             delay: (Int) -> Double = { _ in 1 }) -> (out: [JitterBuffer.Playout], jb: JitterBuffer) {
        let jb = JitterBuffer()
        jb.setConsumerBurst(ms: burstMs)
        var next = 0
        var rest = 0           // 48 kHz frames rendered beyond what the last pull took
        var pulled = 0
        var out: [JitterBuffer.Playout] = []
        let payload: [UInt8] = [1, 2, 3]
        while Double(pulled) / 48 < seconds * 1000 {
            let t = Double(pulled) / 48
            while next < frames, startMs + Double(next) * 20 + delay(next) <= t {
                var flags: FrameFlags = next == 0 ? .marker : []
                if next == frames - 1 { flags.insert(.lastFrame) }
                let at = startMs + Double(next) * 20 + delay(next)
                _ = payload.withUnsafeBytes { jb.insert(seq: UInt64(next), timestamp: UInt32(next * 960), flags: flags, payload: $0, arrivalMs: at) }
                next += 1
            }
            var need = pullFrames - rest
            while need > 0 {
                let p = jb.next(atMs: t)
                if case .packet(let s) = p { jb.release(s) }
                out.append(p)
                need -= 960
            }
            rest = -need
            pulled += pullFrames
        }
        return (out, jb)
    }

    /// A seeded arrival jitter of 1-6 ms per frame.
    func jitter(seed: UInt64) -> (Int) -> Double {
        var g = seed
        let delays = (0..<400).map { _ -> Double in
            g = g &* 6364136223846793005 &+ 1442695040888963407
            return 1 + Double((g >> 33) % 500) / 100
        }
        return { delays[$0] }
    }

    /// Pulls of 4410 frames (about 92 ms, 4-5 periods each) at real-time pace: with the
    /// burst kept in hand nothing is concealed at any phase of the talkspurt against
    /// the pulls, with or without jitter; the start's excess (up to a pull) is shed by
    /// skipping a few frames. Without it the first talkspurt underruns at most phases.
    func testAConsumerTakingSeveralPeriodsAtOnceConcealsNothing() {
        var concealedWithout = 0
        for start in stride(from: 3.0, to: 100, by: 11) {
            for seed: UInt64 in [0, 1, 2] {
                let delay = seed == 0 ? { (_: Int) in 1.0 } : jitter(seed: seed &* 1000 &+ UInt64(start))
                let (out, jb) = run(burstMs: 100, frames: 250, startMs: start, pullFrames: 4410, seconds: 6, delay: delay)
                let played = out.filter { if case .packet = $0 { return true } else { return false } }.count
                XCTAssertEqual(out.filter { $0 == .conceal }.count, 0, "start \(start) seed \(seed)")
                XCTAssertEqual(jb.stats.late, 0, "start \(start) seed \(seed)")
                XCTAssertLessThanOrEqual(jb.stats.skipped, 4, "start \(start) seed \(seed)")
                XCTAssertEqual(UInt64(played) + jb.stats.skipped, 250, "start \(start) seed \(seed): every frame played or skipped")
                let (without, _) = run(burstMs: 0, frames: 250, startMs: start, pullFrames: 4410, seconds: 6, delay: delay)
                concealedWithout += without.filter { $0 == .conceal }.count
            }
        }
        XCTAssertGreaterThan(concealedWithout, 0, "the case this guards against")
    }

    /// A host's lower bound holds from the first talkspurt, before anything is known
    /// of the stream: its first frame waits until that many frames after it are here,
    /// or (a talkspurt shorter than the bound) until it has waited that long.
    func testALowerBoundHoldsFromTheFirstTalkspurt() {
        let payload: [UInt8] = [1]
        for (frames, expectFirst) in [(20, 3), (2, 3)] {
            let jb = JitterBuffer()
            jb.setBounds(minMs: 60, maxMs: 0)         // 3 periods beyond the frame in play
            var firstPlayed: Int? = nil
            for tick in 0..<30 {
                if tick < frames {
                    var flags: FrameFlags = tick == 0 ? .marker : []
                    if tick == frames - 1 { flags.insert(.lastFrame) }
                    _ = payload.withUnsafeBytes { jb.insert(seq: UInt64(tick), timestamp: UInt32(tick * 960), flags: flags, payload: $0, arrivalMs: Double(tick) * 20) }
                }
                if case .packet(let s) = jb.next(atMs: Double(tick) * 20 + 1) {
                    if firstPlayed == nil { firstPlayed = tick }
                    jb.release(s)
                }
            }
            XCTAssertEqual(firstPlayed, expectFirst, "\(frames) frames: the first played at tick \(String(describing: firstPlayed))")
            XCTAssertEqual(jb.stats.underruns, 0)
        }
    }
}
