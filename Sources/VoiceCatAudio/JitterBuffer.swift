// Per-ssrc adaptive jitter buffer (seed §5).
//
// Pure and preallocated: packets live in a fixed pool of slots, the delay
// statistics in a fixed ring and histogram; nothing allocates per frame and
// nothing reads a clock. Timestamps (u32 at 48 kHz) are unwrapped to 64 bits so a
// stream crossing 2^32 plays through. The consumer calls next() once per frame
// period: those calls *are* the playout clock, and the buffer measures lateness
// in them.
//
// How late a frame is. Every call to next() is a tick. A frame that was inserted
// after k ticks can be played at tick k at the earliest, so its lateness is
// ℓ = k − (its timestamp in frames). A playout alignment plays the frame at
// position p at tick p + n; the frame is on time iff ℓ ≤ n. Measuring lateness in
// ticks (not in milliseconds) needs no clock of its own and sees the consumer's
// phase and rate (clock drift included). When the consumer gives the tick times
// (next(atMs:)), an arrival is also placed within its period: k becomes
// k − 1 + (time since tick k − 1) / period, so ℓ is known to a fraction of a tick.
// Playout still happens on whole ticks; the fraction says where the consumer's
// ticks fall among the arrivals, so a cushion costs what it covers, not a whole
// period, and a drifting sender clock is followed as it slides.
//
// The target (after WebRTC NetEq's delay manager, written anew): the relative
// lateness r = ℓ − min(ℓ over the last `historyFrames` frames) goes into a
// histogram of 1/`binsPerTick`-tick bins with exponential forgetting
// (`forgetFactor`). Quantiles of it set the cushion, in ticks beyond the frame in
// play (played at the first tick whose cushion reaches them):
//   * start: `startQuantile` (90 %), or `cleanQuantile` (99.8 %) when covering that
//     costs at most `cleanStartTicks` (half a period) more: a clean path, where no
//     talkspurt then has to wait for its first late frame (a concealed period in the
//     middle of speech, and a realignment) — the first complaint. A smaller
//     setting trades that for delay where lateness is known within the period.
//     A stream whose talkspurts end late as a rule (the median of its last
//     `endWindow` ends' lateness over the median lateness above `endLateGateMs`,
//     2 ms: a fed stream's sender waits a slack before it ends a talkspurt)
//     starts with its ends covered too (`endCoverTicks`, not part of the target nor
//     shed as excess), so a clock that cannot move later for an end (a card, a
//     host's pulls) does not conceal it;
//   * target: `quantile` (98 %), and at least the clean cover where that costs at
//     most `cleanTargetTicks` (one period) more than the 90 % one;
//   * on a stream that loses frames FEC can rebuild (loss rate above
//     `fecLossRate`, with hysteresis), both also cover the successor's arrival for
//     `fecQuantile` of frames plus one period, so a lost frame's successor is here
//     at its playout time.
// All are clamped by setBounds(minMs:maxMs:). Marker, last-frame and DTX frames
// do not feed the histogram (the first frame after a pause, the padded last frame
// and comfort-noise updates are not network jitter), and nothing is derived from
// the gap between arrivals, so a sender pause whose timestamps advance by
// wall-clock time looks like nothing at all. A frame whose lateness jumps by more
// than the maximum target (a route change, a restarted sender) rebases the
// timeline instead of being taken for jitter; so does a talkspurt's marker frame
// that looks later than the target or earlier than the baseline (a sender whose
// timestamps stood still, or ran ahead, over the pause), and the first frame after
// a talkspurt ended by starving (a path that got slower or stalled: a delay
// episode's 300 ms taken for jitter held the target there for seconds). The rebased
// frame is taken to be of median lateness (its own jitter is unknown), not the
// earliest.
//
// Playout:
//   * Talkspurt start: the first frame waits until it has the start cushion (a
//     fresh stream seeded with another stream's lateness (seed(from:): the receive
//     path seeds each stream's buffer, as its first frames arrive, with that of the
//     others from the same server) counts it from its first frame, whose lateness
//     then enters the baseline, not the histogram; one with no history at all plays
//     it at the next tick, or a tick later when it came less than
//     `unknownStartMarginTicks` before that one (tick times known: the frames after
//     it may come a little later, past their ticks), unless a lower bound or the
//     consumer's burst (setConsumerBurst: a host pulling several periods at a time)
//     asks for frames in hand: then once that many are here, or it has waited that
//     long). Pauses realign for free:
//     every talkspurt, and every comfort-noise update in a pause, starts there.
//   * Late frames are waited for, not given up: a missing frame with nothing newer
//     buffered holds the clock (the period is concealed) while the cushion is
//     below target, and beyond it up to target + `waitTicks` (+ 0 on a lossy
//     stream, whose target already waits for the successor) only while the
//     histogram says frames that late mostly came within one more period
//     (`waitLikelihood`: a jitter tail, not delay spikes, for which a held period
//     rarely brings the frame and is carried until shed). One that nothing could
//     rebuild is held below target even when later frames are here (it may only be
//     reordered). So the cushion grows from the start cushion towards the target
//     where the network asks for it, and the late frame, or its successor with its
//     FEC, still plays.
//   * A missing frame whose successor is here is rebuilt from the successor's FEC
//     (or DRED: `recoveryAvailable`) in its own period, or concealed. When no seq is
//     missing (the successor's seq follows the frame played last, and it has no
//     marker), nothing was lost:
//     the sender skipped that frame's time (its host fell a frame behind real time),
//     so the period is concealed at once, not waited for, and not rebuilt from the
//     successor's FEC (which is of the frame before). Just after a talkspurt resumed
//     on a stall's frames (below), frames missing together with later ones here,
//     two periods or more over the target (the rest of what the stall held was
//     lost), are skipped at once up to the oldest frame here (or the one before it,
//     rebuilt from the oldest's FEC), keeping a period over the target: concealed one
//     a tick, they kept that delay for as long as they lasted. Elsewhere one is
//     concealed a tick (a path that got faster: stragglers on the slower one still
//     come).
//   * Excess cushion (when one period less, plus `hysteresisTicks`, would still
//     cover the target: after a spike, a drop in delay, a sender clock running
//     fast) is given back where it is cheapest: at a pause (free); at once by
//     dropping a DTX or quiet frame (after the renderer reported a quiet one; a small
//     packet when it reports no levels); and only once it has lasted `catchUpTicks` (when the renderer
//     reports levels, `quietCatchUpTicks`: it waits for a pause) by skipping a frame
//     the network lost, or else dropping one buffered frame. With n whole periods of
//     excess buffered the wait is divided by n, with drops at least `minShedGapTicks`
//     apart: the end of a delay episode is shed within seconds. Frames a spike
//     delivered in a burst are played, not thrown away by a jump of the clock (a
//     stall long enough to end the talkspurt is the exception: see the last item).
//     Beyond the bound, though (a cushion more than a period over the upper bound,
//     500 ms by default: a path or server that stopped and then gave its backlog
//     at once), what exceeds the target is dropped at once: played, it stayed as
//     seconds of delay, and past the pool every new frame was taken for late.
//   * A consumer whose ticks stop (catchUp: its thread blocked for more than
//     `stallMs` beyond its burst) has missed those periods: they are taken as
//     ticks at their times and what was due in them is dropped as late, so the
//     frames that came meanwhile are placed on the clock that went on.
//   * Frames that came while nobody ticked at all and no talkspurt was playing (a
//     host that has not pulled yet, a device suspended, the output switched off)
//     are not a talkspurt to start when ticks come: one whose first frame came
//     more than `stallMs` beyond its usual wait before the tick is dropped as late
//     up to the frames a start would have waited for (shedStaleStart).
//   * The talkspurt ends after a last-frame or DTX frame is played, or after
//     starving for `maxStarvedMs`; `talkEdge` says when a talkspurt started or
//     ended in what was played. The frames the starving concealed and passed are
//     not late when they come after that: what continues the stream (no marker)
//     starts the next talkspurt on its first frame when it comes one by one (a path
//     that got slower: nothing it delayed is lost), and on the frame with a start's
//     cushion when it came at once (a stalled path's backlog; older ones are dropped
//     as late, never past a marker, and with a last-frame or DTX frame buffered only
//     what the starving passed).
import VoiceCatProtocol

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
    /// Periods concealed while waiting for a late frame (the clock held still).
    public var waited: UInt64 = 0
    /// Frames lost in the network that were skipped (not concealed) to shed excess delay.
    public var lossesSkipped: UInt64 = 0
    /// Talkspurts started in playout.
    public var talkspurts: UInt64 = 0
    public init() {}
}

/// One stream's lateness distribution, copied out of its buffer to start another
/// stream on the same path with (JitterBuffer.copyLateness(into:), seed(from:)).
/// Preallocated: copying allocates nothing.
public final class LatenessPrior {
    /// Share of frames per histogram bin (1/binsPerTick of a period of `frameMs`).
    fileprivate let shares: UnsafeMutablePointer<Double>
    fileprivate var frameMs = 0.0
    /// Frames the distribution was learned from (0: nothing to seed with).
    public fileprivate(set) var frames = 0

    public init() {
        shares = .allocate(capacity: JitterBuffer.histogramBins)
        shares.initialize(repeating: 0, count: JitterBuffer.histogramBins)
    }

