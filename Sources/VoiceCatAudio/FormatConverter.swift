// Sample-rate and channel conversion at the edges of the engine: PCM a host feeds or
// a device captures at another rate becomes the 48 kHz the codec runs at, and the
// 48 kHz the mixer renders becomes the rate and channel count a host or a device
// wants. Rates are converted by SpeexDSP's resampler (quality 0..10), channels by
// averaging (stereo → mono) or duplicating (mono → stereo), the same rules as the
// Reframer. Everything is allocated at init for a largest input block; converting
// a block never allocates.
import CSpeexDSP

/// Why a converter could not be built.
public struct ConverterError: Error, CustomStringConvertible {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

public final class FormatConverter {
    /// The rates a converter accepts at either end.
    public static let rates = 8000...192_000
    /// SpeexDSP's resampler qualities; 4 is its default (desktop-grade, cheap).
    public static let qualities = 0...10
    public static let defaultQuality = 4

    public let inRate: Int
    public let outRate: Int
    public let inChannels: Int
    public let outChannels: Int
    /// The largest block `convert` takes.
    public let maxInFrames: Int
    /// The most frames one block of maxInFrames can give.
    public let maxOutFrames: Int
    public let quality: Int

    /// nil when the rates are equal (then only channels change, or nothing).
    private let resampler: OpaquePointer?
    /// The channel count the resampler runs at: the smaller of in and out.
    private let coreChannels: Int
    private let downmixed: UnsafeMutablePointer<Int16>?   // stereo → mono before resampling
    private let resampled: UnsafeMutablePointer<Int16>?   // the resampler's output
    private let upmixed: UnsafeMutablePointer<Int16>?     // mono → stereo after resampling
    // A splice (splice(after:history:frames:unheardFrames:)): the output of the primed
    // history, and where the replaced converter's next frame lies against this one's
    // (output frames; negative: in `spliceHead`), taken up over the first block.
    private let spliceHead: UnsafeMutablePointer<Int16>
    private var spliceHeadFrames = 0
    private let spliceOut: UnsafeMutablePointer<Int16>
    private var spliceFrom = 0
    private var spliceMoveFrames = 0
    /// How long the first block after a splice takes to move from the replaced
    /// converter's timeline to this one's, at least (four times the shift when that
    /// is longer), within the block.
    public static let spliceMoveMs = 10

    /// True when output equals input (48 kHz stereo to 48 kHz stereo, ...): `convert`
    /// hands the input back untouched (but for the first block after a splice).
    public var isIdentity: Bool { resampler == nil && inChannels == outChannels }

    /// `skipFilterDelay`: keep the resampler's filter delay (`false`, the default:
    /// every block gives as much audio as it brings, the output delayed by
    /// `latencyFrames`), or skip it at the start (the first block comes out shorter by
    /// the delay, the latency is that much lower). Whoever cuts the output into frames
    /// or blocks of a fixed length (a stream's encoder, a sink that wants 20 ms blocks,
    /// a speaker's tap in step with the mix) keeps it: skipped, the first block is short
    /// of its frame and every frame after it completes one block late. Only a consumer
    /// that takes blocks of any length (a playback device's buffer) gains by skipping.
    public init(inRate: Int, outRate: Int, inChannels: Int, outChannels: Int, maxInFrames: Int,
                quality: Int = FormatConverter.defaultQuality, skipFilterDelay: Bool = false) throws(ConverterError) {
        guard FormatConverter.rates.contains(inRate), FormatConverter.rates.contains(outRate) else {
            throw ConverterError("sample rates must be within 8000..192000 Hz (got \(inRate) → \(outRate))")
        }
        guard (1...2).contains(inChannels), (1...2).contains(outChannels) else {
            throw ConverterError("channels must be 1 or 2 (got \(inChannels) → \(outChannels))")
        }
        guard FormatConverter.qualities.contains(quality) else {
            throw ConverterError("resampler quality must be within 0..10 (got \(quality))")
        }
        guard maxInFrames > 0 else { throw ConverterError("the largest block must hold at least one frame") }
        self.inRate = inRate; self.outRate = outRate
        self.inChannels = inChannels; self.outChannels = outChannels
        self.maxInFrames = maxInFrames
        self.quality = quality
        coreChannels = min(inChannels, outChannels)
        // The resampler gives at most ceil(in × out / in) + 1 frames per call.
        maxOutFrames = inRate == outRate ? maxInFrames : (maxInFrames * outRate + inRate - 1) / inRate + 2
        if inRate != outRate {
            var err: Int32 = 0
            guard let st = speex_resampler_init(UInt32(coreChannels), UInt32(inRate), UInt32(outRate), Int32(quality), &err),
                  err == 0 else {
                throw ConverterError("speex_resampler_init \(inRate) → \(outRate) Hz failed (\(err))")
            }
            if skipFilterDelay { speex_resampler_skip_zeros(st) }
            resampler = st
        } else {
            resampler = nil
        }
        func buffer(_ count: Int) -> UnsafeMutablePointer<Int16> {
            let p = UnsafeMutablePointer<Int16>.allocate(capacity: count)
            p.initialize(repeating: 0, count: count)
            return p
        }
        downmixed = inChannels == 2 && outChannels == 1 ? buffer(maxInFrames) : nil
        resampled = resampler != nil ? buffer(maxOutFrames * coreChannels) : nil
        upmixed = inChannels == 1 && outChannels == 2 ? buffer(maxOutFrames * 2) : nil
        spliceHead = buffer(maxOutFrames * outChannels)
        spliceOut = buffer(maxOutFrames * outChannels)
    }

