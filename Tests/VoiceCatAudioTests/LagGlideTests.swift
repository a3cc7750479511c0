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

    /// Moving before anything older was pushed reads silence, never outside the history.
    func testAGlideFromTheFirstFrameReadsSilenceBeforeIt() {
        let glide = LagGlide(maxLag: 480, maxFrame: 120)
        glide.glide(to: 480, perSample: 1)
        var frame = tone(1000, start: 0, frames: 120)
        frame.withUnsafeBufferPointer { glide.push($0.baseAddress!, frames: 120) }
        frame.withUnsafeMutableBufferPointer { glide.read(into: $0.baseAddress!, frames: 120) }
        XCTAssertEqual(glide.lag, 120)
        for _ in 0..<4 {
            var f = tone(1000, start: 0, frames: 120)
            f.withUnsafeBufferPointer { glide.push($0.baseAddress!, frames: 120) }
            f.withUnsafeMutableBufferPointer { glide.read(into: $0.baseAddress!, frames: 120) }
        }
        XCTAssertEqual(glide.lag, 480)
        glide.reset()
        XCTAssertTrue(glide.isIdle)
    }
}