    deinit { shares.deallocate() }
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
        /// The stream is in a DTX pause: the decoder should run its comfort-noise
        /// generator (decode as lost) rather than play digital silence.
        case comfortNoise
        /// Nothing to play: the stream is paused or has not started.
        case silence
    }

    /// What the last next() did to the talkspurt, as heard.
    public enum TalkEdge: Equatable, Sendable {
        case none
        /// The first frame of a talkspurt was played.
        case started
        /// The talkspurt's last frame was played (last-frame or DTX flag), or the
        /// stream starved past `maxStarvedMs`.
        case ended
        /// A talkspurt of one frame: its first frame, played, was also its last (a host
        /// whose first block came alone, a push-to-talk tap). Both edges, in this order.
        case startedAndEnded
    }

    public enum InsertResult: Equatable { case accepted, late, duplicate }

    /// The knobs of the policy (chosen with `bench-jitter --sweep`; docs/benchmarks.md).
    /// Set before the stream starts (quantiles are cached as frames arrive).
    public struct Tuning: Equatable, Sendable {
        /// Share of frames the target cushion is meant to cover; later frames are
        /// waited for up to it (and `waitTicks` beyond), or given up...
        public var quantile = 0.98
        /// ...unless a smaller cushion already leaves so few frames within reach that
        /// waiting longer would not pay: the target stops (from the `startQuantile`
        /// cover up) where the next `rescueWindowTicks` periods would bring less than
        /// `rescueShare` of the frames per period. A delay-spike tail (rare frames spread
        /// far) is then given up rather than waited for: bench-jitter's 1 % spikes 65.7 →
        /// 47.0 ms with late loss 1.93 → 2.30 % (SpeexDSP 61.5 ms, 2.36 %), the TTS feeder
        /// over Wi-Fi 77.9 → 66.9 ms (2.85 → 3.36 %; SpeexDSP 86.0 ms, 4.0 %), Wi-Fi
        /// 104.4 → 81.3 ms (2.80 → 3.23 %; SpeexDSP 125.3 ms, 2.81 %), with
        /// `waitLikelihood` one half. A body of jitter (a clean path, a narrow spread) is
        /// covered as before. 0: off.
        public var rescueShare = 0.0045
        /// The periods ahead `rescueShare` is judged over (bench-jitter with the other
        /// defaults: one met 5 traces, two 7, three 6; with the rule off, 5).
        public var rescueWindowTicks = 2.0
        /// A talkspurt starts with the cushion that covers this share: the cushion
        /// then grows towards the target by waiting for late frames.
        public var startQuantile = 0.9
        /// ...unless covering this share costs at most `cleanStartTicks` more (a clean
        /// path): then talkspurts start with it, so none of them has to realign.
        public var cleanQuantile = 0.998
        /// How much more (in periods) covering `cleanQuantile` may cost than covering
        /// `startQuantile` for a talkspurt to start with it. Half a period: bench-jitter's
        /// TTS feeder on a clean LAN 19.5 ms (1.0: 20.9, 0.25: 15.9) and the
        /// conversations 0.2–1.1 ms less, with the real loopback's talkspurt test as clean
        /// as with 1.0 (0 or 1 frame concealed per run, idle and with a core busy);
        /// 0.25 made that loopback conceal 2–5 frames at talkspurt starts in 2 of 3
        /// runs (late frames spread over more than a quarter period)...
        public var cleanStartTicks = 0.5
        /// ...and for the target to cover it.
        public var cleanTargetTicks = 1.0
        /// A rebased frame (a marker after a pause whose timestamps stood still, a route
        /// change) is taken as one of median lateness; false: as the earliest.
        public var rebaseToMedian = true
        /// Per-frame forgetting of the lateness histogram (0.999: ~1000 frames, 20 s of
        /// 20 ms frames, of memory; equal weights until that many are in).
        public var forgetFactor = 0.999
        /// Excess cushion tolerated before it is shed: the cushion is in excess when it
        /// is at least target + 1 + this (one period less would still cover the target).
        public var hysteresisTicks = 0.0
        /// With losses above `fecLossRate` and packets that can rebuild their
        /// predecessor, the cushion also covers the successor's arrival for this share
        /// of frames (so a lost frame's FEC is here at its playout time).
        public var fecQuantile = 0.8
        public var fecLossRate = 0.007
        /// The stream carries FEC while a packet flagged so came within this many
        /// packets (senders switch FEC with the loss they are told of, and leave it out
        /// of packets after quiet frames).
        public var fecMemoryFrames = 50
        /// Excess must last this many ticks before a buffered frame is dropped for it
        /// (this many divided by n when the buffer holds n whole periods of excess)...
        public var catchUpTicks = 100
        /// ...unless the consumer reports the level of what it plays (reportPlayedLevel):
        /// then a frame it is cheap to drop (after quiet ones, DTX) is waited for
        /// up to this many ticks (10 s of 20 ms frames) when the excess is a single
        /// period, and this many divided by n when it is n whole periods. Speech pauses within seconds; a voiced frame dropped mid-word is a
        /// 20 ms jump a listener hears, a period of delay for a few seconds more is
        /// not. A consumer that reports nothing would only add delay by waiting: it
        /// keeps `catchUpTicks` (bench-jitter's, whose frames carry no audio).
        public var quietCatchUpTicks = 500
        /// n whole periods of excess wait these divided by n, but buffered frames are
        /// dropped for it at least this many ticks apart (200 ms at 20 ms: after a
        /// spike delivers a burst shorter than maxStarvedMs, jumps a listener hears
        /// are not bunched).
        public var minShedGapTicks = 10
        /// A frame that is missing with nothing newer buffered is waited for while the
        /// cushion stays below target + waitTicks.
        public var waitTicks = 1.0
        /// ...and only while at least this share of the frames later than the cushion
        /// came within one period more (with no frame that late yet: one period; 0:
        /// always, up to waitTicks). Three quarters (one half before): bench-jitter's DTX
        /// conversation 18.6 → 16.2 ms with late loss 0.61 → 0.82 % (SpeexDSP 20.8 ms,
        /// 0.86 %), other traces within 1 ms; 0.7 and 0.82 miss that trace.
        public var waitLikelihood = 0.75
        /// A stream seeded with another's lateness (seed(from:)) starts with it as if it
        /// had come from this many of its own frames: enough to start the first
        /// talkspurt with a cushion, little enough that the stream's own path takes
        /// over within a few seconds (half the weight after as many frames).
        public var priorFrames = 64.0
        /// A stream with nothing known (no history, no prior: a session's first
        /// talker) plays its first frame at the next tick, unless it came less than
        /// this share of a period before that tick (tick times known): then the frames
        /// after it, which may come a millisecond later, would miss their ticks (a
        /// concealed period in the first words, a realignment), so it waits one tick.
        public var unknownStartMarginTicks = 0.1
        /// A consumer whose ticks stop for more than this many ms beyond its burst and
        /// a period (a host's sink that blocked, a thread that was not scheduled) has
        /// missed those periods: they are taken as ticks at their times (catchUp). In
        /// ms, not periods: a renderer's lateness is the same whatever the frame length.
        public var stallMs = 100.0
        /// Whether a talkspurt starts with its stream's usual end lateness covered
        /// (`endCoverTicks`).
        public var coversEnds = true
        /// A stream's talkspurt ends are late as a rule when the median of the last
        /// `endWindow` ends' lateness over the median lateness is more than this (ms):
        /// then a talkspurt starts with them covered. Below it they are on time, moved
        /// by the path's jitter.
        public var endLateGateMs = 2.0
        /// What the end cover keeps beyond the upper quartile of the ends seen (ms):
        /// the sender's timer fires a little later some times than others.
        public var endMarginMs = 2.0
        public init() {}
    }

    public static let maxTargetMs = 500.0
    // Flag sets, built once (an array literal would allocate in unoptimised builds).
    /// Frames whose timing says nothing about the network.
    private static let notJitter: FrameFlags = [.marker, .lastFrame, .dtx]
    /// Frames after which the talker pauses.
    private static let pauseFollows: FrameFlags = [.lastFrame, .dtx]
    /// Frames of lateness history the baseline (minimum) is taken over.
    public static let historyFrames = 128
    /// Histogram bins, 1/binsPerTick of a tick each (64 ticks in all); later frames
    /// land in the last.
    public static let histogramBins = 1024
    /// Resolution of the lateness histogram: 1/16 of a frame period (1.25 ms at 20 ms).
    public static let binsPerTick = 16

    public let capacity: Int
    public let maxPayload: Int
    public private(set) var frameSamples: Int
    public private(set) var stats = JitterStats()
    public var tuning = Tuning()
    /// Starved this long in a talkspurt, the talker is taken to have stopped.
    public var maxStarvedMs = 200.0
    /// The stream's packets can rebuild their predecessor even without the FEC flag
    /// (DRED): set by the receive path. In-band FEC is known from each packet's flag.
    public var recoveryAvailable = false
    /// What the last next() did to the talkspurt.
    public private(set) var talkEdge = TalkEdge.none
    /// A talkspurt is being played.
    public private(set) var talking = false
    /// How much earlier (in ticks) the frame the last next() played could have been
    /// played and still have had its cushion: its cushion less the most of the target,
    /// what covers 99.8 % of frames (`cleanQuantile`) with half its distance from the
    /// median again (a tail known from few frames), and the lateness of a typical
    /// talkspurt's last frame (a typical frame's, plus how much later the last frames
    /// of talkspurts came). NaN when that next() played no received frame (a
    /// concealed, rebuilt, comfort-noise or silent period, a DTX frame, or nothing known
    /// yet). A renderer free to pick its phase moves its ticks earlier by what every
    /// stream can spare (moveClock).
    public private(set) var playedSlackTicks = Double.nan
    /// The same against the lateness of a typical talkspurt's last frame alone:
    /// negative when that frame would miss its tick, and the period before it be
    /// concealed. NaN when playedSlackTicks is.
    public private(set) var playedEndSlackTicks = Double.nan
    /// How much later than a typical frame (the median lateness) a talkspurt's last
    /// frame comes, in ticks: a sender sends it once its queue has been dry for a frame
    /// plus a slack (this library's senders: 5 ms and up). Assumed `endLateDefaultMs`
    /// until one is seen, then the latest seen (at most a period), decaying by a tenth
    /// at each last frame (a stream whose talkspurts end in DTX keeps the default). Not
    /// part of the target (the buffer does not wait for it at every frame); the slack
    /// reported to a renderer keeps it covered. (What a start's cushion covers of the
    /// ends is the robust `endCoverTicks` below, not this peak.)
    private var endLateTicks = 0.0
    /// The last `endWindow` talkspurt ends' lateness over the median (ticks, each at
    /// most a period or `endCoverCapMs`), a ring, and `endCoverTicks` from them (`noteEnd`): how much later
    /// than a typical frame this stream's ends come as a rule (a fed stream's sender
    /// waits a slack before it sends one), judged by their median, which a path's
    /// jitter (moving single ends either way) does not move. A talkspurt starts with
    /// at least the median lateness and that cover (`startTicks`; not shed as excess),
    /// so its end is not concealed where the clock cannot move later for it (a card,
    /// a host's pulls). Zero for a stream whose ends come on time.
    private let endExcess: UnsafeMutablePointer<Double>
    private var endExcessCount = 0, endExcessNext = 0
    private var endCoverTicks = 0.0
    public static let endWindow = 8
    /// The most an end's lateness over the median counts for: a period, and at least
    /// this (ms): a steady host's dry slack (5 ms) and its timer at any frame length.
    /// A jittery host's longer slack (up to 40 ms) is not covered: that would delay
    /// every talkspurt by more than a frame to save its last frame from concealment.
    public static let endCoverCapMs = 20.0
    /// 5 ms of least dry slack, and 1.5 ms for the sender's timer to fire late.
    public static let endLateDefaultMs = 6.5

    // Slot pool.
    private let payloads: UnsafeMutablePointer<UInt8>
    private let lengths: UnsafeMutablePointer<Int>
    private let timestamps: UnsafeMutablePointer<Int64>
    private let seqs: UnsafeMutablePointer<UInt64>
    private let flagSets: UnsafeMutablePointer<FrameFlags>
    /// When each frame arrived (insert's arrivalMs).
    private let arrivals: UnsafeMutablePointer<Double>
    private let used: UnsafeMutablePointer<Bool>
    public private(set) var count = 0
    /// No slot at or past this index is used: the scans stop here (a new frame takes
    /// the lowest free slot, so the used ones stay near the start).
    private var usedEnd = 0

    // Sequence and timestamp tracking.
    private var haveTimestamp = false
    private var lastExtTS: Int64 = 0
    private var maxSeq: UInt64 = 0
    private var haveSeq = false

    // Lateness statistics, in ticks.
    private var ticks: Int64 = 0                      // next() calls so far
    /// When the most recent ticks happened (ring by tick index), when the consumer
    /// says (next(atMs:)); lets a frame handed over late (a batch) count from when it
    /// arrived.
    private static let tickTimeCapacity = 32
    private let tickTimes: UnsafeMutablePointer<Double>
    private var tickTimesKnown = 0
    private var ticksAtLastTime = 0                   // ticks of the consumer's current burst (within a quarter period)
    private var lastBurstTicks = 0                    // ...and of its burst before
    private let history: UnsafeMutablePointer<Double> // lateness of recent frames (ring)
    private var historyCount = 0
    private var historyNext = 0
    private var baseline = 0.0                        // min lateness over the ring
    private var shift = 0.0                           // timeline rebase, in ticks
    /// How far the consumer's ticks moved earlier (moveClock), in ticks: in force from
    /// the tick it was applied at (gridAtTick: the value at each recent tick), and a
    /// move told but not yet applied (at the next tick).
    private var grid = 0.0
    private var pendingGrid = 0.0
    private let gridAtTick: UnsafeMutablePointer<Double>
    private let bins: UnsafeMutablePointer<Double>
    private var binTotal = 0.0
    private var binWeight = 1.0                       // grows by 1/forget per entry (no per-frame decay loop)
    private var entries = 0
    private var startQuantileTicks = 0.0              // cached from the histogram: talkspurt start,
    private var quantileTicks = 0.0                   // target,
    private var fecQuantileTicks = 0.0                // the successor's arrival,
    private var medianTicks = 0.0                     // a typical frame
    private var coverTicks = 0.0                      // what covers cleanQuantile of frames
    private var fineLateness = false                  // arrivals placed within the period (tick times known)
    private var lossAverage = 0.0                     // frames lost per frame received (EWMA)
    private var fecCushion = false                    // losses seen that FEC can rebuild
    private var packetsSinceFEC = Int.max             // inserted since the last one flagged FEC
    private var minTicks = 0.0, maxTicks = 25.0       // bounds (setBounds), in ticks
    /// A talkspurt's first frame held for a lower bound with no history yet (advance):
    /// ticks it was held at, and the time of the first of them (NaN: none, or no times).
    private var heldStartTicks = 0
    private var heldStartMs = Double.nan
    /// The histogram holds a prior (seed(from:)) and no frame of this stream has set
    /// the baseline yet.
    private var seeded = false

    // Playout clock.
    private var playing = false
    private var nextTS: Int64 = 0                     // the next frame to play (also after a pause: older is late)
    private var havePlayed = false
    /// The seq of the last frame played (valid while `havePlayed`).
    private var lastPlayedSeq: UInt64 = 0
    private var newestTS: Int64 = 0
    private var starvedTicks = 0
    /// The talkspurt that played last was ended by starving (no last frame came): the
    /// stream stalled or its talker stopped unannounced; the next start may be its backlog.
    private var endedStarved = false
    /// The first frame the current (or last) starving did not play: what nextTS was
    /// at its first starved tick. After a talkspurt ended by starving, frames from
    /// here on are the stream's continuation, not late (see insert).
    private var starvedFromTS: Int64 = 0
    /// While starving, the talkspurt's last frame came after its tick had passed: the
    /// talker has stopped, so the next starved tick ends the talkspurt (silence) rather
    /// than concealing on until `maxStarvedMs`.
    private var lateEndArrived = false
    /// The next frame to arrive is the first since a talkspurt ended by starving: its
    /// timing is taken as a marker's (observe).
    private var resumeRebase = false
    /// Ticks left in which a gap of missing frames after a talkspurt resumed on a
    /// stall's frames is skipped at once (advance).
    private var resumedTicksLeft = 0
    private var excessTicks = 0
    private var packetBytesAverage = 0.0
    private var lastPlayedQuiet = false
    /// The consumer reports levels (reportPlayedLevel was called since the reset).
    private var levelsReported = false

    public init(capacity: Int = 64, maxPayload: Int = 1500, frameSamples: Int = 960) {
        self.capacity = capacity
        self.maxPayload = maxPayload
        self.frameSamples = frameSamples
        payloads = .allocate(capacity: capacity * maxPayload)
        lengths = .allocate(capacity: capacity); lengths.initialize(repeating: 0, count: capacity)
        timestamps = .allocate(capacity: capacity); timestamps.initialize(repeating: 0, count: capacity)
        seqs = .allocate(capacity: capacity); seqs.initialize(repeating: 0, count: capacity)
        flagSets = .allocate(capacity: capacity); flagSets.initialize(repeating: [], count: capacity)
        arrivals = .allocate(capacity: capacity); arrivals.initialize(repeating: 0, count: capacity)
        used = .allocate(capacity: capacity); used.initialize(repeating: false, count: capacity)
        tickTimes = .allocate(capacity: JitterBuffer.tickTimeCapacity)
        tickTimes.initialize(repeating: 0, count: JitterBuffer.tickTimeCapacity)
        gridAtTick = .allocate(capacity: JitterBuffer.tickTimeCapacity)
        gridAtTick.initialize(repeating: 0, count: JitterBuffer.tickTimeCapacity)
        history = .allocate(capacity: JitterBuffer.historyFrames)
        history.initialize(repeating: 0, count: JitterBuffer.historyFrames)
        endExcess = .allocate(capacity: JitterBuffer.endWindow)
        endExcess.initialize(repeating: 0, count: JitterBuffer.endWindow)
        bins = .allocate(capacity: JitterBuffer.histogramBins)
        bins.initialize(repeating: 0, count: JitterBuffer.histogramBins)
        reset(frameSamples: frameSamples)
    }

    deinit {
        payloads.deallocate(); lengths.deallocate(); timestamps.deallocate()
        seqs.deallocate(); flagSets.deallocate(); arrivals.deallocate(); used.deallocate()
        history.deallocate(); endExcess.deallocate(); bins.deallocate(); tickTimes.deallocate(); gridAtTick.deallocate()
    }

    /// Forgets everything (a new stream in this slot). Bounds and tuning are kept.
    public func reset(frameSamples: Int) {
        self.frameSamples = frameSamples
        for i in 0..<capacity { used[i] = false }
        count = 0
        usedEnd = 0
        stats = JitterStats()
        haveTimestamp = false; haveSeq = false
        ticks = 0
        tickTimesKnown = 0
        historyCount = 0; historyNext = 0; baseline = 0; shift = 0; grid = 0; pendingGrid = 0
        for i in 0..<JitterBuffer.histogramBins { bins[i] = 0 }
        binTotal = 0; binWeight = 1; entries = 0; quantileTicks = 0; fecQuantileTicks = 0; startQuantileTicks = 0; medianTicks = 0; coverTicks = 0
        fineLateness = false
        lossAverage = 0; fecCushion = false; packetsSinceFEC = .max
        playing = false; havePlayed = false; talking = false; talkEdge = .none; comfortNoiseTicks = 0
        playedSlackTicks = .nan
        playedEndSlackTicks = .nan
        endLateTicks = JitterBuffer.endLateDefaultMs / (Double(frameSamples) / 48)
        endExcessCount = 0; endExcessNext = 0; endCoverTicks = 0
        starvedTicks = 0; lateEndArrived = false; excessTicks = 0; heldStartTicks = 0; heldStartMs = .nan; endedStarved = false; resumeRebase = false; resumedTicksLeft = 0
        packetBytesAverage = 0; lastPlayedQuiet = false; levelsReported = false
        recoveryAvailable = false
        seeded = false
        lastObservedMs = -.infinity
        lastArrivalMs = -.infinity
        consumerTickMs = -.infinity
        applyBounds()
    }

    // MARK: Lateness shared between streams

    /// Frames whose lateness this buffer has learned from (its own, since reset).
    public var framesObserved: Int { entries }
    /// When the last of them arrived (insert's arrivalMs; -infinity: none yet).
    public private(set) var lastObservedMs = -Double.infinity
    /// When the last frame of any kind arrived (a talkspurt's marker too).
    private var lastArrivalMs = -Double.infinity
    /// The consumer's last tick (next(atMs:)), not the ones catchUp stood in for.
    private var consumerTickMs = -Double.infinity

    /// Nothing has entered since reset, nor a prior: seed(from:) would take.
    public var awaitsPrior: Bool { !seeded && !haveSeq }

    /// Copies what this buffer knows of its path's lateness (the histogram, as shares)
    /// into `prior`, for a new stream on the same path (seed(from:)). Nothing is copied
    /// before a frame was observed.
    public func copyLateness(into prior: LatenessPrior) {
        prior.frameMs = frameMs
        prior.frames = entries
        guard entries > 0 else { return }
        for k in 0..<JitterBuffer.histogramBins { prior.shares[k] = bins[k] / binTotal }
    }

    /// Starts a fresh stream (right after reset, before its first frame) with another
    /// stream's lateness distribution, worth `tuning.priorFrames` of its own frames.
    /// Without it a new stream knows nothing: it plays its first frame at once, and
    /// the first frame of that talkspurt that comes later than the first did (on any
    /// path but a perfectly clean one) is concealed and shifts the stream's alignment.
    /// Seeded, it starts like any later talkspurt: the first frame waits for the start
    /// cushion the path has needed (on a clean path at most half a period more than the
    /// 90 % cover). Its own frames then take over as they come (the prior weighs half
    /// after `priorFrames` frames). Lateness is in periods: a prior from a stream of
    /// another frame length is rescaled. A prior of no frames changes nothing.
    public func seed(from prior: LatenessPrior) {
        guard prior.frames > 0 && prior.frameMs > 0 && awaitsPrior else { return }
        let scale = prior.frameMs / frameMs
        let last = JitterBuffer.histogramBins - 1
        for k in 0...last { bins[k] = 0 }
        let weight = max(1, tuning.priorFrames)
        for k in 0...last where prior.shares[k] > 0 {
            bins[min(last, Int((Double(k) * scale).rounded(.up)))] += prior.shares[k] * weight
        }
        binTotal = weight
        binWeight = 1
        seeded = true
        updateQuantiles()
    }

    private var frameMs: Double { Double(frameSamples) / 48 }

    // MARK: Bounds and target

    private var boundMinMs = 0.0
    private var boundMaxMs = JitterBuffer.maxTargetMs

    /// Clamps the target cushion to [minMs, maxMs] (beyond one frame period; each
    /// bound itself clamped to 0...maxTargetMs, and max to at least min). A stream
    /// that must never lag more than maxMs, or always keeps minMs in hand.
    public func setBounds(minMs: Double, maxMs: Double) {
        let lo = min(max(0, minMs.isNaN ? 0 : minMs), JitterBuffer.maxTargetMs)
        let hi = min(max(lo, maxMs.isNaN ? JitterBuffer.maxTargetMs : maxMs), JitterBuffer.maxTargetMs)
        boundMinMs = lo; boundMaxMs = hi
        applyBounds()
    }

    public var bounds: (minMs: Double, maxMs: Double) { (boundMinMs, boundMaxMs) }

    /// Audio the consumer takes at one instant, when more than one period (ms): a
    /// host that pulls 100 ms at a time needs every frame of those 100 ms when it
    /// pulls, so from the first talkspurt on (the histogram would learn it only from
    /// underruns) the cushion beyond the frame in play is at least the burst's frames:
    /// the last of them is needed up to the burst less a period before its tick would
    /// be on an even clock, and arrivals fall anywhere between two pulls (one more).
    /// Within what the buffer holds (the pool less two periods of room for arrivals:
    /// 60 frames, 1.2 s of 20 ms ones; not the target's 500 ms bound, which left pulls
    /// of 600 ms short by 100 ms). 0:
    /// the consumer takes a period (or less) at a time. Kept across reset, as the bounds.
    public func setConsumerBurst(ms: Double) {
        burstMs = ms.isFinite ? min(max(0, ms), (poolTicks - 2) * frameMs) : 0
        applyBounds()
    }

    public private(set) var burstMs = 0.0

    /// The most cushion the buffer can hold beyond the frame in play (and one arriving).
    private var poolTicks: Double { Double(capacity - 2) }

    private func applyBounds() {
        let burstTicks = burstMs > 0 ? (burstMs / frameMs).rounded(.up) : 0
        minTicks = min(max((boundMinMs / frameMs).rounded(.up), burstTicks), poolTicks)
        maxTicks = max(minTicks, min((boundMaxMs / frameMs).rounded(.down), poolTicks))
    }

    /// Target cushion in ticks (frame periods beyond the frame in play).
    private var targetTicks: Double { bounded(quantileTicks) }
    /// The cushion a talkspurt starts with: its ends' usual lateness covered too
    /// (`endCoverTicks`: not part of the target, which the other frames need).
    private var startTicks: Double { bounded(max(startQuantileTicks, medianTicks + endCoverTicks)) }

    /// Notes a talkspurt end's lateness over the median (counted up to a period or
    /// `endCoverCapMs`, whichever is more). The stream's ends are late as a rule when
    /// the lower median of the last `endWindow` is more than `Tuning.endLateGateMs`
    /// (the path's jitter moves single ends either way, not their median);
    /// `endCoverTicks` is then the upper quartile of them (the first end seen, then
    /// the larger of two...) and `Tuning.endMarginMs`, else nothing.
    private func noteEnd(excess: Double) {
        endExcess[endExcessNext] = min(max(1, JitterBuffer.endCoverCapMs / frameMs), excess)
        endExcessNext = (endExcessNext + 1) % JitterBuffer.endWindow
        endExcessCount = min(endExcessCount + 1, JitterBuffer.endWindow)
        let n = endExcessCount
        endCoverTicks = tuning.coversEnds && rankedEnd((n - 1) / 2) > tuning.endLateGateMs / frameMs
            ? rankedEnd((3 * (n - 1) + 3) / 4) + tuning.endMarginMs / frameMs : 0
    }

    /// The end lateness of rank `rank` (0: the least) among those noted, by counting (at
    /// most `endWindow` values: no sort, no allocation).
    private func rankedEnd(_ rank: Int) -> Double {
        for i in 0..<endExcessCount {
            var below = 0, equal = 0
            for j in 0..<endExcessCount {
                if endExcess[j] < endExcess[i] { below += 1 } else if endExcess[j] == endExcess[i] { equal += 1 }
            }
            if below <= rank && rank < below + equal { return endExcess[i] }
        }
        return 0
    }

    /// A cushion from the histogram, raised for FEC on a lossy stream and bounded.
    private func bounded(_ q: Double) -> Double {
        var t = q
        if fecCushion { t = max(t, 1 + fecQuantileTicks) }
        return min(max(t, minTicks), maxTicks)
    }

    /// The adaptive target depth in ms: the frame in play plus the cushion.
    public var targetMs: Double { (targetTicks + 1) * frameMs }

    /// Buffered audio ahead of the playout clock, in ms.
    public var depthMs: Double {
        guard count > 0 else { return 0 }
        let from = playing ? nextTS : oldestTS()
        return Double(max(0, newestTS + Int64(frameSamples) - from)) / 48
    }

    public func payload(_ slot: Int) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: payloads + slot * maxPayload, count: lengths[slot])
    }

    /// The seq of the frame in `slot`.
    public func seq(_ slot: Int) -> UInt64 { seqs[slot] }

    public func release(_ slot: Int) {
        if used[slot] { used[slot] = false; count -= 1 }
        while usedEnd > 0 && !used[usedEnd - 1] { usedEnd -= 1 }
    }

    /// Periods of comfort noise left in a DTX pause.
    private var comfortNoiseTicks = 0

    /// The renderer's verdict on what it just played: quiet (a pause in the speech)
    /// or not. A quiet frame makes the next catch-up drop inaudible enough to take at
    /// once, and a consumer that reports levels lets a one-period excess wait for such
    /// a moment (`quietCatchUpTicks`). Optional: without it packet sizes and DTX flags
    /// are used.
    public func reportPlayedLevel(quiet: Bool) { lastPlayedQuiet = quiet; levelsReported = true }

    // MARK: Insert

    private func unwrap(_ ts: UInt32) -> Int64 {
        guard haveTimestamp else { haveTimestamp = true; lastExtTS = Int64(ts); return lastExtTS }
        let delta = Int64(Int32(bitPattern: ts &- UInt32(truncatingIfNeeded: lastExtTS)))
        let ext = lastExtTS + delta
        if delta > 0 { lastExtTS = ext }
        return ext
    }

    /// Stores one received frame that arrived at `arrivalMs` (the clock the consumer
    /// gives next(atMs:); lateness is measured in ticks, from the first tick after
    /// the arrival, so a frame handed over late in a batch counts from its arrival).
    @discardableResult
    public func insert(seq: UInt64, timestamp: UInt32, flags: FrameFlags, payload: UnsafeRawBufferPointer, arrivalMs: Double) -> InsertResult {
        for i in 0..<usedEnd where used[i] && seqs[i] == seq {
            stats.duplicates += 1
            return .duplicate
        }
        let ext = unwrap(timestamp)
        stats.packetsReceived += 1
        // Loss accounting by seq: gaps count as lost until (if ever) filled.
        var gap = 0.0
        if !haveSeq {
            haveSeq = true; maxSeq = seq
        } else if seq > maxSeq {
            stats.packetsLost += seq - maxSeq - 1
            gap = Double(min(seq - maxSeq - 1, 64))
            maxSeq = seq
        } else if stats.packetsLost > 0 {
            stats.packetsLost -= 1
            gap = -1
        }
        lossAverage = max(0, lossAverage + (gap - lossAverage) / 256)
        // The FEC cushion: on above fecLossRate, off below 40 % of it (hysteresis, so
        // bursty loss does not switch it at every burst).
        if flags.contains(.fec) { packetsSinceFEC = 0 } else if packetsSinceFEC < .max { packetsSinceFEC += 1 }
        let canRebuild = packetsSinceFEC < tuning.fecMemoryFrames || recoveryAvailable
        if !canRebuild || lossAverage < 0.4 * tuning.fecLossRate { fecCushion = false }
        else if lossAverage > tuning.fecLossRate { fecCushion = true }
        observe(ext: ext, flags: flags, arrivalMs: arrivalMs)
        // Older than the clock is late, except, after a talkspurt ended by starving,
        // the frames the starving concealed and passed (a path that got slower or
        // stalled for longer than maxStarvedMs): they never played, and the next
        // talkspurt starts on the oldest of them, so the listener misses nothing of
        // what the path delayed (at no more delay than the frames after them bring:
        // a backlog that came at once is skipped to a start's cushion in advance()).
        if havePlayed && ext < nextTS && !(endedStarved && ext >= starvedFromTS) {
            stats.late += 1
            if playing && starvedTicks > 0 && ext >= starvedFromTS && flags.contains(.lastFrame) && !flags.contains(.marker) {
                lateEndArrived = true
            }
            return .late
        }
        var slot = -1
        for i in 0..<usedEnd where !used[i] { slot = i; break }
        if slot < 0 && usedEnd < capacity { slot = usedEnd }
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
        flagSets[slot] = flags
        arrivals[slot] = arrivalMs
        used[slot] = true
        usedEnd = max(usedEnd, slot + 1)
        count += 1
        if count == 1 || ext > newestTS { newestTS = ext }
        if !flags.contains(.dtx) { packetBytesAverage += (Double(n) - packetBytesAverage) / 32 }
        return .accepted
    }

    /// Lateness of a frame at `ts` at tick position `position` (the tick in play by
    /// default) of a grid moved by `grid` ticks (the grid in force by default), on the
    /// (rebased) timeline.
    private func lateness(_ ext: Int64, at position: Double? = nil, grid g: Double? = nil) -> Double {
        (position ?? Double(ticks)) - Double(ext) / Double(frameSamples) - shift - (g ?? grid)
    }

    /// Where on the tick clock a frame that arrived at `arrivalMs` came, and the move of
    /// the grid that position is on: the first tick at which it could be played is the
    /// next one up. Without tick times (next() without a time) that is the next tick, a
    /// whole number (on the grid of that tick). With them, an earlier tick when the frame
    /// arrived before it (it was handed over in a later batch), and the fraction of the
    /// period since the tick before, on that tick's grid (a move later lengthens the
    /// period after it by the move): so the lateness statistics see where in the period
    /// frames arrive, not only which tick they make, and a cushion can be placed where
    /// the consumer's ticks fall.
    private func arrivalPosition(_ arrivalMs: Double) -> (position: Double, grid: Double) {
        let cap = Int64(JitterBuffer.tickTimeCapacity)
        var j = ticks
        var known = min(tickTimesKnown, JitterBuffer.tickTimeCapacity)
        while known > 0 && j > 0 && tickTimes[Int((j - 1) % cap)] >= arrivalMs {
            j -= 1
            known -= 1
        }
        guard known > 0 && j > 0 else {
            fineLateness = false
            // Tick j's grid where it is still known, else the one the next tick takes.
            let recorded = j < ticks && ticks - j <= Int64(min(tickTimesKnown, JitterBuffer.tickTimeCapacity))
            return (Double(j), recorded ? gridAtTick[Int(j % cap)] : grid + pendingGrid)
        }
        fineLateness = true
        let before = gridAtTick[Int((j - 1) % cap)]
        let after = j < ticks ? gridAtTick[Int(j % cap)] : grid + pendingGrid
        let since = (arrivalMs - tickTimes[Int((j - 1) % cap)]) / frameMs
        return (Double(j - 1) + min(1 + max(0, before - after), max(0, since)), before)
    }

    /// Feeds one arrival to the lateness statistics.
    private func observe(ext: Int64, flags: FrameFlags, arrivalMs: Double) {
        // Arrived before every tick time kept (handed over after a stall of more than
        // tickTimeCapacity periods): where it came on the clock is not known, and a
        // guess would put seconds of lateness into the statistics. It is not observed.
        if tickTimesKnown >= JitterBuffer.tickTimeCapacity && ticks >= Int64(JitterBuffer.tickTimeCapacity)
            && arrivalMs < tickTimes[Int(ticks % Int64(JitterBuffer.tickTimeCapacity))] { return }
        lastArrivalMs = arrivalMs
        let at = arrivalPosition(arrivalMs)
        var l = lateness(ext, at: at.position, grid: at.grid)
        if historyCount > 0 {
            let r = l - baseline
            // (A straggler the starving had already passed, which is dropped as late,
            // neither takes the rebase nor uses it up.)
            let resumes = resumeRebase && ext >= starvedFromTS
            if resumes { resumeRebase = false }
            // A jump past the maximum target is a new timeline, not jitter; so is a
            // talkspurt's first frame later than the target (a sender whose timestamps
            // stood still over the pause): take it as a frame of typical lateness (the
            // median), not as the fast edge, so the frames after it are not taken to be
            // later than they are.
            // So is the first frame after a talkspurt ended by starving (a path that got
            // slower, or stalled, for longer than maxStarvedMs): the old baseline no
            // longer says how much cushion it and the frames after it have.
            let starts = flags.contains(.marker) || resumes
            if abs(r) > JitterBuffer.maxTargetMs / frameMs || (starts && (r > targetTicks + 0.5 || r < -0.5)) {
                let to = tuning.rebaseToMedian ? medianTicks : 0
                shift += r - to
                l -= r - to
            }
        }
        if flags.contains(.lastFrame) && !flags.contains(.marker) && historyCount > 0 {
            // At most a period: one frame delayed by a spike must not hold the phase for long.
            endLateTicks = min(1, max(l - baseline - medianTicks, endLateTicks * 0.9))
            noteEnd(excess: l - baseline - medianTicks)
        }
        guard flags.isDisjoint(with: JitterBuffer.notJitter) else {
            // A seeded stream's first frame (a talkspurt's marker, as a rule) sets the
            // baseline the prior's cushion is counted from: it is the only timing known.
            // It does not enter the histogram (its own lateness says nothing yet).
            if seeded && historyCount == 0 {
                history[historyNext] = l
                historyNext = (historyNext + 1) % JitterBuffer.historyFrames
                historyCount = 1
                baseline = l
                updateQuantiles()
            }
            return
        }
        // The ring's minimum, kept as it moves: rescanned only when the entry that
        // leaves was the minimum and the one that comes is not below it.
        let leaving = historyCount == JitterBuffer.historyFrames ? history[historyNext] : Double.infinity
        history[historyNext] = l
        historyNext = (historyNext + 1) % JitterBuffer.historyFrames
        historyCount = min(historyCount + 1, JitterBuffer.historyFrames)
        if historyCount == 1 || l <= baseline {
            baseline = l
        } else if leaving == baseline {
            var m = Double.infinity
            for i in 0..<historyCount { m = min(m, history[i]) }
            baseline = m
        }
        lastObservedMs = arrivalMs
        addToHistogram(l - baseline)
    }

    private func addToHistogram(_ r: Double) {
        // Up to the bin's edge, less a hair: a lateness equal to the baseline's but for
        // rounding in the arithmetic stays in bin 0.
        let bin = min(JitterBuffer.histogramBins - 1, max(0, Int((r * Double(JitterBuffer.binsPerTick) - 1e-6).rounded(.up))))
        // Equal weights until the memory is full, then exponential forgetting: the
        // newest entry weighs 1/forget times the previous one.
        entries += 1
        if Double(entries) * (1 - tuning.forgetFactor) > 1 { binWeight /= tuning.forgetFactor }
        bins[bin] += binWeight
        binTotal += binWeight
        if binWeight > 1e100 {
            for i in 0..<JitterBuffer.histogramBins { bins[i] /= binWeight }
            binTotal /= binWeight
            binWeight = 1
        }
        updateQuantiles()
    }

    /// Caches the quantiles the policy reads from the histogram.
    private func updateQuantiles() {
        var qs = (tuning.startQuantile, tuning.cleanQuantile, tuning.quantile, tuning.fecQuantile, 0.5)
        quantiles(&qs)
        let low = qs.0, high = qs.1
        // Known to a whole tick only, a cover one tick up may cost no more than a
        // millisecond: take it as before. Known finer, take it only where it is cheap.
        startQuantileTicks = high - low <= (fineLateness ? tuning.cleanStartTicks : tuning.cleanTargetTicks) ? high : low
        quantileTicks = max(rescueCover(from: low, upTo: qs.2), high - low <= tuning.cleanTargetTicks ? high : low, startQuantileTicks)
        fecQuantileTicks = qs.3
        medianTicks = qs.4
        coverTicks = high
    }

    /// The target's cover (ticks, in steps of a bin): the smallest from `from` up to
    /// `limit` past which the next rescueWindowTicks periods hold less than
    /// rescueShare of the frames per period; `limit` if none is.
    private func rescueCover(from: Double, upTo limit: Double) -> Double {
        guard tuning.rescueShare > 0, tuning.rescueWindowTicks > 0, tuning.rescueWindowTicks < 64, limit > from else { return limit }
        let per = Double(JitterBuffer.binsPerTick), last = JitterBuffer.histogramBins - 1
        let width = max(1, Int((tuning.rescueWindowTicks * per).rounded()))
        let start = min(last, max(0, Int((from * per).rounded(.down))))
        let stop = min(last - width, Int((limit * per).rounded(.down)))
        guard start < stop else { return limit }
        let enough = tuning.rescueShare * tuning.rescueWindowTicks * binTotal
        // The mass of bins k+1 ... k+width, slid up a bin at a time.
        var window = 0.0
        for b in (start + 1)...(start + width) { window += bins[b] }
        for k in start..<stop {
            if window < enough { return Double(k) / per }
            window += bins[k + width + 1] - bins[k + 1]
        }
        return limit
    }

    /// Replaces each share q with the smallest lateness (ticks, in steps of a bin)
    /// that covers share q of the histogram; one pass over the bins for all five.
    private func quantiles(_ q: inout (Double, Double, Double, Double, Double)) {
        let want = (binTotal * q.0, binTotal * q.1, binTotal * q.2, binTotal * q.3, binTotal * q.4)
        var done = (false, false, false, false, false)
        var cumulative = 0.0
        let last = JitterBuffer.histogramBins - 1
        // The smallest share not yet placed: most bins only add and compare with it.
        // (Two-argument mins: the variadic one allocates its arguments in debug builds.)
        func smallest(_ a: Double, _ b: Double, _ c: Double, _ d: Double, _ e: Double) -> Double { min(min(min(a, b), min(c, d)), e) }
        var next = smallest(want.0, want.1, want.2, want.3, want.4)
        for k in 0...last {
            cumulative += bins[k]
            guard cumulative >= next || k == last else { continue }
            let at = Double(k) / Double(JitterBuffer.binsPerTick)
            if !done.0 && (cumulative >= want.0 || k == last) { q.0 = at; done.0 = true }
            if !done.1 && (cumulative >= want.1 || k == last) { q.1 = at; done.1 = true }
            if !done.2 && (cumulative >= want.2 || k == last) { q.2 = at; done.2 = true }
            if !done.3 && (cumulative >= want.3 || k == last) { q.3 = at; done.3 = true }
            if !done.4 && (cumulative >= want.4 || k == last) { q.4 = at; done.4 = true }
            if done.0 && done.1 && done.2 && done.3 && done.4 { break }
            next = smallest(done.0 ? .infinity : want.0, done.1 ? .infinity : want.1, done.2 ? .infinity : want.2,
                            done.3 ? .infinity : want.3, done.4 ? .infinity : want.4)
        }
    }

    // MARK: Playout

    private func slot(at ts: Int64) -> Int? {
        for i in 0..<usedEnd where used[i] && timestamps[i] == ts { return i }
        return nil
    }

    private func oldestSlot() -> Int? {
        var best = -1
        var bestTS = Int64.max
        for i in 0..<usedEnd where used[i] && timestamps[i] < bestTS { best = i; bestTS = timestamps[i] }
        return best < 0 ? nil : best
    }

    private func oldestTS() -> Int64 {
        var best = Int64.max
        for i in 0..<usedEnd where used[i] && timestamps[i] < best { best = timestamps[i] }
        return best
    }

    /// Ticks of cushion the frame at `ts` has if it is played now (0 before any
    /// lateness is known).
    private func cushion(_ ts: Int64) -> Double {
        guard historyCount > 0 else { return 0 }
        return lateness(ts) - baseline
    }

    /// Decides the next frame period, at `nowMs` (the clock insert's arrivalMs uses).
    public func next(atMs nowMs: Double) -> Playout {
        let cap = Int64(JitterBuffer.tickTimeCapacity)
        catchUp(toMs: nowMs)
        // Ticks within a quarter period of the one before are one burst (a pull of
        // several periods renders them one after another).
        let burst = tickTimesKnown > 0 && ticks > 0 && nowMs - tickTimes[Int((ticks - 1) % cap)] < frameMs / 4
        if !burst { lastBurstTicks = ticksAtLastTime }
        ticksAtLastTime = burst ? ticksAtLastTime + 1 : 1
        grid += pendingGrid
        pendingGrid = 0
        tickTimes[Int(ticks % Int64(JitterBuffer.tickTimeCapacity))] = nowMs
        gridAtTick[Int(ticks % Int64(JitterBuffer.tickTimeCapacity))] = grid
        tickTimesKnown += 1
        if !playing { shedStaleStart(nowMs: nowMs, lastTickMs: consumerTickMs) }
        consumerTickMs = nowMs
        return advance()
    }

    /// A reader of statistics at `nowMs` (the clock insert's arrivalMs uses) while no
    /// talkspurt plays: what the next tick would drop as stale (shedStaleStart) is
    /// dropped now, so the depth read does not count audio that will never play.
    public func shedStale(atMs nowMs: Double) {
        if !playing { shedStaleStart(nowMs: nowMs, lastTickMs: consumerTickMs) }
    }

    /// No talkspurt plays, and the consumer did not tick for a long while after the
    /// oldest frame here came (`lastTickMs`: its own tick before this one, not one
    /// catchUp stood in for when the frames were handed over): a host that
    /// has not pulled yet, a device suspended, the output switched off, a consumer
    /// that stalled. What was due meanwhile is gone, not a talkspurt to play now,
    /// seconds late (with its TALK_START and TALK_STOP a second time). When that
    /// silence of the ticks passes a talkspurt start's longest wait (its cushion, the
    /// lower bound or the consumer's burst, and a period) by `stallMs`, the frames
    /// that came longer ago than that wait are dropped as late; a talkspurt still
    /// coming starts on the rest, with its usual cushion. (A frame a ticking consumer
    /// holds, early on the lateness timeline, can wait longer: it is not dropped.)
    /// While a talkspurt plays, the tick times catch a stalled consumer up (catchUp).
    private func shedStaleStart(nowMs: Double, lastTickMs: Double) {
        guard count > 0 else { return }
        let waitMs = (max(startTicks, minTicks, burstMs / frameMs) + 1) * frameMs
        var oldest = Double.infinity
        for i in 0..<usedEnd where used[i] { oldest = min(oldest, arrivals[i]) }
        guard nowMs - max(oldest, lastTickMs) > waitMs + tuning.stallMs else { return }
        for i in 0..<usedEnd where used[i] && nowMs - arrivals[i] > waitMs {
            release(i)
            stats.late += 1
        }
        // A start held for the frames dropped is not the remaining frames' wait.
        heldStartTicks = 0
        heldStartMs = .nan
    }

    /// The consumer's ticks stopped (its thread blocked, a host's sink that took
    /// seconds) while time went on: the periods it missed are gone. Each is taken as a
    /// tick at its time, and a frame due in it is dropped as late, as if it had been
    /// played unheard; so frames that arrived meanwhile are placed on the clock as they
    /// came (not as early: the buffer held them as seconds of delay for good, and past
    /// its pool took every new frame for late), and the stream is back to its cushion.
    /// A consumer taking several periods at once (setConsumerBurst) is not stalled
    /// between its bursts. Called with each tick's time; a consumer that hands over
    /// arrivals in batches calls it with the time before each batch (`ticking`: it
    /// ticks at `t` right after; else `t` is the newest arrival's time), so frames that
    /// came during a stall are placed on the clock that went on.
    public func catchUp(toMs t: Double, ticking: Bool = true) {
        guard tickTimesKnown > 0 && ticks > 0 else { return }
        let cap = Int64(JitterBuffer.tickTimeCapacity)
        // Where the consumer's clock is: a consumer that took n periods in its last
        // burst (a host's pull of n periods) is n - 1 periods past the last tick.
        let last = tickTimes[Int((ticks - 1) % cap)] + Double(max(0, ticksAtLastTime - 1)) * frameMs
        guard t - last > tuning.stallMs + burstMs + (ticking ? frameMs : 0) else { return }
        let missed = Int(((t - last) / frameMs).rounded(.down)) - (ticking ? 1 : 0)
        guard missed > 0 else { return }
        let fs = Int64(frameSamples)
        grid += pendingGrid
        pendingGrid = 0
        // Periods older than the tick times kept are passed at once (a long stall: a
        // host asleep for an hour costs no more than one for a second).
        let bulk = max(0, missed - Int(cap))
        if bulk > 0 {
            ticks += Int64(bulk)
            if playing {
                nextTS += Int64(bulk) * fs
                for i in 0..<usedEnd where used[i] && timestamps[i] < nextTS { release(i); stats.late += 1 }
            }
        }
        for k in (bulk + 1)...missed {
            tickTimes[Int(ticks % cap)] = last + Double(k) * frameMs
            gridAtTick[Int(ticks % cap)] = grid
            tickTimesKnown += 1
            ticksAtLastTime = 1
            if playing {
                if let s = slot(at: nextTS) { release(s); stats.late += 1 }
                nextTS += fs
            }
            ticks += 1
        }
    }

    /// Decides the next frame period (without a time: arrivals count from the next tick).
    public func next() -> Playout {
        grid += pendingGrid
        pendingGrid = 0
        tickTimesKnown = 0
        return advance()
    }

    /// The consumer's ticks move `ms` earlier (negative: later) from the next one on
    /// (a renderer that aligns its phase to the arrivals): taken at that tick. Tell it
    /// before inserting what arrives in the moved period (a period a move later
    /// lengthens is placed by its new length). Arrivals keep their lateness (each on
    /// the grid of the tick before it, whenever it is inserted); buffered frames have
    /// that much less (more) cushion.
    public func moveClock(earlierByMs ms: Double) {
        guard ms.isFinite && ms != 0 else { return }
        pendingGrid += ms / frameMs
    }

    /// Between ticks while no talkspurt plays: how much earlier (in periods, below one)
    /// the next tick would have to come for the first frame waiting here to start on
    /// it with exactly the cushion a start asks for, not up to a period more. 0: nothing
    /// waits, it needs more than a period yet, or it starts under rules of their own
    /// (nothing known yet, a stream that starved). A renderer that may
    /// move its ticks while nothing plays (a device fed silence: a shorter block of it
    /// is not heard) moves them by this and tells every buffer (moveClock).
    public var startEarlyTicks: Double {
        guard !playing, !endedStarved, historyCount > 0, let o = oldestSlot() else { return 0 }
        let excess = cushion(timestamps[o]) - pendingGrid - startTicks
        return excess > 0 && excess < 1 ? excess : 0
    }

    /// `startEarlyTicks` in whole 48 kHz samples, rounded down with a hair to spare: a
    /// move of exactly the excess left the frame's cushion equal to the start's, and
    /// rounding then decided whether it started on the moved tick (helper-96: 261 of
    /// 5,900 starts missed it and asked again, for a period). 0: no move.
    public var startEarlySamples: Int {
        max(0, Int((startEarlyTicks * Double(frameSamples) - 1e-3).rounded(.down)))
    }

    /// Periods the held first frame has waited, counting this tick: by the tick times
    /// when the consumer gives them (one that takes several periods at one instant
    /// gives each the same time: they are not periods of waiting), else by ticks.
    private func heldStartPeriods() -> Double {
        heldStartTicks += 1
        guard tickTimesKnown > 0 else { return Double(heldStartTicks - 1) }
        let now = tickTimes[Int(ticks % Int64(JitterBuffer.tickTimeCapacity))]
        if heldStartMs.isNaN { heldStartMs = now }
        return (now - heldStartMs) / frameMs
    }

    private func advance() -> Playout {
        defer { ticks += 1 }
        talkEdge = .none
        playedSlackTicks = .nan
        playedEndSlackTicks = .nan
        let fs = Int64(frameSamples)
        let target = targetTicks
        if !playing {
            guard var o = oldestSlot() else { heldStartTicks = 0; heldStartMs = .nan; return pausePlayout() }
            // A talkspurt (or a comfort-noise update) starts when its first frame has
            // the cushion the distribution asks for (at least the lower bound); with
            // nothing known yet, at once, or, under a lower bound (a host's, or a
            // consumer taking several periods at once), once that many frames after it
            // are here or it has waited that many periods (a talkspurt shorter than
            // the bound).
            if historyCount > 0 {
                if cushion(timestamps[o]) < startTicks { return pausePlayout() }
            } else if minTicks > 0 && Double(newestTS - timestamps[o]) / Double(fs) < minTicks
                        && heldStartPeriods() < minTicks {
                return pausePlayout()
            } else if minTicks <= 0 && !seeded && heldStartTicks == 0 && tickTimesKnown > 0 && lastArrivalMs.isFinite
                        && (tickTimes[Int(ticks % Int64(JitterBuffer.tickTimeCapacity))] - lastArrivalMs) / frameMs
                            < tuning.unknownStartMarginTicks {
                heldStartTicks = 1
                return pausePlayout()
            }
            if endedStarved && historyCount > 0 && !flagSets[o].contains(.marker) {
                // The stream starved past maxStarvedMs and what comes now continues it
                // (no marker). Its frames since the starving began are here (insert
                // keeps them): a path that got slower for a while (a delay episode)
                // delivers them one by one, and the talkspurt resumes on the first, so
                // nothing the path delayed is missed. A path that stalled delivers its
                // backlog at once: the listener heard the stall concealed, then silence;
                // played from its oldest frame, the backlog stays as that much delay,
                // shed later a frame at a time (mid-speech). The talkspurt starts
                // instead on the frame that has a start's cushion; the older ones are
                // dropped as late. What is buffered counts, not the cushion alone (the
                // first frame's timing was taken as a typical frame's, observe).
                // Never past a pause or into the next talkspurt: with a frame buffered
                // that ends a talkspurt (last frame, DTX), the delay goes for free in the
                // pause after it, so only what the starving concealed and passed is
                // dropped; a marker frame starts a talkspurt, which plays from its first
                // frame.
                let ahead = Double((newestTS - timestamps[o]) / fs)
                let k = Int64((min(cushion(timestamps[o]), ahead) - startTicks).rounded(.down))
                var markerTS = Int64.max, pauseBuffered = false
                for i in 0..<usedEnd where used[i] {
                    if !flagSets[i].isDisjoint(with: JitterBuffer.pauseFollows) { pauseBuffered = true }
                    if flagSets[i].contains(.marker) && timestamps[i] > timestamps[o] { markerTS = min(markerTS, timestamps[i]) }
                }
                let upTo = min(markerTS, pauseBuffered ? nextTS : timestamps[o] + max(0, k) * fs)
                if timestamps[o] < upTo {
                    for i in 0..<usedEnd where used[i] && timestamps[i] < upTo { release(i); stats.late += 1 }
                    guard let next = oldestSlot(), cushion(timestamps[next]) >= startTicks else { return pausePlayout() }
                    o = next
                }
                // What the stall's queue held may have been lost after its first frames:
                // the next frame then comes periods ahead (advance skips the gap), within
                // about the time the stream would take to starve again.
                resumedTicksLeft = Int((maxStarvedMs / frameMs).rounded(.up)) + 2
            }
            endedStarved = false
            heldStartTicks = 0; heldStartMs = .nan
            playing = true
            starvedTicks = 0; excessTicks = 0
            nextTS = timestamps[o]
            if !flagSets[o].contains(.dtx) {
                talking = true
                talkEdge = .started
                stats.talkspurts += 1
            }
            return play(o)
        }
        if resumedTicksLeft > 0 { resumedTicksLeft -= 1 }
        if let o = oldestSlot(), timestamps[o] < nextTS || (timestamps[o] - nextTS) % fs != 0 {
            // The oldest frame here is off this talkspurt's frame grid: it starts the
            // next talkspurt, whose timestamps advanced by the pause's wall-clock time,
            // while this one's end was never played (its last frame lost, or dropped
            // unheard by a stall or the bound). On this grid none of its frames would
            // ever be played: this talkspurt ends here, and the next starts on its own
            // frames (what the clock already passed is dropped as late).
            for i in 0..<usedEnd where used[i] && timestamps[i] < nextTS { release(i); stats.late += 1 }
            playing = false
            if talking { talking = false; talkEdge = .ended }
            return pausePlayout()
        }
        var c = cushion(nextTS)
        // (A host pulling more than the bound at a time holds that much by design.)
        if c > max(maxTicks, Double(lastBurstTicks)) + 1 {
            // More than the bound allows (a path or server that stopped and then gave
            // its backlog at once): what is beyond the target is shed now, not a frame
            // at a time (that kept seconds of delay, and past the pool took every new
            // frame for late). The frames skipped are dropped as late.
            let k = Int64((c - target).rounded(.down))
            nextTS += k * fs
            for i in 0..<usedEnd where used[i] && timestamps[i] < nextTS { release(i); stats.skipped += 1 }
            excessTicks = 0
            c = cushion(nextTS)
        }
        // Just after a talkspurt resumed on a stall's first frames, this frame and the
        // next missing with later ones here, two periods or more over the target: the
        // rest of what the stall held was lost, and the clock is behind what is here.
        // Concealed one a tick, the missing frames kept that delay for as long as they
        // lasted, to be shed later a frame at a time: they are skipped at once, keeping
        // a period over the target, up to the oldest frame here (played below), or to
        // the one before it when the oldest can rebuild it (FEC, DRED: rebuilt below).
        // Elsewhere (a path that got faster: its newer frames overtake older ones still
        // on their way) they are concealed one a tick, so that stragglers still play.
        if resumedTicksLeft > 0 && slot(at: nextTS) == nil && slot(at: nextTS + fs) == nil, let o = oldestSlot() {
            let gap = (timestamps[o] - nextTS) / fs
            let rebuilds = flagSets[o].contains(.fec) || recoveryAvailable
            let k = min(Int64((c - target - 1).rounded(.down)), rebuilds ? gap - 1 : gap)
            if k >= 1 {
                nextTS += k * fs
                stats.lossesSkipped += UInt64(k)
                c = cushion(nextTS)
            }
        }
        // Excess: a whole period less would still cover the target (and the talkspurt's
        // end, which its start's cushion covers).
        excessTicks = c >= max(target, startTicks) + 1 + tuning.hysteresisTicks ? excessTicks + 1 : 0
        // Excess is shed by dropping a frame (its successor plays in its place) at once
        // when it is cheap to lose, else once the excess has lasted catchUpTicks, or,
        // when the buffer holds n whole periods of it, catchUpTicks / n (at least
        // minShedGapTicks apart): a path whose delay fell by 300 ms (the end of a delay
        // episode) is back within seconds, not after 15 drops two seconds apart. A
        // renderer that reports levels has the wait be quietCatchUpTicks / n (a single
        // period of excess waits up to quietCatchUpTicks for a pause; 15 periods still
        // drop a voiced frame every 0.66 s at most). What the buffer holds counts, not
        // the cushion alone: a clock held while a path got slower shows a cushion over
        // the target (its baseline still the faster path's) with nothing buffered to
        // shed. A lost frame is skipped for the excess after catchUpTicks / n.
        var shedAfter = tuning.catchUpTicks, patience = tuning.catchUpTicks
        if excessTicks > 0 {
            let held = min(c, Double((newestTS - nextTS) / fs)) - target - tuning.hysteresisTicks
            let n = held.isFinite ? Int(max(1, min(held, 64))) : 1
            shedAfter = tuning.catchUpTicks / n
            let wait = levelsReported ? max(tuning.catchUpTicks, tuning.quietCatchUpTicks) / n : shedAfter
            patience = max(wait, min(tuning.minShedGapTicks, tuning.catchUpTicks))
        }
        let successor = slot(at: nextTS + fs)
        if let s = slot(at: nextTS) {
            starvedTicks = 0
            if let succ = successor, excessTicks > 0,
               excessTicks >= patience || isCheapToDrop(s) {
                release(s)
                stats.skipped += 1
                excessTicks = 0
                nextTS += fs
                return play(succ)
            }
            return play(s)
        }
        if let succ = successor {
            starvedTicks = 0
            if havePlayed && seqs[succ] == lastPlayedSeq &+ 1 && !flagSets[succ].contains(.marker) {
                // No seq is missing: the sender skipped this frame's time (its host fell
                // a frame behind real time). Nothing was lost, so nothing is waited for,
                // and the successor's FEC is of the frame before: conceal the period.
                // (A successor with the marker starts anew after a frame the sender
                // could not send: its FEC may be of that frame, rebuilt below.)
                nextTS += fs
                stats.plcFrames += 1
                return .conceal
            }
            let rebuild = flagSets[succ].contains(.fec) || recoveryAvailable
            // Below target a missing frame that nothing can rebuild may only be
            // reordered: hold the clock for it (it is concealed either way).
            if c < target && !rebuild {
                stats.plcFrames += 1
                stats.waited += 1
                return .conceal
            }
            nextTS += fs
            // Lost in the network. When delay is due to be shed, skip it rather than
            // drop a frame that did arrive.
            if excessTicks > 0 && excessTicks >= shedAfter {
                stats.lossesSkipped += 1
                excessTicks = 0
                return play(succ)
            }
            if rebuild {
                stats.fecRecovered += 1
                return .fec(slot: succ)
            }
            stats.plcFrames += 1
            return .conceal
        }
        if count > 0 && newestTS > nextTS {
            // This frame and the next are missing, later ones are here: lost, unless
            // reordered. Below target, hold the clock for them.
            starvedTicks = 0
            stats.plcFrames += 1
            if c < target {
                stats.waited += 1
                return .conceal
            }
            nextTS += fs
            return .conceal
        }
        // Nothing newer: starving.
        if lateEndArrived {
            // The talkspurt's last frame came too late to play: it has ended.
            lateEndArrived = false
            playing = false
            starvedTicks = 0
            if talking { talking = false; talkEdge = .ended }
            return pausePlayout()
        }
        if starvedTicks == 0 { stats.underruns += 1; starvedFromTS = nextTS }
        starvedTicks += 1
        if Double(starvedTicks) * frameMs > maxStarvedMs {
            // The talker stopped without a last frame: pause until the next frame.
            playing = false
            endedStarved = true
            resumeRebase = true
            if talking { talking = false; talkEdge = .ended }
            return .silence
        }
        stats.plcFrames += 1
        // Wait: the late frame, or its successor carrying its FEC, can still come
        // within the cushion the target allows. On a lossy stream the target already
        // holds the successor's arrival: past it, the frame is more likely lost than
        // late, and waiting would only add delay to shed later.
        // Beyond the target, only while the frames later than this cushion mostly came
        // within one period more (a jitter tail just past a tick), not when they are
        // spread far (delay spikes: waiting a period rarely brings the frame, and the
        // period is then carried until it is shed); with no frame ever that late (a
        // delay step, or a loss), one period.
        let wait = fecCushion ? 0 : tuning.waitTicks
        let likely = c < target + wait ? lateFramesCame(within: c, c + 1) : nil
        if c < target || likely == true || (likely == nil && c < target + min(wait, 1)) {
            stats.waited += 1
            return .conceal
        }
        nextTS += fs
        return .conceal
    }

    /// Of the frames later than cushion `from`, whether at least `waitLikelihood`
    /// came by `to` (from the lateness histogram); nil when none was that late.
    private func lateFramesCame(within from: Double, _ to: Double) -> Bool? {
        guard tuning.waitLikelihood > 0 else { return true }
        let per = Double(JitterBuffer.binsPerTick), last = JitterBuffer.histogramBins - 1
        let a = min(last, max(0, Int((from * per).rounded(.down)))), b = min(last, max(0, Int((to * per).rounded(.down))))
        var upToA = 0.0, upToB = 0.0
        for k in 0...b {
            if k <= a { upToA += bins[k] }
            upToB += bins[k]
        }
        let later = binTotal - upToA
        guard later > 1e-9 * binTotal else { return nil }
        return (upToB - upToA) >= tuning.waitLikelihood * later
    }

    /// A frame whose loss would not be heard: a DTX frame, a small packet (VBR
    /// speech codecs spend few bytes on quiet frames), or one after the renderer
    /// reported a quiet frame.
    private func isCheapToDrop(_ s: Int) -> Bool {
        if flagSets[s].contains(.dtx) || lastPlayedQuiet { return true }
        // Without levels, a packet under half the stream's usual size is taken for a
        // quiet frame. A consumer that reports levels knows better: loud audio that
        // codes small (a steady tone, some music, a held vowel: helper-95 heard a
        // tone's 31-byte frame among 68-byte ones dropped mid-note) is not dropped for
        // its size.
        return !levelsReported && packetBytesAverage > 8 && Double(lengths[s]) < 0.5 * packetBytesAverage
    }

    /// While paused: comfort noise for a while after a DTX frame (its updates come
    /// every few hundred ms), silence after a last frame or once updates stop.
    private func pausePlayout() -> Playout {
        guard comfortNoiseTicks > 0 else { return .silence }
        comfortNoiseTicks -= 1
        return .comfortNoise
    }

    private func play(_ s: Int) -> Playout {
        // A DTX frame opens a comfort-noise pause (1 s without an update ends it).
        comfortNoiseTicks = flagSets[s].contains(.dtx) ? Int(1000 / frameMs) : 0
        if historyCount > 0 && !flagSets[s].contains(.dtx) {
            let c = cushion(timestamps[s])
            let end = medianTicks + endLateTicks
            // The cover's own uncertainty grows with the spread: half of it again.
            let cover = coverTicks + 0.5 * max(0, coverTicks - medianTicks)
            playedSlackTicks = c - max(targetTicks, cover, end)
            playedEndSlackTicks = c - end
        }
        nextTS = timestamps[s] + Int64(frameSamples)
        havePlayed = true
        lastPlayedSeq = seqs[s]
        starvedTicks = 0
        lateEndArrived = false
        // After a last-frame or DTX frame the stream is expected to pause.
        if !flagSets[s].isDisjoint(with: JitterBuffer.pauseFollows) {
            playing = false
            // (A talkspurt that started with this frame keeps its start: the consumer
            // counts both, or its counts of starts and ends fall out of step.)
            if talking { talking = false; talkEdge = talkEdge == .started ? .startedAndEnded : .ended }
        }
        return .packet(slot: s)
    }

    /// Counts a frame concealed by the caller (decoder error).
    public func countConcealed() { stats.plcFrames += 1 }
    /// The last `.fec` decision produced nothing: count it as PLC.
    public func fecFailed() { stats.fecRecovered -= 1; stats.plcFrames += 1 }
    /// The last `.fec` decision was served by DRED instead of in-band FEC.
    public func fecWasDRED() { stats.fecRecovered -= 1; stats.dredRecovered += 1 }
}