    deinit {
        if let r = resampler { speex_resampler_destroy(r) }
        downmixed?.deallocate(); resampled?.deallocate(); upmixed?.deallocate()
        spliceHead.deallocate(); spliceOut.deallocate()
    }

    /// Forgets the signal so far (a new stream starts): no tail of the old one leaks
    /// into the next block. `skipFilterDelay` as at init.
    public func reset(skipFilterDelay: Bool = false) {
        spliceMoveFrames = 0
        if let r = resampler {
            speex_resampler_reset_mem(r)
            if skipFilterDelay { speex_resampler_skip_zeros(r) }
        }
    }

    /// Takes over a running stream from `old` (nil: the stream went out unconverted, at
    /// this converter's input rate), a converter with the same input whose output
    /// format differs (a new output format). `history` is the newest `frames` (at most
    /// maxInFrames) of the input, which `old` converted last; `unheardFrames` of old's
    /// output were never handed on (a pull's rest, dropped). This converter is primed
    /// with the history, so it starts with the signal rather than its filter delay's
    /// worth of silence; and the two converters' delays differ (1-2 ms at most rates, 4
    /// at 8 kHz, plus what went unheard), so the next block's start would repeat or
    /// skip that much audio: a jump in a tone or in speech, a click. Instead, the first
    /// block after the splice starts where `old`'s output left off and moves into this
    /// one's timeline over spliceMoveMs or more (the block's length bounds it); the
    /// blocks keep their lengths. Allocates nothing (buffers are made at init).
    public func splice(after old: FormatConverter?, history: UnsafePointer<Int16>, frames: Int, unheardFrames: Int = 0) {
        spliceMoveFrames = 0
        spliceHeadFrames = 0
        guard frames > 0 else { return }
        let (p, n) = convert(history, frames: min(frames, maxInFrames))
        spliceHead.update(from: p, count: n * outChannels)
        spliceHeadFrames = n
        // Where old's next frame lies on the input's timeline, against this one's next.
        let unheard = old.map { Double(unheardFrames) * Double(inRate) / Double($0.outRate) } ?? Double(unheardFrames)
        let shift = Double(inputLatencyFrames - (old?.inputLatencyFrames ?? 0)) - unheard
        spliceFrom = max(-n, Int((shift * Double(outRate) / Double(inRate)).rounded()))
        // At least spliceMoveMs, and four times the shift (a change of speed of at most
        // a quarter: a 4 ms shift at 8 kHz takes 16 ms), as far as the block allows.
        if spliceFrom != 0 { spliceMoveFrames = max(outRate * FormatConverter.spliceMoveMs / 1000, 4 * abs(spliceFrom)) }
    }

    /// A splice waits for its first block (which should be long enough to take the
    /// move: a whole 20 ms block is).
    public var splicePending: Bool { spliceMoveFrames > 0 }

    /// The first block after a splice, read from old's timeline moving into this one's:
    /// frame i is taken at position i + spliceFrom × (1 - (i + 1) / (m + 1)) of the
    /// signal (linear interpolation between its frames), so the shift is taken up by a
    /// short change of speed (at most a quarter), with neither a jump nor the dip a crossfade of
    /// two shifted copies has where they are out of phase.
    private func moveIntoTimeline(_ p: UnsafePointer<Int16>, frames n: Int) -> UnsafePointer<Int16> {
        defer { spliceMoveFrames = 0 }
        // Every position read must be in the head or in this block.
        let m = min(spliceMoveFrames, n - max(0, spliceFrom))
        guard m > 0 else { return p }
        let ch = outChannels
        spliceOut.update(from: p, count: n * ch)
        func frame(_ j: Int) -> UnsafePointer<Int16> {
            j < 0 ? UnsafePointer(spliceHead + (spliceHeadFrames + j) * ch) : p + min(j, n - 1) * ch
        }
        for i in 0..<m {
            let g = Double(spliceFrom) * (1 - Double(i + 1) / Double(m + 1)) + Double(i)
            let k = Int(g.rounded(.down))
            let f = Float(g - Double(k))
            let a = frame(k), b = frame(k + 1)
            for c in 0..<ch {
                spliceOut[i * ch + c] = Int16(((1 - f) * Float(a[c]) + f * Float(b[c])).rounded())
            }
        }
        return UnsafePointer(spliceOut)
    }

