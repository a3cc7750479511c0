// Loss-adaptive FEC (issue #16), the pure halves on each end:
//   * LossMeter: what a listener saw of one stream, by seq, before any recovery:
//     frames expected, lost, and lost alone (both neighbours received), in buckets
//     of one report interval; the report covers the last few of them. A run of
//     losses that spans more than a second (by the timestamps around it) is an
//     outage, left out of the counts.
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
    /// Seqs held for judgement (a jump beyond it adds the gap to the run of losses at once).
    static let span = 256
    /// A run of consecutive losses over more than this much of the stream's time is
    /// an outage (the path was cut: a Wi-Fi handover, a cable, a rebinding), not the
    /// loss FEC is sized for: in-band FEC rebuilds one frame (and this project's DRED,
    /// where libopus has it, 100 ms), and reporting it would have the publisher raise
    /// its FEC and expected loss, for every listener, for as long as the report window
    /// holds it. It is counted neither expected nor lost; the frames around it are
    /// counted as usual. The run's length is the time between the timestamps of the
    /// frames received on either side of it, less a frame: a stream that sends
    /// sparsely (DTX comfort-noise updates, a closed gate) loses few seqs in a long
    /// cut. A run of more than a second's worth of seqs is an outage whatever its
    /// timestamps say.
    public static let outageMs = 1000.0
    private static let outageSamples = Int64(outageMs * 48)

    public let windowBuckets: Int
    /// The stream's frame length in 48 kHz samples (timestamp units).
    private var frameSamples: Int64
    /// The timestamp of the last frame judged received (a run starts after it).
    private var lastReceivedTS: UInt32 = 0
    /// The losses judged since the last frame judged received: counted when the run
    /// ends (a frame received is judged), unless it is an outage.
    private var run: UInt64 = 0
    /// Outages left out of the counts, and the frames they lost (since `reset`).
    public private(set) var outages: UInt64 = 0
    public private(set) var outageLost: UInt64 = 0
    private let received: UnsafeMutablePointer<Bool>     // ring by seq % span
    private let timestamps: UnsafeMutablePointer<UInt32> // the received ones' timestamps, by seq % span
    private let buckets: UnsafeMutablePointer<LossCounts>
    private var bucket = 0                               // the open bucket
    private var closed = 0                               // buckets closed so far (up to windowBuckets)
    private var started = false
    private var base: UInt64 = 0                         // the next seq to judge
    private var highest: UInt64 = 0

    /// `frameSamples`: the stream's frame length at 48 kHz, which says how many lost
    /// frames make an outage.
    public init(windowBuckets: Int = LossAggregation.windowBuckets, frameSamples: Int = 960) {
        self.windowBuckets = max(1, windowBuckets)
        self.frameSamples = LossMeter.validFrameSamples(frameSamples)
        received = .allocate(capacity: LossMeter.span)
        received.initialize(repeating: false, count: LossMeter.span)
        timestamps = .allocate(capacity: LossMeter.span)
        timestamps.initialize(repeating: 0, count: LossMeter.span)
        buckets = .allocate(capacity: self.windowBuckets + 1)
        buckets.initialize(repeating: LossCounts(), count: self.windowBuckets + 1)
    }

    deinit { received.deallocate(); timestamps.deallocate(); buckets.deallocate() }

    /// Forgets everything (a new stream, of `frameSamples` frames at 48 kHz).
    public func reset(frameSamples: Int = 960) {
        for i in 0..<LossMeter.span { received[i] = false }
        for i in 0...windowBuckets { buckets[i] = LossCounts() }
        bucket = 0; closed = 0
        started = false; base = 0; highest = 0
        self.frameSamples = LossMeter.validFrameSamples(frameSamples)
        run = 0; outages = 0; outageLost = 0; lastReceivedTS = 0
    }

    /// Frame lengths outside the codec's 2.5–60 ms are taken as 20 ms.
    private static func validFrameSamples(_ n: Int) -> Int64 { (120...2880).contains(n) ? Int64(n) : 960 }

    private func index(_ seq: UInt64) -> Int { Int(seq % UInt64(LossMeter.span)) }

    /// One frame received: its seq and its timestamp (48 kHz samples).
    public func record(seq: UInt64, timestamp: UInt32) {
        guard started else {
            started = true
            base = seq; highest = seq
            received[index(seq)] = true
            timestamps[index(seq)] = timestamp
            return
        }
        guard seq >= base else { return }   // judged lost already: it came too late
        if seq > highest {
            let reach = UInt64(LossMeter.span) - LossMeter.reorderFrames - 1
            if seq - base > reach {
                // Beyond what the ring holds: judge what is held; the seqs in between
                // never came, a run of losses (an outage, this long).
                while base <= highest { judge() }
                run = run &+ (seq - base)
                base = seq
            }
            highest = seq
        }
        received[index(seq)] = true
        timestamps[index(seq)] = timestamp
        while highest - base >= LossMeter.reorderFrames { judge() }
    }

    /// Judges `base` (its successor's fate is known, or assumed lost past `highest`).
    /// A loss joins the run; a frame received ends it: the run is counted (a run of
    /// one is an isolated loss: a run starts after a frame received), or left out as
    /// an outage.
    private func judge() {
        let i = index(base)
        let got = received[i]
        received[i] = false
        base += 1
        guard got else { run = run &+ 1; return }
        let ts = timestamps[i]
        // The time the run spans: from the end of the frame received before it to the
        // start of this one (timestamps that go backwards say nothing: seqs decide).
        let span = Int64(Int32(bitPattern: ts &- lastReceivedTS)) - frameSamples
        lastReceivedTS = ts
        // Longer than a second by its timestamps, or by its seqs.
        if run > 0 && (span > LossMeter.outageSamples || run > UInt64(LossMeter.outageSamples / frameSamples)) {
            outages += 1
            outageLost = outageLost &+ run
        } else if run > 0 {
            let n = UInt32(run)
            buckets[bucket].add(LossCounts(expected: n, lost: n, isolated: run == 1 ? 1 : 0))
        }
        buckets[bucket].add(LossCounts(expected: 1))
        run = 0
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
