// Loss feedback (issue #16), the parts both sides share: the counts a listener
// reports for a stream, and how the server turns its listeners' reports into one
// feedback for the publisher. The relay never decodes audio: it only ranks counts.

/// Frames of one stream over a window, as one listener saw them before any recovery.
public struct LossCounts: Equatable, Sendable {
    /// Frames the seqs say were sent in the window.
    public var expected: UInt32
    /// Of those, never received (or received too late to count).
    public var lost: UInt32
    /// Of the lost, those whose both neighbours were received: a loss in-band FEC
    /// rebuilds whole. The rest came in bursts.
    public var isolated: UInt32

    public init(expected: UInt32 = 0, lost: UInt32 = 0, isolated: UInt32 = 0) {
        self.expected = expected; self.lost = lost; self.isolated = isolated
    }

    /// Lost frames per expected frame (0 with nothing expected).
    public var lossRate: Double { expected == 0 ? 0 : Double(lost) / Double(expected) }
    /// Isolated losses per expected frame.
    public var isolatedRate: Double { expected == 0 ? 0 : Double(isolated) / Double(expected) }

    /// Why these counts cannot be (more lost than expected, more isolated than lost), or nil.
    public var problem: String? {
        if lost > expected { return "\(lost) frames lost of \(expected) expected" }
        if isolated > lost { return "\(isolated) isolated losses of \(lost) lost" }
        return nil
    }

    /// Adds `o` (saturating).
    public mutating func add(_ o: LossCounts) {
        expected = expected.addingReportingOverflow(o.expected).overflow ? .max : expected + o.expected
        lost = lost.addingReportingOverflow(o.lost).overflow ? .max : lost + o.lost
        isolated = isolated.addingReportingOverflow(o.isolated).overflow ? .max : isolated + o.isolated
    }
}

/// How the server sums up the listeners of one stream (docs/protocol.md, loss feedback).
public enum LossAggregation {
    /// The report at this quantile of the listeners, ranked by loss, is the one sent
    /// to the publisher (nearest rank: the ⌈q·n⌉-th smallest). With q = 0.75 one lossy
    /// listener of two or three is followed (a small call protects its worst path),
    /// one of four or more is not: then a quarter of the listeners must lose that much.
    public static let quantile = 0.75
    /// Reports over fewer frames than this say too little and are not counted
    /// (a second of 20 ms frames: a listener that just joined, a stream mostly in DTX).
    public static let minExpected: UInt32 = 50
    /// The server sends a publisher feedback for a stream at most this often.
    public static let feedbackIntervalMs: UInt64 = 1000
    /// A listener's report older than this is no longer counted (it stopped reporting).
    public static let reportLifetimeMs: UInt64 = 4000
    /// Clients report this often, over the last `windowBuckets` intervals.
    public static let reportIntervalMs: UInt64 = 1000
    public static let windowBuckets = 5

    /// The report at `quantile` among those over at least `minExpected` frames, and
    /// how many were counted; nil when none was.
    public static func aggregate(_ reports: [LossCounts]) -> (counts: LossCounts, listeners: Int)? {
        let usable = reports.filter { $0.expected >= minExpected && $0.problem == nil }
        guard !usable.isEmpty else { return nil }
        let ranked = usable.sorted { ($0.lossRate, $0.isolatedRate) < ($1.lossRate, $1.isolatedRate) }
        let rank = Int((quantile * Double(ranked.count)).rounded(.up))
        return (ranked[min(max(rank, 1), ranked.count) - 1], ranked.count)
    }
}
