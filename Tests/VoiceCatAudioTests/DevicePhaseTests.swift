// A device driver's moves of its card's clock (DevicePhase): the block played a
// little faster while streams play (a glide), or cut short in silence; then closed
// loops in simulated time with a real JitterBuffer on a fixed clock, judged by what
// was played and how long frames waited.
import Foundation
import VoiceCatAllocCounter
import VoiceCatAudio
import VoiceCatProtocol
import VoiceCatSimulation
import XCTest

final class DevicePhaseTests: XCTestCase {
    /// A block of two tones (L 440 Hz, R 1 kHz) starting at sample `from` of the stream.
    private func tones(from: Int, frames: Int) -> [Int16] {
        var b = [Int16](repeating: 0, count: frames * 2)
        for i in 0..<frames {
            let t = Double(from + i) / 48000
            b[2 * i] = Int16((10_000 * sin(2 * .pi * 440 * t)).rounded())
            b[2 * i + 1] = Int16((10_000 * sin(2 * .pi * 1000 * t)).rounded())
        }
        return b
    }

    func testAGlidePlaysTheBlockFasterWithItsSamplesEvenlySpacedIntoTheNext() {
        let block = tones(from: 0, frames: 960)
        var out = [Int16](repeating: 0, count: 960 * 2)
        let n = DevicePhase.fit(block, frames: 960, move: 19, silent: false, into: &out)
        XCTAssertEqual(n, 941)
        // Output sample j is the stream at j × 960 / 941: the first is the block's first,
        // the last falls a step before the next block's first (sample 960).
        var worst = 0.0
        for j in 0..<n {
            let t = Double(j) * 960 / 941 / 48000
            worst = max(worst, abs(Double(out[2 * j]) - 10_000 * sin(2 * .pi * 440 * t)))
            // (The last sample's outer point is clamped to the block: no sample of the next.)
            if j < n - 1 { worst = max(worst, abs(Double(out[2 * j + 1]) - 10_000 * sin(2 * .pi * 1000 * t))) }
        }
        print("glide of 19 samples: worst error \(worst) of 10000")
        XCTAssertLessThan(worst, 4, "the resampled block is the same waveform, played 2 % faster")
        XCTAssertEqual(out[0], block[0])
        XCTAssertEqual(out[1], block[1])
    }

    func testNoMoveCopiesAndASilentCutKeepsTheBlocksStart() {
        let block = tones(from: 480, frames: 960)
        var out = [Int16](repeating: 7, count: 960 * 2)
        XCTAssertEqual(DevicePhase.fit(block, frames: 960, move: 0, silent: false, into: &out), 960)
        XCTAssertEqual(out, block)
        out = [Int16](repeating: 7, count: 960 * 2)
        XCTAssertEqual(DevicePhase.fit(block, frames: 960, move: 300, silent: true, into: &out), 660)
        XCTAssertEqual(Array(out[0..<1224]), Array(block[0..<1224]), "a cut plays the block's first frames as they are...")
        // ...its last millisecond cross-faded into the block's last one (from 900 to 960):
        // it ends on the sample the next block continues from.
        for k in 0..<48 {
            let w = Float(k + 1) / 49
            for c in 0..<2 {
                let want = Float(block[2 * (612 + k) + c]) * (1 - w) + Float(block[2 * (912 + k) + c]) * w
                XCTAssertEqual(Float(out[2 * (612 + k) + c]), want.rounded(), accuracy: 0.5)
            }
        }
        // A cut that leaves less than a millisecond cross-fades all of it.
        XCTAssertEqual(DevicePhase.fit(block, frames: 960, move: 950, silent: true, into: &out), 10)
        XCTAssertEqual(Float(out[18]), (Float(block[18]) / 11 + Float(block[1918]) * 10 / 11).rounded(), accuracy: 0.5)
        XCTAssertEqual(out[1320], 7, "nothing written past them")
        XCTAssertEqual(DevicePhase.fit(block, frames: 960, move: -5, silent: false, into: &out), 960, "never longer than the block")
        XCTAssertEqual(DevicePhase.maxGlide(frames: 960), 19)
        XCTAssertEqual(DevicePhase.maxGlide(frames: 480), 9)
    }

