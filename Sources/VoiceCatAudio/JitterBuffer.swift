// Per-ssrc adaptive jitter buffer (seed §5).
//
// Pure and preallocated: packets live in a fixed pool of slots; nothing allocates
// per frame. Timestamps (u32 at 48 kHz) are unwrapped to 64 bits so a stream
// crossing 2^32 plays through. The consumer calls next() once per frame period;
// that call *is* the playout clock.
//
//   * No artificial prebuffer: the clock is seeded at the first frame and plays it
//     at once; it is reseeded on a talkspurt marker and after the stream paused
//     (last-frame or DTX flag) or starved.
//   * Starving mid-talkspurt (the next frame is not here and nothing newer is)
//     conceals without advancing the clock: latency grows by what the network
//     needed, never by a guess.
//   * A missing frame whose successor is already buffered is rebuilt at once from
//     the successor's in-band FEC (or DRED). A missing frame with only later frames
//     buffered is waited for while the backlog is under `target` (the late-drop
//     window tracks the target); past it the frame is declared lost and concealed.
//   * Frame-skip catch-up: when the backlog exceeds target + hysteresis the clock
//     jumps forward to leave `target` buffered, bounded against the leading edge
//     (newest frame), and the stale frames are dropped. This is the downward force
//     that keeps latency from ratcheting up after a delay spike or clock drift.
//   * target = clamp(max(4 × EWMA|inter-arrival gap − per-frame gap|, the recent
//     peak of that deviation decaying with a ~5 s half-life), one frame, 500 ms).
//     Gaps over four frames (silence, DTX) and reordered stragglers are outliers
//     and do not feed the estimate. The factors were chosen with
//     `bench-jitter --sweep` (docs/benchmarks.md).

public struct JitterStats: Equatable, Sendable {
    public var packetsReceived: UInt64 = 0
    public var packetsLost: UInt64 = 0
    public var duplicates: UInt64 = 0
    /// Arrived after their playout time, dropped.
    public var late: UInt64 = 0
    /// Starvation episodes in the middle of a talkspurt.
    public var underruns: UInt64 = 0
    public var fecRecovered: UInt64 = 0
    public var plcFrames: UInt64 = 0
    public var dredRecovered: UInt64 = 0
    /// Frames dropped by catch-up or because the pool was full.
    public var skipped: UInt64 = 0
    public init() {}
}

public final class JitterBuffer {
    /// What the decoder should do for the next frame period.
    public enum Playout: Equatable {
        /// Decode the packet in `slot` (then call `release(slot)`).
        case packet(slot: Int)
        /// This frame is lost; the packet in `slot` is the next frame and carries FEC
        /// (or DRED) for it: decode it in recovery mode; do not release it.
        case fec(slot: Int)
        /// This frame is missing and nothing can rebuild it: conceal (PLC).
        case conceal
        /// Nothing to play: the stream is paused or has not started.
        case silence
    }

    public static let maxTargetMs = 500.0
    public let capacity: Int
    public let maxPayload: Int
    public private(set) var frameSamples: Int
    public private(set) var stats = JitterStats()

    // Slot pool.
    private let payloads: UnsafeMutablePointer<UInt8>
    private let lengths: UnsafeMutablePointer<Int>
    private let timestamps: UnsafeMutablePointer<Int64>
    private let seqs: UnsafeMutablePointer<UInt64>
    private let flagBits: UnsafeMutablePointer<UInt8>
    private let used: UnsafeMutablePointer<Bool>
    public private(set) var count = 0

    // Sequence and timestamp tracking.
    private var haveTimestamp = false
    private var lastExtTS: Int64 = 0
    private var maxSeq: UInt64 = 0
    private var haveSeq = false

    // Jitter estimate (ms).
    private var jitterMs = 0.0
    private var peakMs = 0.0
    private var lastArrivalMs = 0.0
    private var lastArrivalTS: Int64 = 0
    private var haveArrival = false

    // Playout clock.
    private var playing = false
    private var playTS: Int64 = 0
    private var newestTS: Int64 = 0
    private var paused = true        // after a last-frame / DTX frame, or before the first
    private var starving = false
    private var starvedTicks = 0
    /// Starved this many periods in a row, the talker is taken to have stopped.
    public var maxStarvedMs = 200.0

