// A stream's timeline moved later or earlier without a splice or a comb.
//
// The listener's denoiser delays a stream by its window (10 ms): switched on while the
// stream plays, the stream must move 10 ms later; switched off, 10 ms earlier. A jump
// is a hole or a skip; a cross-fade between the stream and itself 10 ms apart is a
// comb filter for that frame (a 450 Hz tone, 4.5 periods in 10 ms, cancels to near
// silence). Here the stream is instead read a little slower (or faster) until it has
// moved the whole lag: its pitch bends by lag / time for that long (10 ms over 500 ms:
// 2 %, a third of a semitone) and nothing is lost or heard twice. At the end the lag is
// exactly the target, in whole samples, so the denoiser's output (the same timeline) can
// be cross-faded in or out with no comb.

/// Reads a stream (interleaved stereo int16, pushed a frame at a time) at a lag that
/// moves at a fixed rate towards a target, interpolating between samples (cubic) while
/// it moves. Keeps the last `maxLag` samples and a frame. Each `read` follows the
/// `push` of the same frame. Preallocated: `push` and `read` never allocate.
public final class LagGlide {
    /// The longest lag (samples).
    public let maxLag: Int
    /// The longest frame pushed at once (samples).
    public let maxFrame: Int
    private let capacity: Int
    /// Stereo history, `capacity` frames, indexed by absolute sample index mod capacity.
    private let ring: UnsafeMutablePointer<Int16>
    /// Samples pushed over the glide's life; the last push is [written - pushed, written).
    private var written = 0
    private var pushed = 0
    /// The lag (samples) now, where it moves to, and how fast (samples per sample).
    public private(set) var lag = 0.0
    public private(set) var target = 0.0
    private var rate = 0.0

    public init(maxLag: Int, maxFrame: Int) {
        self.maxLag = maxLag
        self.maxFrame = maxFrame
        capacity = maxLag + maxFrame + 4
        ring = .allocate(capacity: capacity * 2)
        ring.initialize(repeating: 0, count: capacity * 2)
    }

    deinit { ring.deallocate() }

    /// Whether the stream plays as it is pushed (lag 0, and staying there).
    public var isIdle: Bool { lag == 0 && target == 0 }
    /// Whether the lag is moving.
    public var isMoving: Bool { lag != target }

    /// Forgets the stream (silence before what is pushed next) and the lag.
    public func reset() {
        ring.update(repeating: 0, count: capacity * 2)
        written = 0
        pushed = 0
        lag = 0
        target = 0
        rate = 0
    }

    /// Moves the lag to `samples` (0...maxLag) at `perSample` samples of lag per sample
    /// played (0.02: 10 ms over 500 ms), from the next `read`.
    public func glide(to samples: Int, perSample: Double) {
        target = Double(min(max(0, samples), maxLag))
        rate = max(1e-6, abs(perSample))
    }

    /// Moves the lag to `samples` (0...maxLag) at once, from the next `read`: where the
    /// stream is silent on both sides of the move, nothing is heard missing or twice.
    public func jump(to samples: Int) {
        target = Double(min(max(0, samples), maxLag))
        lag = target
    }

    /// Appends `frames` (≤ maxFrame: a longer frame is a caller's error) stereo frames of
    /// the stream to the history.
    public func push(_ pcm: UnsafePointer<Int16>, frames: Int) {
        precondition(frames <= maxFrame, "LagGlide: a frame of \(frames) samples, more than the \(maxFrame) it was built for")
        let n = frames
        let at = written % capacity
        let run = min(n, capacity - at)
        (ring + 2 * at).update(from: pcm, count: 2 * run)
        if run < n { ring.update(from: pcm + 2 * run, count: 2 * (n - run)) }
        written += n
        pushed = n
    }

    /// Writes the last frame pushed as heard at the lag (`frames` ≤ what was pushed;
    /// once per push), moving the lag towards its target sample by sample.
    public func read(into out: UnsafeMutablePointer<Int16>, frames: Int) {
        let n = min(frames, pushed)
        let first = written - pushed
        if lag == target && lag == lag.rounded(.down) && first - Int(lag) >= 0 {
            // Still, at a whole lag: the history as it is, in up to two runs.
            let from = (first - Int(lag)) % capacity
            let run = min(n, capacity - from)
            out.update(from: ring + 2 * from, count: 2 * run)
            if run < n { (out + 2 * run).update(from: ring, count: 2 * (n - run)) }
            return
        }
        for i in 0..<n {
            let j = first + i
            if lag == lag.rounded(.down) {
                // A whole lag: the sample itself (silence before the first one pushed).
                let k = j - Int(lag)
                let at = max(0, k) % capacity
                out[2 * i] = k < 0 ? 0 : ring[2 * at]
                out[2 * i + 1] = k < 0 ? 0 : ring[2 * at + 1]
            } else {
                let pos = Double(j) - lag
                let base = Int(pos.rounded(.down))
                let t = Float(pos - Double(base))
                out[2 * i] = LagGlide.cubic(ring, channel: 0, base: base, t: t, newest: written - 1, capacity: capacity)
                out[2 * i + 1] = LagGlide.cubic(ring, channel: 1, base: base, t: t, newest: written - 1, capacity: capacity)
            }
            if lag < target { lag = min(target, lag + rate) } else if lag > target { lag = max(target, lag - rate) }
        }
    }

    /// Catmull-Rom between samples `base` and `base + 1` (`t` in 0..<1), its outer
    /// points clamped to what was pushed.
    @inline(__always)
    private static func cubic(_ ring: UnsafeMutablePointer<Int16>, channel: Int, base: Int, t: Float, newest: Int, capacity: Int) -> Int16 {
        @inline(__always) func x(_ k: Int) -> Float { k < 0 ? 0 : Float(ring[2 * (min(k, newest) % capacity) + channel]) }
        return CatmullRom.sample(x(base - 1), x(base), x(base + 1), x(base + 2), t: t)
    }
}

/// Catmull-Rom interpolation between `p1` and `p2` (`t` in 0..<1; `p0` and `p3` the
/// points either side), rounded and clipped to int16: LagGlide's reads and a device's
/// glide (DevicePhase.fit).
public enum CatmullRom {
    @inline(__always)
    public static func sample(_ p0: Float, _ p1: Float, _ p2: Float, _ p3: Float, t: Float) -> Int16 {
        let a = -0.5 * p0 + 1.5 * p1 - 1.5 * p2 + 0.5 * p3
        let b = p0 - 2.5 * p1 + 2 * p2 - 0.5 * p3
        let c = -0.5 * p0 + 0.5 * p2
        let v = ((a * t + b) * t + c) * t + p1
        return Int16(max(-32768, min(32767, v.rounded())))
    }
}
