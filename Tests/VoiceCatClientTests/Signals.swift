// Test signals and measurements.
import Foundation
import VoiceCatClient
import VoiceCatSystem

enum Signal {
    /// A speech-like test signal: three partials under a syllable-rate envelope.
    static func voiceLike(seconds: Double, amplitude: Double = 0.3, f0: Double = 220, seed: Double = 0) -> [Int16] {
        let n = Int(seconds * 48000)
        return (0..<n).map { i in
            let t = Double(i) / 48000
            let env = 0.55 + 0.45 * sin(2 * .pi * 3.7 * t + seed)
            let s = sin(2 * .pi * f0 * t) + 0.5 * sin(2 * .pi * f0 * 2 * t + 1) + 0.3 * sin(2 * .pi * f0 * 3 * t + 2)
            return Int16(amplitude * 32767 * env * s / 1.8)
        }
    }

    /// Speech-like, but never periodic: the pitch glides (120–260 Hz) and the syllable
    /// envelope wanders, so a 100 ms window aligns at exactly one lag. The same sound
    /// at any sample `rate`.
    static func glidingVoice(seconds: Double, amplitude: Double = 0.3, seed: Double = 0, rate: Int = 48000) -> [Int16] {
        let n = Int(seconds * Double(rate))
        var phase = 0.0
        return (0..<n).map { i in
            let t = Double(i) / Double(rate)
            let f0 = 190 + 55 * sin(2 * .pi * 0.9 * t + seed) + 15 * sin(2 * .pi * 2.3 * t + 1.7 * seed)
            phase += 2 * .pi * f0 / Double(rate)
            let env = 0.55 + 0.3 * sin(2 * .pi * 3.1 * t + seed) + 0.15 * sin(2 * .pi * 5.3 * t + 0.5)
            let s = sin(phase) + 0.5 * sin(2 * phase + 1) + 0.3 * sin(3 * phase + 2)
            return Int16(amplitude * 32767 * env * s / 1.8)
        }
    }

    static func tone(_ f: Double, seconds: Double, amplitude: Double = 0.2) -> [Int16] {
        (0..<Int(seconds * 48000)).map { Int16(amplitude * 32767 * sin(2 * .pi * f * Double($0) / 48000)) }
    }

    /// Where in `x` a sound starts: a sample louder than `above` after at least `after`
    /// samples quieter than `quietBelow` (none louder than `above` between; the start
    /// of `x` counts as quiet).
    static func onsets(_ x: [Int16], above: Int, after: Int, quietBelow: Int) -> [Int] {
        var onsets: [Int] = []
        var quiet = after
        for (i, v) in x.enumerated() {
            let m = abs(Int(v))
            if m > above && quiet >= after { onsets.append(i) }
            quiet = m < quietBelow ? quiet + 1 : (m > above ? 0 : quiet)
        }
        return onsets
    }

    static func rms(_ x: ArraySlice<Int16>) -> Double {
        guard !x.isEmpty else { return 0 }
        return sqrt(x.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(x.count))
    }

    /// Power of frequency `f` in `x` (Goertzel), normalized by length.
    static func tonePower(_ x: ArraySlice<Int16>, _ f: Double) -> Double {
        let w = 2 * Double.pi * f / 48000
        let c = 2 * cos(w)
        var s1 = 0.0, s2 = 0.0
        for v in x { let s0 = Double(v) + c * s1 - s2; s2 = s1; s1 = s0 }
        let p = s1 * s1 + s2 * s2 - c * s1 * s2
        return p / Double(x.count * x.count)
    }

    /// How far each channel's own tone dominates the other's: (L: left/right tone power
    /// in the left channel, R: right/left tone power in the right channel).
    static func stereoSeparation(_ l: ArraySlice<Int16>, _ r: ArraySlice<Int16>, leftHz: Double, rightHz: Double, label: String) -> (Double, Double) {
        let ll = tonePower(l, leftHz), lr = tonePower(l, rightHz), rl = tonePower(r, leftHz), rr = tonePower(r, rightHz)
        print("\(label): L \(Int(leftHz)) Hz \(ll) \(Int(rightHz)) Hz \(lr); R \(Int(leftHz)) Hz \(rl) \(Int(rightHz)) Hz \(rr)")
        return (ll / max(lr, 1e-9), rr / max(rl, 1e-9))
    }

    /// Best lag (in samples, output behind input) and the normalized cross-correlation there:
    /// a coarse search over decimated lags, then a fine one around the best.
    static func align(input: [Int16], output: [Int16], maxLag: Int, window: Range<Int>) -> (lag: Int, ncc: Double) {
        func ncc(_ lag: Int, stride step: Int) -> Double {
            var sxy = 0.0, sxx = 0.0, syy = 0.0
            var i = window.lowerBound
            while i < window.upperBound {
                let o = i + lag
                guard o < output.count, i < input.count else { break }
                let x = Double(input[i]), y = Double(output[o])
                sxy += x * y; sxx += x * x; syy += y * y
                i += step
            }
            return sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : 0
        }
        var coarse = (lag: 0, ncc: -2.0)
        for lag in Swift.stride(from: 0, through: maxLag, by: 3) {
            let v = ncc(lag, stride: 7)
            if v > coarse.ncc { coarse = (lag, v) }
        }
        var best = (lag: 0, ncc: -2.0)
        for lag in max(0, coarse.lag - 3)...(coarse.lag + 3) {
            let v = ncc(lag, stride: 1)
            if v > best.ncc { best = (lag, v) }
        }
        return best
    }
}

extension VoiceClient {
    /// Waits until this client receives `ssrc` (its RemoteStreamAdded was processed).
    func waitForRemote(ssrc: UInt32, timeoutMs: UInt64 = 3000) throws {
        let deadline = MonotonicClock.milliseconds() + timeoutMs
        while MonotonicClock.milliseconds() < deadline {
            if remoteStreams().contains(where: { $0.ssrc == ssrc }) { return }
            usleep(5000)
        }
        throw ClientError.timeout("ssrc \(ssrc) never appeared")
    }
}
