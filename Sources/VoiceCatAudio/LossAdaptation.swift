// Loss-adaptive FEC (issue #16), the pure halves on each end:
//   * LossMeter: what a listener saw of one stream, by seq, before any recovery:
//     frames expected, lost, and lost alone (both neighbours received), in buckets
//     of one report interval; the report covers the last few of them.
//   * FECPolicy: what a publisher does with the feedback the server derives from
//     those reports: in-band FEC off on a clean path, on and sized to the measured
//     loss when isolated losses are seen, with hysteresis, never beyond the
//     channel's `fec` / `expected_packet_loss` (its ceiling and starting point).
// Neither allocates after init, reads a clock or touches a socket.
import VoiceCatProtocol

/// Reception statistics of one stream, fed with the seq of every frame received
/// (once each: after the replay window) and closed into a report every interval.
public final class LossMeter {
    /// A seq is judged once this many newer ones were seen (reordering within it is
    /// not loss): 8 frames, 160 ms at 20 ms.
    public static let reorderFrames: UInt64 = 8
    /// Seqs held for judgement (a jump beyond it counts the gap lost in bulk).
    static let span = 256
    /// A jump of more than this many seqs counts only this many (a stream that
    /// resumes after a long outage reports it, without overflowing the counts).
    static let maxBulkLoss: UInt64 = 1024

    public let windowBuckets: Int
    private let received: UnsafeMutablePointer<Bool>     // ring by seq % span
    private let buckets: UnsafeMutablePointer<LossCounts>
    private var bucket = 0                               // the open bucket
    private var closed = 0                               // buckets closed so far (up to windowBuckets)
    private var started = false
    private var base: UInt64 = 0                         // the next seq to judge
    private var highest: UInt64 = 0
    private var previousReceived = true                  // was base - 1 received

    public init(windowBuckets: Int = LossAggregation.windowBuckets) {
        self.windowBuckets = max(1, windowBuckets)
        received = .allocate(capacity: LossMeter.span)
        received.initialize(repeating: false, count: LossMeter.span)
        buckets = .allocate(capacity: self.windowBuckets + 1)
        buckets.initialize(repeating: LossCounts(), count: self.windowBuckets + 1)
    }

    deinit { received.deallocate(); buckets.deallocate() }

    /// Forgets everything (a new stream).
    public func reset() {
        for i in 0..<LossMeter.span { received[i] = false }
        for i in 0...windowBuckets { buckets[i] = LossCounts() }
        bucket = 0; closed = 0
        started = false; base = 0; highest = 0; previousReceived = true
    }

    private func index(_ seq: UInt64) -> Int { Int(seq % UInt64(LossMeter.span)) }

    /// One frame received.
    public func record(seq: UInt64) {
        guard started else {
            started = true
            base = seq; highest = seq
            received[index(seq)] = true
            return
        }
        guard seq >= base else { return }   // judged lost already: it came too late
        if seq > highest {
            let reach = UInt64(LossMeter.span) - LossMeter.reorderFrames - 1
            if seq - base > reach {
                // Beyond what the ring holds: judge what is held, count the rest lost.
                while base <= highest { judge() }
                let gap = seq - base
                if gap > 0 {
                    let n = UInt32(min(gap, LossMeter.maxBulkLoss))
                    buckets[bucket].add(LossCounts(expected: n, lost: n, isolated: gap == 1 ? 1 : 0))
                    previousReceived = false
                }
                base = seq
            }
            highest = seq
        }
        received[index(seq)] = true
        while highest - base >= LossMeter.reorderFrames { judge() }
    }

    /// Judges `base` (its successor's fate is known, or assumed lost past `highest`).
    private func judge() {
        let i = index(base)
        let got = received[i]
        received[i] = false
        var c = LossCounts(expected: 1)
        if !got {
            c.lost = 1
            let nextGot = base < highest && received[index(base + 1)]
            if previousReceived && nextGot { c.isolated = 1 }
        }
        buckets[bucket].add(c)
        previousReceived = got
        base += 1
    }

    /// Closes the current interval: the counts of the last `windowBuckets` intervals.
    public func closeInterval() -> LossCounts {
        closed = min(closed + 1, windowBuckets)
        var sum = LossCounts()
        for k in 0..<closed { sum.add(buckets[(bucket - k + windowBuckets + 1) % (windowBuckets + 1)]) }
        bucket = (bucket + 1) % (windowBuckets + 1)
        buckets[bucket] = LossCounts()
        return sum
    }
}

