// A short fade-in for a consumer that starts in the middle of a stream (a per-speaker
// sink set, a recording started while someone talks): its first sample would otherwise
// jump from the silence before it to wherever the waveform is, a click.
import Glibc

/// The raised-cosine curve both fades follow: 0 at `k` = 0, 1 at `k` = `n`.
@inline(__always)
func raisedCosine(_ k: Int, of n: Int) -> Double { 0.5 - 0.5 * cos(Double.pi * Double(k) / Double(n)) }

public enum FadeIn {
    /// How long a fade-in lasts.
    public static let milliseconds = 5

    /// Frames of a fade-in at `sampleRate`.
    public static func frames(at sampleRate: Int) -> Int { max(1, sampleRate * milliseconds / 1000) }

    /// Scales interleaved int16 `pcm` (`frames` x `channels`) by a raised-cosine ramp
    /// from 0 to 1 over `total` frames, of which `done` were faded before (a fade that
    /// spans several blocks). Returns the new `done`; frames past the ramp are untouched.
    @discardableResult
    public static func apply(_ pcm: UnsafeMutablePointer<Int16>, frames: Int, channels: Int, done: Int, total: Int) -> Int {
        guard done < total else { return done }
        let n = min(frames, total - done)
        for i in 0..<n {
            let g = raisedCosine(done + i, of: total)
            for c in 0..<channels {
                let k = i * channels + c
                pcm[k] = Int16((Double(pcm[k]) * g).rounded())
            }
        }
        return done + n
    }
}

/// A raised-cosine cross-fade between two versions of the same stretch of audio (a
/// stream switching between two processing paths).
public enum CrossFade {
    /// `to` (interleaved int16, `frames` x `channels`) becomes a fade from `from` at its
    /// start to `to` at its end.
    public static func apply(from: UnsafePointer<Int16>, to: UnsafeMutablePointer<Int16>, frames: Int, channels: Int) {
        for i in 0..<frames {
            let w = Float(raisedCosine(i + 1, of: frames))
            for c in 0..<channels {
                let k = i * channels + c
                let mixed = Float(from[k]) * (1 - w) + Float(to[k]) * w
                to[k] = Int16(mixed.rounded())
            }
        }
    }
}