    public init(capacity: Int = 64, maxPayload: Int = 1500, frameSamples: Int = 960) {
        self.capacity = capacity
        self.maxPayload = maxPayload
        self.frameSamples = frameSamples
        payloads = .allocate(capacity: capacity * maxPayload)
        lengths = .allocate(capacity: capacity); lengths.initialize(repeating: 0, count: capacity)
        timestamps = .allocate(capacity: capacity); timestamps.initialize(repeating: 0, count: capacity)
        seqs = .allocate(capacity: capacity); seqs.initialize(repeating: 0, count: capacity)
        flagBits = .allocate(capacity: capacity); flagBits.initialize(repeating: 0, count: capacity)
        used = .allocate(capacity: capacity); used.initialize(repeating: false, count: capacity)
    }

    deinit {
        payloads.deallocate(); lengths.deallocate(); timestamps.deallocate()
        seqs.deallocate(); flagBits.deallocate(); used.deallocate()
    }

    /// Forgets everything (a new stream in this slot).
    public func reset(frameSamples: Int) {
        self.frameSamples = frameSamples
        for i in 0..<capacity { used[i] = false }
        count = 0
        stats = JitterStats()
        haveTimestamp = false; haveSeq = false; haveArrival = false
        jitterMs = 0
        peakMs = 0
        playing = false; paused = true; starving = false
    }

    private var frameMs: Double { Double(frameSamples) / 48 }

    /// target = targetFactor × jitter estimate (floored at one frame, capped at 500 ms).
    public var targetFactor = 4.0
    /// Catch-up starts when the backlog exceeds target + max(hysteresisFrames frames, target × hysteresisFraction).
    public var hysteresisFrames = 0.5
    public var hysteresisFraction = 0.5

    /// The adaptive target backlog, in ms.
    public var targetMs: Double {
        min(JitterBuffer.maxTargetMs, max(frameMs, targetFactor * jitterMs, peakFraction * peakMs))
    }
    /// Share of the recent peak deviation (decaying with a ~5 s half-life) the target covers.
    public var peakFraction = 1.0
    private var targetSamples: Int64 { Int64(targetMs * 48) }
    private var hysteresisSamples: Int64 {
        max(Int64(hysteresisFrames * Double(frameSamples)), Int64(Double(targetSamples) * hysteresisFraction))
    }

    /// Buffered audio ahead of the playout clock, in ms.
    public var depthMs: Double {
        guard count > 0 else { return 0 }
        let from = playing ? playTS : oldestTS()
        return Double(max(0, newestTS + Int64(frameSamples) - from)) / 48
    }