/// The loss protection a publisher's encoder runs with, following the feedback.
///
/// * FEC goes on at once when a report shows isolated losses (the ones it rebuilds
///   whole): at least `onIsolatedFrames` and `onIsolatedRate` of the frames.
/// * Its size (the expected loss the encoder is told) follows the loss the reports
///   measure, smoothed over reports (a report covers a few seconds; bursty loss
///   makes them swing): a third of it, at least 1 %. libopus (1.3) codes FEC for the
///   same frames at any percentage (those with voice activity); a higher one makes
///   each copy finer and costs every frame, and PESQ-WB on bench-quality's traces
///   peaks at 1-2 % for 2-6 % loss and at 3 % for 10-12 % (docs/benchmarks.md).
///   With FEC off it is the measured loss (0 on a clean path): there it makes the
///   encoder lean less on past frames, so PLC recovers sooner, which pays under loss.
///   More protection is taken at once.
/// * Less (a lower percentage, or FEC off when reports show no isolated losses)
///   only after `lowerAfter` reports in a row ask for it; once the path has shown
///   isolated losses, FEC stays on until `offAfterLoss` reports in a row saw none
///   (a path losing 1 % may go seconds without a loss). A change in the number of
///   listeners counted (one joined or left) is a new path: that memory and the
///   smoothed loss start again.
/// * Never beyond the ceiling (the channel's `fec`, `expected_packet_loss`), where a
///   stream starts; without feedback it stays there.
public struct FECPolicy: Equatable, Sendable {
    /// What the encoder is told: OPUS_SET_INBAND_FEC and OPUS_SET_PACKET_LOSS_PERC.
    public struct Protection: Equatable, Sendable {
        public var fec: Bool
        public var lossPercent: Int
        public init(fec: Bool, lossPercent: Int) { self.fec = fec; self.lossPercent = lossPercent }
    }

    public static let onIsolatedRate = 0.004
    public static let onIsolatedFrames: UInt32 = 2
    /// A report below this isolated rate asks for FEC off.
    public static let offIsolatedRate = 0.0015
    /// Reports in a row asking for less before protection is lowered (a rise is at once).
    public static let lowerAfter = 3
    /// ...and before FEC goes off on a path that showed isolated losses.
    public static let offAfterLoss = 15
    /// Weight of a new report in the smoothed loss.
    public static let smoothing = 0.3
    /// The expected loss FEC is sized to, per unit of measured loss.
    public static let sizeShare = 1.0 / 3
    /// Reports over fewer frames are not acted on.
    public static let minExpected = LossAggregation.minExpected

    /// The channel's setting: never more than this, and where a stream starts.
    public let ceiling: Protection
    public private(set) var current: Protection
    /// Reports in a row that asked for less than `current`.
    public private(set) var lowerStreak = 0
    /// The smoothed loss rate (nil before the first report acted on).
    public private(set) var smoothedLoss: Double?
    /// This path has shown isolated losses (since the listeners last changed).
    public private(set) var lossSeen = false
    /// The last feedback acted on.
    public private(set) var lastFeedback: LossCounts?
    public private(set) var lastListeners: UInt32 = 0
    /// Feedback messages taken, and how often the protection changed.
    public private(set) var feedbacks: UInt64 = 0
    public private(set) var changes: UInt64 = 0

    /// `fec`, `expectedLoss`: the channel's AudioConfig.
    public init(fec: Bool, expectedLoss: Int) {
        ceiling = Protection(fec: fec, lossPercent: min(max(expectedLoss, 0), 100))
        current = ceiling
    }

    static func isolatedEvidence(_ c: LossCounts) -> Bool {
        c.isolated >= onIsolatedFrames && c.isolatedRate >= onIsolatedRate
    }

    /// What `counts` asks for (with the smoothed loss `loss`), within the ceiling.
    func wanted(_ counts: LossCounts, loss: Double) -> Protection {
        let fec: Bool
        if !ceiling.fec || ceiling.lossPercent == 0 {
            fec = false
        } else if FECPolicy.isolatedEvidence(counts) {
            fec = true
        } else if counts.isolatedRate < FECPolicy.offIsolatedRate {
            fec = false
        } else {
            fec = current.fec   // between the thresholds: as it is
        }
        guard fec else {
            // Without FEC the expected loss makes the encoder lean less on past frames, so
            // that its PLC recovers sooner: worth its cost at the loss measured.
            return Protection(fec: false, lossPercent: min(Int((loss * 100).rounded()), ceiling.lossPercent))
        }
        // FEC needs a loss percentage above 0 to be coded at all.
        let size = Int((loss * 100 * FECPolicy.sizeShare).rounded())
        return Protection(fec: true, lossPercent: min(max(1, size), ceiling.lossPercent))
    }

    /// Takes one feedback (the counts of the listener the server chose, and how many
    /// listeners it counted); true when the protection changed.
    @discardableResult
    public mutating func apply(_ counts: LossCounts, listeners: UInt32 = 1) -> Bool {
        feedbacks += 1
        guard counts.expected >= FECPolicy.minExpected, counts.problem == nil else { return false }
        if listeners != lastListeners { lossSeen = false; smoothedLoss = nil }
        lastFeedback = counts
        lastListeners = listeners
        let loss = smoothedLoss.map { $0 + FECPolicy.smoothing * (counts.lossRate - $0) } ?? counts.lossRate
        smoothedLoss = loss
        if FECPolicy.isolatedEvidence(counts) { lossSeen = true }
        let want = wanted(counts, loss: loss)
        let next: Protection
        // More protection: FEC turned on, or a higher percentage with FEC as it is. (The
        // percentage without FEC is not less protection than a smaller one with it.)
        if (want.fec && !current.fec) || (want.fec == current.fec && want.lossPercent > current.lossPercent) {
            next = want
            lowerStreak = 0
        } else if want != current {
            lowerStreak += 1
            let needed = lossSeen && current.fec && !want.fec ? FECPolicy.offAfterLoss : FECPolicy.lowerAfter
            guard lowerStreak >= needed else { return false }
            next = want
            lowerStreak = 0
        } else {
            lowerStreak = 0
            return false
        }
        guard next != current else { return false }
        current = next
        changes += 1
        return true
    }
}