    /// The end-to-end delay the resampler adds, in output frames.
    public var latencyFrames: Int { resampler.map { Int(speex_resampler_get_output_latency($0)) } ?? 0 }

    /// The same delay in input frames.
    public var inputLatencyFrames: Int { resampler.map { Int(speex_resampler_get_input_latency($0)) } ?? 0 }

    /// Converts `frames` (at most maxInFrames) interleaved frames. Returns the
    /// converted block, valid until the next call (the input itself when nothing
    /// changes): a buffer of the converter's own, which the caller may also write
    /// until then (OutputStage fades a per-speaker block in place).
    public func convert(_ pcm: UnsafePointer<Int16>, frames: Int) -> (pcm: UnsafePointer<Int16>, frames: Int) {
        precondition(frames >= 0 && frames <= maxInFrames, "a block larger than the converter was built for")
        var p = pcm
        if let d = downmixed {
            for i in 0..<frames { d[i] = Int16((Int32(pcm[2 * i]) + Int32(pcm[2 * i + 1])) / 2) }
            p = UnsafePointer(d)
        }
        var n = frames
        if let r = resampler, let out = resampled {
            var inLen = UInt32(frames), outLen = UInt32(maxOutFrames)
            speex_resampler_process_interleaved_int(r, p, &inLen, out, &outLen)
            p = UnsafePointer(out)
            n = Int(outLen)
        }
        if let u = upmixed {
            for i in 0..<n { u[2 * i] = p[i]; u[2 * i + 1] = p[i] }
            p = UnsafePointer(u)
        }
        if spliceMoveFrames > 0 && n > 0 { p = moveIntoTimeline(p, frames: n) }
        return (p, n)
    }

    /// Converts any number of frames, in blocks of at most maxInFrames, handing each
    /// converted block to `emit`.
    public func convertAll(_ pcm: UnsafePointer<Int16>, frames: Int, _ emit: (UnsafePointer<Int16>, Int) throws -> Void) rethrows {
        var done = 0
        while done < frames {
            let n = min(maxInFrames, frames - done)
            let (p, m) = convert(pcm + done * inChannels, frames: n)
            if m > 0 { try emit(p, m) }
            done += n
        }
    }

    /// An upper bound of the frames `frames` input frames give (whole conversion).
    public func outputBound(forInput frames: Int) -> Int {
        inRate == outRate ? frames : (frames * outRate + inRate - 1) / inRate + 2 * (frames / maxInFrames + 1)
    }
}

/// Float PCM (full scale ±1.0) to int16, clipped; NaN becomes 0.
@inline(__always)
public func int16Sample(_ x: Float) -> Int16 {
    guard x == x else { return 0 }
    let y = (x * 32768).rounded()
    return Int16(max(-32768, min(32767, y)))
}

/// int16 to float PCM (full scale ±1.0).
@inline(__always)
public func floatSample(_ x: Int16) -> Float { Float(x) / 32768 }

/// Level of a block of interleaved samples: RMS and peak as fractions of int16 full
/// scale (a full-scale square wave is 1.0; a full-scale sine has RMS 0.707).
public struct BlockLevel: Equatable, Sendable {
    public var rms: Float
    public var peak: Float
    public init(rms: Float = 0, peak: Float = 0) { self.rms = rms; self.peak = peak }

    public static func measure(_ pcm: UnsafePointer<Int16>, count: Int) -> BlockLevel {
        guard count > 0 else { return BlockLevel() }
        var acc: Float = 0
        var peak: Int32 = 0
        for i in 0..<count {
            let v = Int32(pcm[i])
            let f = Float(v)
            acc += f * f
            let a = v < 0 ? -v : v
            if a > peak { peak = a }
        }
        return BlockLevel(rms: (acc / Float(count)).squareRoot() / 32768, peak: Float(peak) / 32768)
    }

    /// The floor every level is reported at or above (silence).
    public static let floorDBFS: Float = -120

    /// 20·log10(level), floored at floorDBFS.
    public static func dbfs(_ x: Float) -> Float {
        guard x > 0 else { return floorDBFS }
        return max(floorDBFS, 20 * log10Approx(x))
    }
}

/// log10 without libm (the pure core imports no Glibc): the exponent, plus a series
/// for the mantissa's logarithm (error below 1e-5, far below what a meter shows).
@inline(__always)
func log10Approx(_ x: Float) -> Float {
    let bits = x.bitPattern
    let exponent = Int32((bits >> 23) & 0xff) - 127
    let m = Float(bitPattern: (bits & 0x7f_ffff) | 0x3f80_0000)   // 1 ≤ m < 2
    // ln(m) by the series in t = (m - 1) / (m + 1).
    let t = (m - 1) / (m + 1)
    let t2 = t * t
    let ln = 2 * t * (1 + t2 * (1 / 3 + t2 * (1 / 5 + t2 * (1 / 7 + t2 / 9))))
    return (Float(exponent) * 0.693_147_18 + ln) * 0.434_294_48
}
