// Sliding replay window over u64 sequence numbers (PROTOCOL.md §3): a seq seen
// before, or older than the window, is rejected. seq is never truncated.

public struct ReplayWindow: Sendable {
    /// Width of the window in sequence numbers.
    public static let size: UInt64 = 1024

    public enum Verdict: Equatable, Sendable {
        case fresh
        /// Seen before.
        case duplicate
        /// Older than the window; treated as a duplicate by callers.
        case tooOld
    }

    /// One bit per seq of the window, in the value itself: no heap storage to copy on
    /// write or to allocate when a slot or session gets a new window.
    private var bits = InlineArray<16, UInt64>(repeating: 0)
    private var highest: UInt64 = 0
    private var started = false

    public init() {}

    /// The highest seq accepted so far (nil before the first).
    public var highestSeen: UInt64? { started ? highest : nil }

    @inline(__always) private func isSet(_ s: UInt64) -> Bool {
        let i = Int(s % ReplayWindow.size)
        return bits[i >> 6] & (1 << UInt64(i & 63)) != 0
    }
    @inline(__always) private mutating func set(_ s: UInt64) {
        let i = Int(s % ReplayWindow.size)
        bits[i >> 6] |= 1 << UInt64(i & 63)
    }
    @inline(__always) private mutating func clear(_ s: UInt64) {
        let i = Int(s % ReplayWindow.size)
        bits[i >> 6] &= ~(1 << UInt64(i & 63))
    }

    /// Would `seq` be accepted? Does not record it.
    public func check(_ seq: UInt64) -> Verdict {
        guard started, seq <= highest else { return .fresh }
        if highest - seq >= ReplayWindow.size { return .tooOld }
        return isSet(seq) ? .duplicate : .fresh
    }

    /// Checks and, when fresh, records `seq`. Call only after the frame authenticated.
    public mutating func accept(_ seq: UInt64) -> Verdict {
        let v = check(seq)
        guard v == .fresh else { return v }
        if !started {
            started = true
            highest = seq
        } else if seq > highest {
            let d = seq - highest
            if d >= ReplayWindow.size {
                bits = InlineArray(repeating: 0)
            } else {
                var s = highest + 1
                while s < seq { clear(s); s += 1 }
                clear(seq)
            }
            highest = seq
        }
        set(seq)
        return .fresh
    }
}
