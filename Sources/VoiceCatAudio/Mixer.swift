// The master bus: float accumulation of every stream, then a soft limiter into int16.
// Preallocated; never allocates after init.

/// Soft limiter: linear below the knee, a smooth tanh-shaped curve above it that
/// approaches full scale without ever reaching it, so loud sums never wrap or clip hard.
@inline(__always)
public func softLimit(_ x: Float) -> Float {
    let knee: Float = 0.7
    let a = abs(x)
    if a <= knee { return x }
    let range: Float = 1 - knee
    let y = knee + range * tanhApprox((a - knee) / range)
    return x < 0 ? -y : y
}

/// tanh with a rational approximation (exact enough for a limiter, no libm call).
@inline(__always)
func tanhApprox(_ x: Float) -> Float {
    if x > 4.97 { return 1 }
    let x2 = x * x
    let r = x * (135135 + x2 * (17325 + x2 * (378 + x2))) / (135135 + x2 * (62370 + x2 * (3150 + x2 * 28)))
    return min(r, 1)
}

/// A gain that moves in a straight line over a block of `frames` frames: from `from`
/// (the gain before the block) to `to` (reached at its last frame). A listener's gain
/// or mute that changes while a stream talks is ramped over the next block instead of
/// stepping between two samples (a click when it changes mid-vowel).
public struct GainRamp: Equatable, Sendable {
    public var from: Float
    public var to: Float
    public var frames: Int
    public init(from: Float, to: Float, frames: Int) { self.from = from; self.to = to; self.frames = max(1, frames) }
    /// The gain at frame `i` of the block.
    @inline(__always)
    public func gain(at i: Int) -> Float { from + (to - from) * Float(min(i + 1, frames)) / Float(frames) }
}

public final class MixBus {
    public let capacityFrames: Int
    /// Interleaved stereo float accumulator, full scale = 1.0.
    public let acc: UnsafeMutablePointer<Float>

    public init(capacityFrames: Int) {
        self.capacityFrames = capacityFrames
        acc = .allocate(capacity: capacityFrames * 2)
        acc.initialize(repeating: 0, count: capacityFrames * 2)
    }

    deinit { acc.deallocate() }

    public func clear(frames: Int) { acc.update(repeating: 0, count: frames * 2) }

    /// Adds `frames` interleaved stereo int16 samples scaled by `gain`, starting at
    /// frame `offset` of the accumulator.
    public func add(_ pcm: UnsafePointer<Int16>, frames: Int, gain: Float, at offset: Int = 0) {
        let g = gain / 32768
        let dst = acc + offset * 2
        for i in 0..<(frames * 2) { dst[i] += Float(pcm[i]) * g }
    }

    /// Adds `frames` interleaved stereo float samples (full scale ±1.0) scaled by
    /// `gain`, starting at frame `offset` of the accumulator.
    public func add(_ pcm: UnsafePointer<Float>, frames: Int, gain: Float, at offset: Int = 0) {
        let dst = acc + offset * 2
        for i in 0..<(frames * 2) { dst[i] += pcm[i] * gain }
    }

    /// Adds `frames` interleaved stereo int16 samples at frame `offset` of the block,
    /// scaled by `ramp` at each frame's place in the block.
    public func add(_ pcm: UnsafePointer<Int16>, frames: Int, ramp: GainRamp, at offset: Int = 0) {
        let dst = acc + offset * 2
        for i in 0..<frames {
            let g = ramp.gain(at: offset + i) / 32768
            dst[2 * i] += Float(pcm[2 * i]) * g
            dst[2 * i + 1] += Float(pcm[2 * i + 1]) * g
        }
    }

    /// Adds `frames` interleaved stereo (or, `mono`, mono to both channels) float samples
    /// at frame `offset` of the block, scaled by `ramp` at each frame's place in the block.
    public func add(_ pcm: UnsafePointer<Float>, frames: Int, mono: Bool, ramp: GainRamp, at offset: Int = 0) {
        let dst = acc + offset * 2
        for i in 0..<frames {
            let g = ramp.gain(at: offset + i)
            dst[2 * i] += (mono ? pcm[i] : pcm[2 * i]) * g
            dst[2 * i + 1] += (mono ? pcm[i] : pcm[2 * i + 1]) * g
        }
    }

    /// Adds `frames` mono float samples to both channels, scaled by `gain`, starting
    /// at frame `offset` of the accumulator.
    public func addMono(_ pcm: UnsafePointer<Float>, frames: Int, gain: Float, at offset: Int = 0) {
        let dst = acc + offset * 2
        for i in 0..<frames {
            let v = pcm[i] * gain
            dst[2 * i] += v
            dst[2 * i + 1] += v
        }
    }

    /// Limits and converts the accumulator into interleaved stereo int16.
    public func render(into out: UnsafeMutablePointer<Int16>, frames: Int) {
        for i in 0..<(frames * 2) {
            let y = softLimit(acc[i]) * 32767
            out[i] = Int16(max(-32767, min(32767, y.rounded())))
        }
    }
}
