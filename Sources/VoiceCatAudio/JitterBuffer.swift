// Per-ssrc jitter buffer: reorders by timestamp and plays frames in order.
//
// Pure and preallocated: packets live in a fixed pool of slots; insert and playout
// do not allocate. Timestamps (u32 at 48 kHz) are unwrapped to 64 bits so a stream
// crossing 2^32 plays through. Playout:
//   * starts (or restarts after starving or after a stop) once `targetFrames`
//     frames are buffered, or once the oldest has waited that many ticks;
//   * each tick plays the frame whose timestamp is next; a gap in *seq* is a loss
//     (concealed, with in-band FEC when the following frame is already here); a gap
//     in *timestamp* with contiguous seq is a DTX/silence gap (no loss);
//   * a talkspurt marker reseeds the clock to that frame;
//   * when the backlog exceeds target + hysteresis the oldest frames are skipped.

public struct JitterStats: Equatable, Sendable {
    public var packetsReceived: UInt64 = 0
    public var packetsLost: UInt64 = 0
    public var duplicates: UInt64 = 0
    public var late: UInt64 = 0
    public var underruns: UInt64 = 0
    public var fecRecovered: UInt64 = 0
    public var plcFrames: UInt64 = 0
    public var dredRecovered: UInt64 = 0
    public var skipped: UInt64 = 0
    public init() {}
}

public final class JitterBuffer {
    /// What the decoder should do for the next frame.
    public enum Playout: Equatable {
        /// Decode the packet in `slot` (then call `release(slot)`).
        case packet(slot: Int)
        /// The frame is lost; the packet in `slot` is the next frame and carries FEC for it
        /// (decode it with fec = true; do not release).
        case fec(slot: Int)
        /// The frame is lost and nothing can rebuild it: conceal (PLC).
        case conceal
        /// Nothing to play (not started, silence gap, or stream stopped).
        case silence
    }

    public let capacity: Int
    public let maxPayload: Int
    public private(set) var frameSamples: Int
    public var targetFrames: Int
    public var hysteresisFrames = 4
    public private(set) var stats = JitterStats()

    // Slot pool.
    private let payloads: UnsafeMutablePointer<UInt8>
    private let lengths: UnsafeMutablePointer<Int>
    private let timestamps: UnsafeMutablePointer<Int64>
    private let seqs: UnsafeMutablePointer<UInt64>
    private let flagBits: UnsafeMutablePointer<UInt8>
    private let used: UnsafeMutablePointer<Bool>
    public private(set) var count = 0

    // Clocks.
    private var haveTimestamp = false
    private var lastExtTS: Int64 = 0
    private var maxSeq: UInt64 = 0
    private var haveSeq = false
    private var playing = false
    private var playTS: Int64 = 0
    private var lastPlayedSeq: UInt64 = 0
    private var lastPlayedWasFinal = false
    private var waitTicks = 0
    private var concealedSinceStarve = false

    public init(capacity: Int = 64, maxPayload: Int = 1500, frameSamples: Int = 960, targetFrames: Int = 2) {
        self.capacity = capacity
        self.maxPayload = maxPayload
        self.frameSamples = frameSamples
        self.targetFrames = targetFrames
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

    /// Forgets everything (new stream in this slot).
    public func reset(frameSamples: Int, targetFrames: Int) {
        self.frameSamples = frameSamples
        self.targetFrames = targetFrames
        for i in 0..<capacity { used[i] = false }
        count = 0
        stats = JitterStats()
        haveTimestamp = false; haveSeq = false; playing = false
        waitTicks = 0; lastPlayedWasFinal = false; concealedSinceStarve = false
    }

    public var isPlaying: Bool { playing }
    public var depthFrames: Int { count }

    public func payload(_ slot: Int) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: payloads + slot * maxPayload, count: lengths[slot])
    }
    public func flags(_ slot: Int) -> UInt8 { flagBits[slot] }

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

    /// Stores one received frame. `flags` are the header flag bits.
    @discardableResult
    public func insert(seq: UInt64, timestamp: UInt32, flags: UInt8, payload: UnsafeRawBufferPointer) -> InsertResult {
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
            stats.packetsLost -= 1  // a reordered straggler fills an earlier gap
        }
        if playing && ext < playTS {
            stats.late += 1
            return .late
        }
        var slot = -1
        for i in 0..<capacity where !used[i] { slot = i; break }
        if slot < 0 {
            // Full: the oldest frame is the least useful one.
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
        return .accepted
    }

    private func oldestSlot() -> Int? {
        var best = -1
        var bestTS = Int64.max
        for i in 0..<capacity where used[i] && timestamps[i] < bestTS { best = i; bestTS = timestamps[i] }
        return best < 0 ? nil : best
    }

    /// Decides the next frame to render. Call once per frame period.
    public func next() -> Playout {
        if !playing {
            guard let o = oldestSlot() else { waitTicks = 0; return .silence }
            waitTicks += 1
            let startNow = count >= targetFrames || waitTicks > targetFrames
                || flagBits[o] & 0x08 != 0 || (lastPlayedWasFinal && flagBits[o] & 0x01 != 0 && count >= 1 && waitTicks >= targetFrames)
            guard startNow else { return .silence }
            playing = true
            waitTicks = 0
            concealedSinceStarve = false
            playTS = timestamps[o]
            return play(o)
        }
        // Catch-up: keep the backlog near the target.
        while count > targetFrames + hysteresisFrames, let o = oldestSlot() {
            release(o)
            stats.skipped += 1
            playTS = max(playTS, timestamps[o] + Int64(frameSamples))
        }
        guard let o = oldestSlot() else {
            if lastPlayedWasFinal { playing = false; return .silence }
            // Starved mid-talkspurt: conceal once, then wait to be refilled.
            stats.underruns += 1
            playing = false
            if !concealedSinceStarve {
                concealedSinceStarve = true
                stats.plcFrames += 1
                lastPlayedSeq &+= 1
                return .conceal
            }
            return .silence
        }
        let ts = timestamps[o]
        if ts <= playTS { return play(o) }
        // A marker starts a new talkspurt: reseed to it.
        if flagBits[o] & 0x01 != 0 {
            playTS = ts
            return play(o)
        }
        if seqs[o] == lastPlayedSeq &+ 1 {
            // Contiguous seq across a timestamp gap: DTX / silence, nothing lost.
            playTS += Int64(frameSamples)
            return .silence
        }
        // Lost frame(s) before `o`.
        playTS += Int64(frameSamples)
        lastPlayedSeq &+= 1
        if ts == playTS {
            stats.fecRecovered += 1
            return .fec(slot: o)
        }
        stats.plcFrames += 1
        return .conceal
    }

    private func play(_ o: Int) -> Playout {
        playTS = timestamps[o] + Int64(frameSamples)
        lastPlayedSeq = seqs[o]
        // After a last-frame or DTX frame the stream is expected to pause: running dry is not an underrun.
        lastPlayedWasFinal = flagBits[o] & 0x0c != 0
        return .packet(slot: o)
    }

    /// Counts a frame concealed by the caller for another reason (decoder error).
    public func countConcealed() { stats.plcFrames += 1 }
    /// Converts the last `.fec` decision into PLC (the FEC decode produced nothing).
    public func fecFailed() { stats.fecRecovered -= 1; stats.plcFrames += 1 }
}
