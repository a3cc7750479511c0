// Where a free-running renderer puts its ticks (the mixer thread that feeds the
// host's sink: no device clock decides). A frame is played at the first tick after
// it has its cushion, so with ticks at an arbitrary phase to the talkers' frames it
// waits up to a period more than the jitter buffer asks for (10 ms on average at
// 20 ms). The renderer tells this policy, block by block, what the frames it played
// had to spare (the least `JitterBuffer.playedSlackTicks` and `playedEndSlackTicks`
// of the streams that played one, in ms). Once `windowBlocks` blocks in a row all
// had at least `marginMs` + `minStepMs` to spare, the ticks move earlier by the
// least of it less the margin, at most `maxStepMs` at once. When a talkspurt's last
// frame, which a sender sends late (once its queue has been dry for a while), would
// miss its tick, they move later by what it lacks plus the margin (at most
// `maxStepMs`): the cushion grows by that (no period is concealed for it).
//
// (The sink's ticks do not move for a talkspurt's start alone, as a device's do
// with PlayedBlock.silentCut: a start then waits its buffer's start cushion, which
// is less than the cover these moves keep; with that move, RenderPhaseTests' jitter
// of 4 ms concealed 14 periods against 11 at a fixed phase.)
//
// The renderer stays within a period behind and two ahead of its real-time
// schedule, so over any longer span it renders exactly in real time: in a block in
// which nothing plays (where moving costs nothing) it gives a whole period of lead
// (or of lag past half a period) back, which keeps the phase; a move that would
// leave those bounds is not made.
//
// A block in which a talking stream held its clock for a late frame (the jitter
// buffer grew its cushion by waiting for it) starts the count again and stops moves
// earlier: a move earlier would take that cushion back, and the next such frame be
// concealed again. Until a block in which nothing plays, the ticks then move earlier
// only by what every frame could spare over a window after the hold (the least
// slack over it, less the margin; what the moves take is counted against it): a
// late frame that comes again within the window keeps its cushion, and a hold that
// was a single event (a path that got slower once) is given back once the window
// has passed, not left in place for as long as a stream that never pauses (music,
// a screen's audio, a long monologue) plays. The window is `holdMs` after the first
// hold; each later one makes it twice the time since the hold before where that is
// longer (it does not shrink until a pause), at most `maxHoldMs`. A late frame whose
// cushion was kept makes no hold: late frames that keep coming less than 10 s apart
// cost a hold or two and then keep their cushion; ones further apart (or jitter
// bursts further apart) are concealed as the buffer's own cover decides, once the
// window has given back what the last hold grew. (A frame lost in the network and
// concealed grows nothing: it does not count.)
//
// Several talkers at different phases leave no common slack: the ticks then stay
// where they are. Pure: the renderer applies each move to its clock and tells every
// jitter buffer (`JitterBuffer.moveClock`, taken at the buffer's next tick).
public struct RenderPhase: Sendable {
    /// Slack kept in hand after a move (ms): a frame a little later than every one
    /// the jitter buffer has seen.
    public var marginMs = 1.5
    /// Moves smaller than this are not worth the irregular block (ms).
    public var minStepMs = 1.0
    /// The most one move takes (ms): more is taken at the next window. Half a period.
    public var maxStepMs: Double
    /// The renderer's period (ms): a move of a whole period keeps the phase.
    public var periodMs: Double
    /// Blocks that played a frame needed before a move.
    public var windowBlocks = 3
    /// After the first hold, the window (ms of blocks) over which frames must have
    /// had slack to spare before moves earlier take it: short, so that a single event
    /// (a path that got slower once) is given back within seconds.
    public var holdMs = 2000.0
    /// The longest window (ms), reached by holds 10 s apart.
    public var maxHoldMs = 20_000.0
    /// The renderer keeps a real-time schedule (the sink's mixer thread: its lead stays
    /// within (−periodMs, 2 periodMs), and a quiet block gives a whole period back);
    /// false: a device's clock, which the moves change for good (a block written
    /// shorter or longer by playing it faster or slower), with no schedule to keep.
    public var keepsSchedule = true
    /// Moves later when a talkspurt's last frame would miss its tick; false: earlier
    /// only (a device's glide, DevicePhase).
    public var movesLater = true

    /// How far ahead of the real-time schedule the ticks are (ms; negative: behind),
    /// within (−periodMs, 2 periodMs) when the renderer keeps its schedule.
    public private(set) var leadMs = 0.0

    private var blocks = 0
    private var leastSlackMs = Double.infinity
    private var leastEndSlackMs = Double.infinity
    /// Time rendered since the last hold (ms).
    private var sinceHoldMs = Double.infinity
    /// Since a hold (until a quiet block): the window (ms; 0: no hold in force), how
    /// much of it has passed, the least slack of the frames played in it, and how
    /// much earlier the ticks may still move (the least slack of the last whole
    /// window less the margin and the moves since; 0 until one has passed).
    private var holdWindowMs = 0.0
    private var windowPassedMs = 0.0
    private var windowLeastMs = Double.infinity
    private var budgetMs = Double.infinity