    public func payload(_ slot: Int) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: payloads + slot * maxPayload, count: lengths[slot])
    }

    public func release(_ slot: Int) {
        if used[slot] { used[slot] = false; count -= 1 }
    }

    private func unwrap(_ ts: UInt32) -> Int64 {
        guard haveTimestamp else { haveTimestamp = true; lastExtTS = Int64(ts); return lastExtTS }
        let delta = Int64(Int32(bitPattern: ts &- UInt32(truncatingIfNeeded: lastExtTS)))
        let ext = lastExtTS + delta
        if delta > 0 { lastExtTS = ext }
        return ext
    }

    public enum InsertResult: Equatable { case accepted, late, duplicate }

    /// Stores one received frame that arrived at `arrivalMs` (any monotonic ms clock).
    @discardableResult
    public func insert(seq: UInt64, timestamp: UInt32, flags: UInt8, payload: UnsafeRawBufferPointer, arrivalMs: Double) -> InsertResult {
        for i in 0..<capacity where used[i] && seqs[i] == seq {
            stats.duplicates += 1
            return .duplicate
        }
        let ext = unwrap(timestamp)
        stats.packetsReceived += 1
        // Loss accounting by seq: gaps count as lost until (if ever) filled.
        if !haveSeq {
            haveSeq = true; maxSeq = seq
        } else if seq > maxSeq {
            stats.packetsLost += seq - maxSeq - 1
            maxSeq = seq
        } else if stats.packetsLost > 0 {
            stats.packetsLost -= 1
        }
        updateJitter(ts: ext, arrivalMs: arrivalMs)
        if playing && ext < playTS {
            stats.late += 1
            return .late
        }
        var slot = -1
        for i in 0..<capacity where !used[i] { slot = i; break }
        if slot < 0 {
            let o = oldestSlot()!
            release(o)
            stats.skipped += 1
            slot = o
        }
        let n = min(payload.count, maxPayload)
        if n > 0 { (payloads + slot * maxPayload).update(from: payload.baseAddress!.assumingMemoryBound(to: UInt8.self), count: n) }
        lengths[slot] = n
        timestamps[slot] = ext
        seqs[slot] = seq
        flagBits[slot] = flags
        used[slot] = true
        count += 1
        if count == 1 || ext > newestTS { newestTS = ext }
        return .accepted
    }

    private func updateJitter(ts: Int64, arrivalMs: Double) {
        defer {
            if !haveArrival || ts > lastArrivalTS { lastArrivalTS = ts; lastArrivalMs = arrivalMs; haveArrival = true }
        }
        guard haveArrival, ts > lastArrivalTS else { return }          // first, or a reordered straggler
        let gapSamples = ts - lastArrivalTS
        guard gapSamples <= 4 * Int64(frameSamples) else { return }     // silence / DTX / a burst loss
        let d = abs((arrivalMs - lastArrivalMs) - Double(gapSamples) / 48)
        let dc = min(d, JitterBuffer.maxTargetMs)
        jitterMs += (dc - jitterMs) / 16
        // Peak with exponential decay per frame period: half-life ~5 s at 20 ms frames.
        peakMs = max(dc, peakMs * 0.99723)
    }

    private func oldestSlot() -> Int? {
        var best = -1
        var bestTS = Int64.max
        for i in 0..<capacity where used[i] && timestamps[i] < bestTS { best = i; bestTS = timestamps[i] }
        return best < 0 ? nil : best
    }

    private func oldestTS() -> Int64 {
        var best = Int64.max
        for i in 0..<capacity where used[i] && timestamps[i] < best { best = timestamps[i] }
        return best
    }

    private func slot(at ts: Int64) -> Int? {
        for i in 0..<capacity where used[i] && timestamps[i] == ts { return i }
        return nil
    }

    /// Drops buffered frames older than the clock.
    private func dropStale() {
        for i in 0..<capacity where used[i] && timestamps[i] < playTS {
            release(i)
            stats.skipped += 1
        }
    }

    /// Decides the next frame period.
    public func next() -> Playout {
        if !playing {
            guard let o = oldestSlot() else { return .silence }
            // (Re)seed at once; catch-up below bounds it against the leading edge.
            playing = true
            starving = false
            playTS = timestamps[o]
        }
        // Frame N missing and N+1 already here: rebuild N from N+1's in-band FEC (or
        // DRED) now, in N's own period, rather than waiting for it (seed §4).
        let fs = Int64(frameSamples)
        if !paused && !starving && slot(at: playTS) == nil, let next = slot(at: playTS + fs), flagBits[next] & 0x01 == 0 {
            playTS += fs
            stats.fecRecovered += 1
            return .fec(slot: next)
        }
        // Catch-up: keep the backlog within target + hysteresis of the leading edge.
        if count > 0 && newestTS - playTS > targetSamples + hysteresisSamples {
            let to = newestTS - (targetSamples / fs) * fs
            if to > playTS { playTS = to; dropStale() }
        }
        if let s = slot(at: playTS) { return play(s) }
        guard let o = oldestSlot() else {
            // Nothing buffered at all.
            if paused { playing = false; return .silence }
            if !starving { starving = true; starvedTicks = 0; stats.underruns += 1 }
            starvedTicks += 1
            if Double(starvedTicks) * frameMs > maxStarvedMs {
                // The talker stopped without a last frame: pause until the next frame.
                playing = false
                paused = true
                return .silence
            }
            stats.plcFrames += 1
            return .conceal    // wait: the clock does not advance
        }
        let ts = timestamps[o]
        // A new talkspurt, or the end of a pause or starvation: reseed to it.
        if paused || starving || flagBits[o] & 0x01 != 0 {
            playTS = ts
            starving = false
            return play(o)
        }
        // A gap with newer frames here: the missing frame may only be late. Wait while
        // the backlog is within the target (the late-drop window), then give up on it.
        if newestTS - playTS <= targetSamples {
            stats.plcFrames += 1
            return .conceal
        }
        playTS += Int64(frameSamples)
        if ts == playTS {
            stats.fecRecovered += 1
            return .fec(slot: o)
        }
        stats.plcFrames += 1
        return .conceal
    }

    private func play(_ s: Int) -> Playout {
        playTS = timestamps[s] + Int64(frameSamples)
        // After a last-frame or DTX frame the stream is expected to pause.
        paused = flagBits[s] & 0x0c != 0
        starving = false
        return .packet(slot: s)
    }

    /// Counts a frame concealed by the caller (decoder error).
    public func countConcealed() { stats.plcFrames += 1 }
    /// The last `.fec` decision produced nothing: count it as PLC.
    public func fecFailed() { stats.fecRecovered -= 1; stats.plcFrames += 1 }
    /// The last `.fec` decision was served by DRED instead of in-band FEC.
    public func fecWasDRED() { stats.fecRecovered -= 1; stats.dredRecovered += 1 }
}
