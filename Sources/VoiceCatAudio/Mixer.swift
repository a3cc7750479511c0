// The master bus: float accumulation of every stream, then a limiter into int16.
// Preallocated; never allocates after init.
//
// The limiter. A sum of streams can pass full scale (talkers overlapping, a listener's
// gain of 4). A curve applied sample by sample (the soft clip this replaced, bending
// from -3 dBFS) distorts such a mix as much as clipping it does: each peak is
// flattened on its own. Here the level is taken down and brought back smoothly: a
// frame needs the gain that keeps its louder channel at `MixBus.ceiling`; a block's
// whole sum is known before any of it is output, so the gain comes down ahead of each
// such frame by at most 1 / `attackFrames` per frame (a look-ahead that costs no delay,
// within the block being rendered: a peak in a block's first frames, or in a host's
// pull of a few frames, gets what is left of its slope), and goes back up by at most
// 1 / `releaseFrames` per frame. Below the ceiling the mix passes
// unchanged (gain 1), so a single stream is heard as decoded.

/// Digital silence: an int16 sample of at most this magnitude (below −72 dBFS) is not
/// heard; a block of such samples may be cut short or dropped (PlayedBlock.silentCut,
/// the receive slots' FIFO).
public enum DigitalSilence {
    public static let peak = 7
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
    /// The limiter's gain per frame of the block being rendered.
    private let gains: UnsafeMutablePointer<Float>
    /// The limiter's gain at the end of the last block rendered.
    public private(set) var limiterGain: Float = 1

    /// The most a rendered sample reaches (-0.9 dBFS): the limiter's ceiling.
    public static let ceiling: Float = 0.9
    /// The gain comes down ahead of a peak by at most 1 / this per frame (full to half
    /// gain in 1 ms)...
    public static let attackFrames = 96
    /// ...and goes back up by at most 1 / this per frame (from half gain in 50 ms).
    public static let releaseFrames = 4800

    public init(capacityFrames: Int) {
        self.capacityFrames = capacityFrames
        acc = .allocate(capacity: capacityFrames * 2)
        acc.initialize(repeating: 0, count: capacityFrames * 2)
        gains = .allocate(capacity: capacityFrames)
        gains.initialize(repeating: 1, count: capacityFrames)
    }

    deinit { acc.deallocate(); gains.deallocate() }

    public func clear(frames: Int) { acc.update(repeating: 0, count: frames * 2) }

    /// Forgets the limiter's gain: the mix starts again after a stop (vc_audio_restart),
    /// so what was loud before it does not turn down its first blocks.
    public func resetLimiter() { limiterGain = 1 }

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

    /// Limits (see the top of this file) and converts the accumulator into interleaved
    /// stereo int16.
    public func render(into out: UnsafeMutablePointer<Int16>, frames: Int) {
        let ceiling = MixBus.ceiling
        var loud = false
        for i in 0..<frames {
            let l = acc[2 * i], r = acc[2 * i + 1]
            let peak = max(abs(l), abs(r))
            if peak <= ceiling && !r.isNaN {
                gains[i] = 1
            } else if peak.isFinite && !r.isNaN {
                gains[i] = ceiling / peak; loud = true
            } else {
                // Not a number (or infinite): a decoder gone wrong, never a sound. The
                // frame is silenced rather than sent to full scale by the conversion.
                acc[2 * i] = 0; acc[2 * i + 1] = 0; gains[i] = 1
            }
        }
        if loud || limiterGain < 1 {
            // Down before each peak (backwards: a ramp of attackFrames to it)...
            let attack = 1 / Float(MixBus.attackFrames)
            var h: Float = 1
            var i = frames - 1
            while i >= 0 { h = min(gains[i], h + attack); gains[i] = h; i -= 1 }
            // ...and back up slowly after it.
            let release = 1 / Float(MixBus.releaseFrames)
            var g = limiterGain
            for k in 0..<frames { g = min(gains[k], g + release); gains[k] = g }
            limiterGain = g
            for k in 0..<frames {
                let gk = gains[k] * 32767
                out[2 * k] = MixBus.sample(acc[2 * k] * gk)
                out[2 * k + 1] = MixBus.sample(acc[2 * k + 1] * gk)
            }
        } else {
            for k in 0..<(frames * 2) { out[k] = MixBus.sample(acc[k] * 32767) }
        }
    }

    @inline(__always)
    private static func sample(_ y: Float) -> Int16 { Int16(max(-32767, min(32767, y.rounded()))) }
}
