// Where a playback device's blocks fall against the talkers' frames.
//
// A card plays on its own clock, at a phase to the talkers' frames that nobody picked:
// a frame then waits up to a period more than its jitter buffer asks for before the
// block it plays in comes (10 ms on average at 20 ms). The device driver moves its
// blocks earlier (and every jitter buffer's ticks, `JitterBuffer.moveClock`) in two
// ways, each by writing the card a block shorter than a period:
//
// - In a pause, at once: a talkspurt's first frame waiting for its cushion has the
//   block before it, digital silence or comfort noise, cut short
//   (`PlayedBlock.silentCut`), so it starts when it has its cushion.
// - While streams play, by a glide: the block is played a little faster, resampled to
//   at most 2 % fewer samples (a third of a semitone higher for that block, as the
//   listener's denoiser moves a stream: LagGlide). The moves are the sink's earlier
//   ones (`RenderPhase`: by what every frame played could spare, less a margin, none
//   for a while after a frame came late), at most 2 % of a period once per 10 blocks
//   (0.2 % over time: a card 0.1 % slower than the sender's clock, whose buffer would
//   otherwise grow until a frame is dropped every 20 s, is followed with no drop), with
//   no real-time schedule to keep: the card's clock is moved for good. Never later: a
//   late frame grows its stream's cushion as on any clock (the jitter buffer waits).
//   (The sink's renderer moves its blocks by when it renders them, up to half a period
//   at once, and stays within two periods of its schedule: a host's sink expects real
//   time; a card only plays what it is given.)
//
// bench-jitter's first table runs the traces on such a clock (docs/benchmarks.md).
// Pure: the driver renders, applies the move to the block (`fit`), to its clock and to
// the jitter buffers.

/// A device driver's moves of its blocks: a silent cut, or a glide (RenderPhase with
/// no schedule, in small steps).
public struct DevicePhase: Sendable {
    /// The glide's policy (RenderPhase with keepsSchedule false).
    private var glide: RenderPhase

    /// For blocks of `periodMs`: glide steps of 2 % of a period (0.4 ms at 20 ms), at
    /// most one per 10 blocks, keeping 1 ms in hand, earlier only. Chosen on
    /// bench-jitter's traces and two other seed sets (JB_SEEDS=1, 2): the goal met on
    /// 14, 9 and 9 of 20 traces with these, against 12, 8 and 9 with starts aligned
    /// alone. Moving later too (a block played slower when a talkspurt's last frame
    /// would miss it, as the sink does): 13, 10, 9, for a second kind of move. With
    /// those, steps every 3 blocks met 14, 10, 8; steps of 0.2 ms every 5 blocks 13,
    /// 10, 9; 1.5 ms in hand 13, 9, 9.
    public init(periodMs: Double) {
        var g = RenderPhase(periodMs: periodMs)
        g.keepsSchedule = false
        g.maxStepMs = DevicePhase.glideShare * periodMs
        g.minStepMs = g.maxStepMs
        g.windowBlocks = 10
        g.marginMs = 1.0
        g.movesLater = false
        glide = g
    }

    /// The most a glide moves one block, as a share of it.
    public static let glideShare = 0.02

    /// The most a glide moves a block of `frames` (samples; whole ones, rounded down).
    public static func maxGlide(frames: Int) -> Int { Int(glideShare * Double(frames)) }

    /// The move for the block just rendered (48 kHz samples, 0 ..< frames: the next
    /// block comes that much earlier, the card is written that many fewer). `played`:
    /// what the block played; `cut`: its silent cut (`PlayedBlock.silentCut`, 0: none),
    /// which is the move when there is one; else the glide's, in whole samples (at most
    /// maxGlide). Called once per block.
    public mutating func move(after played: PlayedBlock, cut: Int, frames: Int) -> Int {
        // Every block counts for the glide's window, a cut one too (nothing played in
        // it: the window starts again, and holds end): a window must not span a cut
        // and take again what the cut took (helper-97).
        let ms = glide.rendered(played)
        if cut > 0 { return cut }
        // (The policy counts the step it asked for, 0.4 ms, against its budget; the
        // card moves the whole samples below it, 19 of 19.2: a hair less than counted.)
        let limit = DevicePhase.maxGlide(frames: frames)
        return max(0, min(limit, Int((ms * 48).rounded())))
    }

    /// Writes `block` (`frames` of interleaved stereo) played `move` (0 ..< frames)
    /// samples shorter into `out` (room for `frames`): as it is when the move is 0, its
    /// first frames - move when `silent` (a silent cut: nothing is heard missing; their
    /// last millisecond cross-faded into the block's last, for comfort noise), else
    /// resampled (a glide: Catmull-Rom, the block's first sample kept and its last one
    /// just before where the next block's first falls, so the samples are evenly spaced
    /// across both blocks). Returns frames - move.
    @discardableResult
    public static func fit(_ block: UnsafePointer<Int16>, frames: Int, move: Int, silent: Bool,
                           into out: UnsafeMutablePointer<Int16>) -> Int {
        let n = frames - max(0, move)
        guard n > 0 else { return 0 }
        if n == frames || silent {
            out.update(from: block, count: 2 * n)
            if n < frames {
                // Comfort noise cut short: its last millisecond cross-fades into the
                // block's last one, so the written block ends on the samples the next
                // block continues from (no step in the noise; digital silence stays
                // within digital silence).
                let m = min(48, n)
                for k in 0..<m {
                    let w = Float(k + 1) / Float(m + 1)
                    let i = 2 * (n - m + k), j = 2 * (frames - m + k)
                    out[i] = Int16((Float(block[i]) * (1 - w) + Float(block[j]) * w).rounded())
                    out[i + 1] = Int16((Float(block[i + 1]) * (1 - w) + Float(block[j + 1]) * w).rounded())
                }
            }
            return n
        }
        let step = Double(frames) / Double(n)
        let last = frames - 1
        for j in 0..<n {
            let pos = Double(j) * step
            let base = Int(pos)
            let t = Float(pos - Double(base))
            // The four points around pos, clamped to the block (no nested function: it
            // could allocate a context on the audio path in a debug build).
            let i0 = 2 * max(base - 1, 0), i1 = 2 * min(base, last), i2 = 2 * min(base + 1, last), i3 = 2 * min(base + 2, last)
            for c in 0..<2 {
                out[2 * j + c] = CatmullRom.sample(Float(block[i0 + c]), Float(block[i1 + c]), Float(block[i2 + c]), Float(block[i3 + c]), t: t)
            }
        }
        return n
    }
}