    /// `leadMs`: where a renderer that takes over another's schedule starts (the
    /// other's lead), so the bounds hold over both.
    public init(periodMs: Double = 20, leadMs: Double = 0) {
        self.periodMs = periodMs
        maxStepMs = periodMs / 2
        self.leadMs = leadMs.isFinite ? leadMs : 0
    }

    /// One block was rendered. `slackMs` / `endSlackMs`: the least slack among the
    /// frames it played, against the target and the talkspurt end's lateness / the
    /// latter alone (nil: it played none); `held`: a talking stream held its clock for
    /// a late frame in it; `quiet`: no stream played or concealed anything (a free
    /// moment).
    /// Returns how much earlier (ms; negative: later) the next tick should come: 0,
    /// or a move the caller applies to its clock and its jitter buffers.
    public mutating func rendered(slackMs: Double?, endSlackMs: Double?, held: Bool, quiet: Bool) -> Double {
        sinceHoldMs += periodMs
        if quiet {
            restart()
            endHold()
            // A free moment: back towards the schedule by a whole period (the phase stays).
            guard keepsSchedule else { return 0 }
            if leadMs >= periodMs { return record(-periodMs) }
            if leadMs < -periodMs / 2 { return record(periodMs) }
            return 0
        }
        if held {
            restart()
            // Late frames that keep coming: a window that holds the next one too.
            let longer = sinceHoldMs.isFinite ? max(holdWindowMs, 2 * sinceHoldMs) : holdWindowMs
            holdWindowMs = min(maxHoldMs, max(holdMs, longer))
            sinceHoldMs = 0
            windowPassedMs = 0
            windowLeastMs = .infinity
            budgetMs = 0
            return 0
        }
        if holdWindowMs > 0 {
            if let slack = slackMs, !slack.isNaN { windowLeastMs = min(windowLeastMs, slack) }
            windowPassedMs += periodMs
            if windowPassedMs >= holdWindowMs {
                // (A window in which no frame played says nothing: the budget stays.)
                if windowLeastMs.isFinite { budgetMs = max(0, windowLeastMs - marginMs) }
                windowPassedMs = 0
                windowLeastMs = .infinity
            }
        }
        guard let slack = slackMs, !slack.isNaN else { return 0 }
        blocks += 1
        leastSlackMs = min(leastSlackMs, slack)
        if let e = endSlackMs, !e.isNaN { leastEndSlackMs = min(leastEndSlackMs, e) }
        guard blocks >= windowBlocks else { return 0 }
        let earlier = min(min(leastSlackMs - marginMs, maxStepMs), budgetMs)
        let later = leastEndSlackMs.isFinite ? min(marginMs - leastEndSlackMs, maxStepMs) : 0
        restart()
        if movesLater && later >= minStepMs && (!keepsSchedule || leadMs - later > -periodMs) { return record(-later) }
        if earlier >= minStepMs && (!keepsSchedule || leadMs + earlier < 2 * periodMs) {
            budgetMs -= earlier
            return record(earlier)
        }
        return 0
    }

    /// A quiet block: a hold's cushion may be taken back (nobody is playing).
    private mutating func endHold() {
        holdWindowMs = 0
        budgetMs = .infinity
    }

    private mutating func record(_ ms: Double) -> Double {
        leadMs += ms
        return ms
    }

    /// Forgets the blocks counted so far.
    public mutating func restart() {
        blocks = 0
        leastSlackMs = .infinity
        leastEndSlackMs = .infinity
    }
}

/// What one rendered block tells RenderPhase, gathered over the streams that rendered
/// in it: the least slack of the frames played, whether a talking stream held its
/// clock for a late frame, whether anything played or concealed. Each stream gathers
/// its own part (`init(talking:)`, then `add` per frame it decoded for the block), and
/// the renderer `merge`s the parts: the engine's receive slots and renderer
/// (RemoteSlot, ReceiveSet) and the simulation (bench-jitter's sink table) alike.
public struct PlayedBlock: Equatable, Sendable {
    /// The least slack of the frames played against the target and the talkspurt end's
    /// lateness (ms; infinity: none played, or none that says).
    public private(set) var slackMs = Double.infinity
    /// The least against the talkspurt end's lateness alone (ms).
    public private(set) var endSlackMs = Double.infinity
    /// A talking stream held its clock for a late frame.
    public private(set) var held = false
    /// A stream played or concealed something (false: a free moment).
    public private(set) var played = false
    /// The least of the streams' wish to have the next tick earlier so that a first
    /// frame waiting starts with exactly its cushion (`JitterBuffer.startEarlyTicks`, in
    /// ms; infinity: none waits so). Only frames as long as the block say.
    public private(set) var startEarlyMs = Double.infinity