    /// A stream that never pauses, from a sender whose clock runs 0.1 % faster than the
    /// card's: on a fixed clock its buffer grows a period every 20 s and a frame is
    /// dropped for it; the card's glide follows it and drops none. Every move is a step
    /// of at most 2 % of a block, at least 10 blocks apart.
    func testACardSlowerThanTheSenderIsFollowedWithNoFrameDropped() {
        var net = TraceGenerator.Network()
        net.baseDelayMs = 20; net.jitterMs = 3; net.senderClockRate = 1.001
        let trace = TraceGenerator.generate(frames: 4500, talk: .continuous, network: net, seed: 77)
        final class Moves: PlayoutModel {
            let inner = JitterBufferModel()
            var ticks = 0, last = -100, moves = 0, largest = 0.0, closest = Int.max
            var name: String { inner.name }
            func put(seq: UInt64, timestamp: UInt32, flags: FrameFlags, arrivalMs: Double) {
                inner.put(seq: seq, timestamp: timestamp, flags: flags, arrivalMs: arrivalMs)
            }
            func tick(nowMs: Double) -> TickOutcome {
                ticks += 1
                let o = inner.tick(nowMs: nowMs)
                let m = inner.clockMoveMs()
                if m != 0 && inner.jb.talking {
                    moves += 1
                    largest = max(largest, m)
                    closest = min(closest, ticks - last)
                    last = ticks
                }
                return o
            }
            func clockMoveMs() -> Double { inner.clockMoveMs() }
        }
        let glides = Moves()
        glides.inner.device = DevicePhase(periodMs: 20)
        let g = JitterSimulation.run(trace, model: glides, tickMs: 20, phase: 0.37)
        let fixed = JitterBufferModel()
        let f = JitterSimulation.run(trace, model: fixed, tickMs: 20, phase: 0.37)
        print("sender 0.1 % fast, 90 s: card gliding \(g), \(glides.moves) moves (largest \(glides.largest) ms, closest \(glides.closest) "
              + "blocks apart), dropped \(glides.inner.jb.stats.skipped); fixed clock \(f), dropped \(fixed.jb.stats.skipped)")
        XCTAssertGreaterThanOrEqual(fixed.jb.stats.skipped, 3, "the fixed clock drops a frame every 20 s or so")
        XCTAssertEqual(glides.inner.jb.stats.skipped, 0, "no frame dropped: the card's clock followed the sender's")
        XCTAssertEqual(g.lateLost, 0)
        XCTAssertEqual(g.concealedTicks, 0)
        XCTAssertLessThan(g.meanDelayMs, f.meanDelayMs - 3, "the half period a drop every 20 s costs on average, and the phase")
        XCTAssertGreaterThan(glides.moves, 80, "90 ms followed in steps of 0.4 ms at most")
        XCTAssertLessThanOrEqual(glides.largest, Double(DevicePhase.maxGlide(frames: 960)) / 48 + 1e-9)
        XCTAssertGreaterThanOrEqual(glides.closest, 10)
    }

    /// Catmull-Rom overshoots at a sharp edge: a block at full scale that jumps from
    /// one end to the other is clipped to int16, not trapped on.
    func testAGlideOfAFullScaleSquareWaveStaysInRange() {
        var block = [Int16](repeating: 0, count: 960 * 2)
        for i in 0..<960 { let v: Int16 = (i / 5) % 2 == 0 ? .max : .min; block[2 * i] = v; block[2 * i + 1] = v == .max ? .min : .max }
        var out = [Int16](repeating: 0, count: 960 * 2)
        XCTAssertEqual(DevicePhase.fit(block, frames: 960, move: 19, silent: false, into: &out), 941)
        XCTAssertTrue(out[0..<(941 * 2)].contains(.max) && out[0..<(941 * 2)].contains(.min), "clipped at both ends")
        XCTAssertEqual(DevicePhase.fit(block, frames: 960, move: 960, silent: false, into: &out), 0, "nothing left to play")
    }

    /// The device driver's glide, per block: the policy's move and the block played
    /// faster, on a stream with time to spare. No allocation (the audio path).
    func testTheGlidesPathDoesNotAllocate() throws {
        try XCTSkipIf(vc_alloc_counter_active() == 0, "the allocation counter is off under sanitizers")
        let m = JitterBufferModel()
        m.device = DevicePhase(periodMs: 20)
        // Frames arriving 0.1 % fast (the card's clock slower), made before counting.
        let arrivals = (0..<1600).map { 13.0 + Double($0) * 20 / 1.001 }
        let block = UnsafeMutablePointer<Int16>.allocate(capacity: 1920)
        let out = UnsafeMutablePointer<Int16>.allocate(capacity: 1920)
        defer { block.deallocate(); out.deallocate() }
        for i in 0..<1920 { block[i] = Int16(8000 * sin(Double(i) * 0.03)) }
        var next = 0, now = 0.0, glides = 0
        func tick() {
            while next < arrivals.count && arrivals[next] <= now {
                m.put(seq: UInt64(next), timestamp: UInt32(next * 960), flags: next == 0 ? .marker : [], arrivalMs: arrivals[next])
                next += 1
            }
            _ = m.tick(nowMs: now)
            let move = Int((m.clockMoveMs() * 48).rounded())
            if move > 0 { glides += 1 }
            DevicePhase.fit(block, frames: 960, move: move, silent: false, into: out)
            now += 20 - m.clockMoveMs()
        }
        for _ in 0..<300 { tick() }   // warm-up: the buffer learns the path
        let before = vc_alloc_count_thread(), glidesBefore = glides
        for _ in 0..<1200 { tick() }
        let allocations = vc_alloc_count_thread() - before
        print("glide path over 1200 blocks: \(glides - glidesBefore) glides, \(allocations) allocations")
        XCTAssertGreaterThan(glides - glidesBefore, 20, "the blocks glided")
        XCTAssertEqual(allocations, 0)
    }
}
