// Hand-off of received frames from the network thread to whoever renders, without
// a lock: a single-producer / single-consumer ring of preallocated entries.
import Synchronization
import VoiceCatProtocol

/// One producer at a time (whoever holds the media input's token: the network
/// thread, or the renderer just before it renders) pushes opened frames; one consumer at a time
/// (the renderer, a host thread reading statistics, or the producer finding the ring
/// full, serialized by the slot's lock) pops them into the jitter buffer. A ring still
/// full (its slot lock was held) drops the newest frame and counts it. Nothing
/// allocates after init.
final class PacketRing: @unchecked Sendable {
    struct Entry {
        var seq: UInt64 = 0
        var timestamp: UInt32 = 0
        var flags = FrameFlags()
        var arrivalMs = 0.0
        var length = 0
    }

    let capacity: Int
    let maxPayload: Int
    private let entries: UnsafeMutablePointer<Entry>
    private let payloads: UnsafeMutablePointer<UInt8>
    /// Monotonic counts: the producer advances `tail`, the consumer `head`.
    private let head = Atomic<Int>(0)
    private let tail = Atomic<Int>(0)
    /// Frames dropped because the ring was full (nobody rendering for a while).
    let overflows = Atomic<UInt64>(0)

    init(capacity: Int = 64, maxPayload: Int = 1500) {
        self.capacity = capacity
        self.maxPayload = maxPayload
        entries = .allocate(capacity: capacity)
        entries.initialize(repeating: Entry(), count: capacity)
        // Not written here: a byte is read only after a push wrote it (`length`), and
        // pages nobody writes stay out of the process's memory. 64 entries of a 4 KiB
        // datagram are 260 KB per receive slot, which zeroing made resident for every
        // slot (max_remote_streams, 32 by default) whether a stream ever came or not.
        payloads = .allocate(capacity: capacity * maxPayload)
    }

    deinit { entries.deallocate(); payloads.deallocate() }

    /// Producer: the ring has no room for another frame (nobody has taken any for its
    /// `capacity` frames).
    var isFull: Bool { tail.load(ordering: .relaxed) - head.load(ordering: .acquiring) >= capacity }

    /// Producer: stores one frame; false (counted) when the ring is full.
    @discardableResult
    func push(seq: UInt64, timestamp: UInt32, flags: FrameFlags, arrivalMs: Double, payload: UnsafeRawBufferPointer) -> Bool {
        let t = tail.load(ordering: .relaxed)
        if t - head.load(ordering: .acquiring) >= capacity {
            overflows.wrappingAdd(1, ordering: .relaxed)
            return false
        }
        let i = t % capacity
        let n = min(payload.count, maxPayload)
        if n > 0 { (payloads + i * maxPayload).update(from: payload.baseAddress!.assumingMemoryBound(to: UInt8.self), count: n) }
        entries[i] = Entry(seq: seq, timestamp: timestamp, flags: flags, arrivalMs: arrivalMs, length: n)
        tail.store(t + 1, ordering: .releasing)
        return true
    }

    /// Consumer: when the newest frame waiting arrived (nil: none is waiting).
    var lastArrivalMs: Double? {
        let t = tail.load(ordering: .acquiring)
        guard head.load(ordering: .relaxed) < t else { return nil }
        return entries[(t - 1) % capacity].arrivalMs
    }

    /// Consumer: when the oldest frame waiting arrived (nil: none is waiting).
    var firstArrivalMs: Double? {
        let h = head.load(ordering: .relaxed)
        guard h < tail.load(ordering: .acquiring) else { return nil }
        return entries[h % capacity].arrivalMs
    }

    /// Consumer: hands every waiting frame to `body`, oldest first.
    func drain(_ body: (Entry, UnsafeRawBufferPointer) -> Void) {
        var h = head.load(ordering: .relaxed)
        let t = tail.load(ordering: .acquiring)
        while h < t {
            let i = h % capacity
            let e = entries[i]
            body(e, UnsafeRawBufferPointer(start: payloads + i * maxPayload, count: e.length))
            h += 1
        }
        head.store(h, ordering: .releasing)
    }

    /// Forgets everything (a new stream in the slot). Only while neither side runs:
    /// the caller holds the media input's token (no producer) and the slot lock
    /// every consumer takes.
    func reset() {
        head.store(tail.load(ordering: .acquiring), ordering: .releasing)
        overflows.store(0, ordering: .relaxed)
    }
}