    /// How much earlier (ms) a renderer that moves its clock only in a pause (a device:
    /// it writes a shorter block of silence or comfort noise, silentCut) has its next
    /// tick: the least start's wish when no stream played in the block (silence or
    /// comfort noise), and it is worth a move (a millisecond); else 0.
    public var silentStartMoveMs: Double {
        !played && startEarlyMs.isFinite && startEarlyMs >= 1 ? startEarlyMs : 0
    }
    /// The frames to cut from the end of the block rendered (`block`: `frames` of 48 kHz
    /// stereo, the mix) before a device plays it, for its next block to come
    /// silentStartMoveMs earlier: all of that when what is cut is digital silence, or,
    /// where a stream played comfort noise and no stream sounded otherwise (`sounded`: a
    /// long frame's or a denoiser's fading tail of speech), no louder than `pausePeak`;
    /// else 0. (DevicePhase.fit cross-fades the last millisecond before the cut into
    /// the block's last one, so what follows continues from it.)
    public func silentCut(_ block: UnsafePointer<Int16>, frames: Int) -> Int {
        let cut = Int((silentStartMoveMs * 48).rounded())   // whole samples already
        guard cut > 0 && cut < frames else { return 0 }
        let limit = comfortNoise && !sounded ? PlayedBlock.pausePeak : DigitalSilence.peak
        for i in ((frames - cut) * 2)..<(frames * 2) where abs(Int(block[i])) > limit { return 0 }
        return cut
    }

    /// The loudest comfort noise cut short: below −40 dBFS (327 of 32767), the level
    /// below which a receive slot takes a block for a pause in the speech
    /// (RemoteSlot.quietPeak, 0.01 of full scale).
    public static let pausePeak = 327

    /// A stream played comfort noise in the block.
    public private(set) var comfortNoise = false
    /// A stream's part of the block was above digital silence with something other than
    /// comfort noise (`heard(peak:)`): then only digital silence is cut.
    public private(set) var sounded = false

    /// The stream's part of the block peaked at `peak` (full scale 1.0, what it mixed):
    /// above digital silence in a part that played no comfort noise, it sounded.
    public mutating func heard(peak: Float) {
        if !comfortNoise && peak * 32768 > Float(DigitalSilence.peak) { sounded = true }
    }

    /// Nothing rendered yet.
    public init() {}

    /// A stream's part of a block, `talking` before anything of the block was decoded:
    /// a talking stream plays in the block even when it decodes nothing for it (a
    /// frame longer than the block, decoded for an earlier one).
    public init(talking: Bool) { played = talking }

    /// A stream's state before it decodes a frame.
    public struct Before: Sendable {
        let talking: Bool
        let waited: UInt64
        public init(_ jb: JitterBuffer) { talking = jb.talking; waited = jb.stats.waited }
    }

    /// One frame decoded for the block: `decision` is what `jb.next` returned after
    /// `before`; `blockSamples` is the block's length. Frames shorter than the block
    /// are all decided at the block's start, and longer ones span blocks (a move of the
    /// block's phase is a fraction of theirs): the buffer's slack does not say what a
    /// move would cost them, so they hold the phase where it is (no slack to give,
    /// nothing asked for).
    public mutating func add(_ jb: JitterBuffer, _ decision: JitterBuffer.Playout, before: Before, blockSamples: Int) {
        let slack = jb.playedSlackTicks
        if !slack.isNaN {
            if jb.frameSamples != blockSamples {
                slackMs = min(slackMs, 0)
            } else {
                let frameMs = Double(jb.frameSamples) / 48
                slackMs = min(slackMs, slack * frameMs)
                endSlackMs = min(endSlackMs, jb.playedEndSlackTicks * frameMs)
            }
        }
        if jb.stats.waited != before.waited && jb.talking { held = true }
        if before.talking || (decision != .silence && decision != .comfortNoise) { played = true }
        if decision == .comfortNoise { comfortNoise = true }
        if jb.frameSamples == blockSamples {
            let samples = jb.startEarlySamples
            if samples > 0 { startEarlyMs = min(startEarlyMs, Double(samples) / 48) }
        }
    }

    /// Another stream's part of the same block.
    public mutating func merge(_ other: PlayedBlock) {
        slackMs = min(slackMs, other.slackMs)
        endSlackMs = min(endSlackMs, other.endSlackMs)
        held = held || other.held
        played = played || other.played
        startEarlyMs = min(startEarlyMs, other.startEarlyMs)
        comfortNoise = comfortNoise || other.comfortNoise
        sounded = sounded || other.sounded
    }
}

extension RenderPhase {
    /// One block was rendered (`rendered(slackMs:endSlackMs:held:quiet:)` told what
    /// `block` gathered). Returns the move (ms earlier) the caller applies.
    public mutating func rendered(_ block: PlayedBlock) -> Double {
        rendered(slackMs: block.slackMs.isFinite ? block.slackMs : nil, endSlackMs: block.endSlackMs.isFinite ? block.endSlackMs : nil,
                 held: block.held, quiet: !block.played)
    }
}
