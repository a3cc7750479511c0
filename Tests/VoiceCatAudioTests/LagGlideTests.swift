// LagGlide: a stream moved 10 ms later and back keeps its level all the way (no comb,
// no hole), and ends exactly on the lag (the denoiser's timeline, sample for sample).
import Foundation
import VoiceCatAudio
import XCTest

final class LagGlideTests: XCTestCase {
    /// A stereo tone (L = R) of `hz` at 0.3 of full scale, `frames` long from sample `start`.
    func tone(_ hz: Double, start: Int, frames: Int) -> [Int16] {
        var out = [Int16](repeating: 0, count: frames * 2)
        for i in 0..<frames {
            let v = Int16((0.3 * 32767 * sin(2 * Double.pi * hz * Double(start + i) / 48000)).rounded())
            out[2 * i] = v
            out[2 * i + 1] = v
        }
        return out
    }

    /// The left channel's RMS over windows of 320 samples (6.7 ms: three periods at 450 Hz).
    func windowRMS(_ pcm: [Int16]) -> [Double] {
        let left = stride(from: 0, to: pcm.count, by: 2).map { Double(pcm[$0]) }
        return stride(from: 0, to: left.count - 319, by: 320).map { w in
            (left[w..<(w + 320)].reduce(0) { $0 + $1 * $1 } / 320).squareRoot()
        }
    }

    func testATone10MsLaterAndBackKeepsItsLevelAndEndsOnTheLag() {
        // 450 Hz: 10 ms is 4.5 periods, where a cross-fade with itself cancels.
        let glide = LagGlide(maxLag: 480, maxFrame: 960)
        var out: [Int16] = []
        var delayedExactly = true, backExactly = true
        for k in 0..<120 {
            if k == 10 { glide.glide(to: 480, perSample: 0.02) }    // 500 ms
            if k == 60 { glide.glide(to: 0, perSample: 0.02) }
            var frame = tone(450, start: k * 960, frames: 960)
            frame.withUnsafeBufferPointer { glide.push($0.baseAddress!, frames: 960) }
            frame.withUnsafeMutableBufferPointer { glide.read(into: $0.baseAddress!, frames: 960) }
            if (40..<60).contains(k) { delayedExactly = delayedExactly && frame == tone(450, start: k * 960 - 480, frames: 960) }
            if k >= 90 { backExactly = backExactly && frame == tone(450, start: k * 960, frames: 960) }
            out += frame
        }
        XCTAssertTrue(delayedExactly, "once moved, the stream is itself 480 samples later, sample for sample")
        XCTAssertTrue(backExactly, "and once back, itself")
        XCTAssertFalse(glide.isMoving)
        XCTAssertTrue(glide.isIdle)
        let rms = windowRMS(out)
        let steady = 0.3 * 32767 / 2.0.squareRoot()
        let moving = rms[30..<360]   // from 200 ms in: both glides and the still stretches between
        print("450 Hz tone moved 10 ms later and back over 500 ms each: 6.7 ms windows at \(String(format: "%.3f", moving.min()! / steady))"
              + "–\(String(format: "%.3f", moving.max()! / steady)) of its level")
        XCTAssertGreaterThan(moving.min()! / steady, 0.97, "a dip where the stream moved")
        XCTAssertLessThan(moving.max()! / steady, 1.03)

        // What it replaces: the tone cross-faded with itself 10 ms later, over a frame.
        var now = tone(450, start: 960, frames: 960)
        let later = tone(450, start: 960 - 480, frames: 960)
        later.withUnsafeBufferPointer { l in now.withUnsafeMutableBufferPointer { CrossFade.apply(from: l.baseAddress!, to: $0.baseAddress!, frames: 960, channels: 2) } }
        let comb = windowRMS(now).min()! / steady
        print("the same tone cross-faded with itself 10 ms later over a frame: down to \(String(format: "%.3f", comb)) of its level")
        XCTAssertLessThan(comb, 0.5, "the comb a cross-fade 10 ms apart makes at 450 Hz")
    }

    /// Moving before anything older was pushed reads silence, never outside the history:
    /// a lag of 480 from the first frame plays 480 samples of silence, then the stream.
    /// (Jumped, and glided from 0 at a rate that passes whole samples each sample.)
    func testAGlideFromTheFirstFrameReadsSilenceBeforeIt() {
        var input: [Int16] = []
        for i in 0..<(4 * 120) {
            input.append(Int16(1000 + i))
            input.append(Int16(-1000 - i))
        }
        for jumped in [true, false] {
            let glide = LagGlide(maxLag: 480, maxFrame: 120)
            if jumped { glide.jump(to: 480) } else { glide.glide(to: 480, perSample: 4) }
            var out: [Int16] = []
            for f in 0..<4 {
                var frame = Array(input[(f * 240)..<((f + 1) * 240)])
                frame.withUnsafeBufferPointer { glide.push($0.baseAddress!, frames: 120) }
                frame.withUnsafeMutableBufferPointer { glide.read(into: $0.baseAddress!, frames: 120) }
                out += frame
            }
            XCTAssertEqual(glide.lag, 480)
            if jumped {
                XCTAssertEqual(out, Array(repeating: 0, count: 2 * 480), "480 samples of silence before the stream")
            } else {
                // Reading at j - 4j (clamped to the lag) lies before the first sample from the second on.
                XCTAssertEqual(Array(out[2..<(2 * 480)]), Array(repeating: 0, count: 2 * 479), "silence before the stream")
                XCTAssertEqual(Array(out[0..<2]), [1000, -1000], "the first sample, at lag 0")
            }
            glide.reset()
            XCTAssertTrue(glide.isIdle)
        }
        // And once there is a past, the lag reads it: four frames more at 480, the stream 480 late.
        let glide = LagGlide(maxLag: 480, maxFrame: 120)
        glide.jump(to: 480)
        var out: [Int16] = []
        for f in 0..<8 {
            var frame = f < 4 ? Array(input[(f * 240)..<((f + 1) * 240)]) : [Int16](repeating: 7, count: 240)
            frame.withUnsafeBufferPointer { glide.push($0.baseAddress!, frames: 120) }
            frame.withUnsafeMutableBufferPointer { glide.read(into: $0.baseAddress!, frames: 120) }
            out += frame
        }
        XCTAssertEqual(Array(out[(2 * 480)...]), input, "the stream, 480 samples late, sample for sample")
    }
}
