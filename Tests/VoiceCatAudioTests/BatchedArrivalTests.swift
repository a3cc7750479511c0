// The receive path may hand frames to the jitter buffer in batches (the network
// thread drains its socket in bursts; frames wait in a ring until the renderer takes
// them). With arrival times and tick times the buffer measures lateness from when a
// frame arrived, so its statistics do not depend on when it was handed over.
import VoiceCatAudio
import VoiceCatProtocol
import VoiceCatSimulation
import XCTest

final class BatchedArrivalTests: XCTestCase {
    /// Replays one arrival trace twice: frames inserted the moment they arrive, and
    /// frames inserted in batches by a "network thread" that wakes every 45 ms, out of
    /// phase with the 20 ms ticks. The lateness statistics (the target after every
    /// tick, losses, the FEC cushion's view of the stream) come out the same.
    func testBatchedHandOverGivesTheSameStatisticsAsPerDatagram() {
        var net = TraceGenerator.Network()
        net.baseDelayMs = 15; net.jitterMs = 12; net.spikeProbability = 0.01; net.spikeMs = 150
        let trace = TraceGenerator.generate(frames: 3000, network: net, seed: 21)
        var arrivals: [(t: Double, i: Int)] = []
        for (i, f) in trace.enumerated() { for a in f.arrivalsMs { arrivals.append((a, i)) } }
        arrivals.sort { $0.t < $1.t }

        func run(wakeEveryMs: Double?, tickTimes: Bool = true) -> (targets: [Double], stats: JitterStats) {
            let jb = JitterBuffer(capacity: 128, maxPayload: 8, frameSamples: 960)
            var targets: [Double] = []
            var k = 0
            var nextWake = wakeEveryMs.map { arrivals[0].t + $0 * 0.61 } ?? 0
            let payload = [UInt8](repeating: 0, count: 8)
            func hand(upTo t: Double) {
                while k < arrivals.count && arrivals[k].t <= t {
                    let f = trace[arrivals[k].i]
                    payload.withUnsafeBytes {
                        _ = jb.insert(seq: f.seq, timestamp: f.timestamp, flags: f.flags, payload: $0,
                                      arrivalMs: arrivals[k].t)
                    }
                    k += 1
                }
            }
            var now = arrivals[0].t + 7.3
            let end = arrivals.last!.t + 500
            while now < end {
                if let period = wakeEveryMs {
                    // The network thread wakes on its own schedule and hands over what arrived.
                    while nextWake <= now { hand(upTo: nextWake); nextWake += period }
                } else {
                    hand(upTo: now)
                }
                switch tickTimes ? jb.next(atMs: now) : jb.next() {
                case .packet(let s): jb.release(s)
                default: break
                }
                targets.append(jb.targetMs)
                now += 20
            }
            return (targets, jb.stats)
        }
        let direct = run(wakeEveryMs: nil)
        let batched = run(wakeEveryMs: 45)
        XCTAssertEqual(direct.stats.packetsReceived, batched.stats.packetsReceived)
        XCTAssertEqual(direct.stats.packetsLost, batched.stats.packetsLost)
        // A batch reaches the statistics up to 45 ms (three ticks) later: the batched
        // target at each tick is one the direct run had within the last three ticks.
        func mismatches(_ a: [Double], _ b: [Double]) -> Int {
            b.indices.filter { t in !a[max(0, t - 3)...t].contains(b[t]) }.count
        }
        let differing = mismatches(direct.targets, batched.targets)
        let mean = { (x: [Double]) in x.reduce(0, +) / Double(x.count) }
        print("batched hand-over (every 45 ms) against per-datagram: \(differing) of \(direct.targets.count) ticks off; "
              + "mean target \(mean(direct.targets)) vs \(mean(batched.targets)) ms")
        XCTAssertEqual(differing, 0, "the target depends on when frames were handed over")
        XCTAssertEqual(direct.targets.last, batched.targets.last)
        // Counting lateness from the hand-over instead (no tick times) makes batching
        // look like jitter: the same replay then asks for more delay.
        let directOld = run(wakeEveryMs: nil, tickTimes: false), batchedOld = run(wakeEveryMs: 45, tickTimes: false)
        print("without arrival times: mean target \(mean(directOld.targets)) vs \(mean(batchedOld.targets)) ms")
        XCTAssertGreaterThan(mean(batchedOld.targets), mean(directOld.targets) + 5)
    }
}
