// One preallocated receive slot per remote stream: jitter buffer, decoder, a small
// FIFO of decoded PCM and the listener's settings. The network thread inserts
// frames; the mixer (sink thread or a vc_read_mixed_pcm caller) renders. Both hold
// the slot's lock only for that step; nothing here allocates after init.
import Synchronization
import VoiceCatAudio
import VoiceCatProtocol
import VoiceCatSystem

final class RemoteSlot {
    /// True while the slot carries a stream: lets the renderer skip idle slots
    /// without taking their locks. Written by the network thread.
    let live = Atomic<Bool>(false)
    static let maxFrameSamples = 2880           // 60 ms at 48 kHz
    static let fifoCapacity = 4800 + 2880       // frames: one pull chunk + one codec frame

    let lock = Lock()
    let jitter: JitterBuffer
    let decoder: OpusDecoderBox
    let dred = DREDRecovery()
    var dredWanted = false
    private let fifo: UnsafeMutablePointer<Int16>      // stereo ring
    private var fifoRead = 0
    private var fifoCount = 0
    /// The last frame decoded was silence (nothing to play): what the FIFO holds of it is.
    private var lastDecodeSilent = true
    /// The last block rendered was quiet (peak below `quietPeak`).
    private var lastBlockQuiet = false
    /// A block whose peak is below this (−40 dBFS) is a pause in the speech: after two
    /// such blocks in a row, the jitter buffer drops a frame to shed excess delay where
    /// it is not heard (after one, it may be the gap before a word's onset).
    static let quietPeak: Float = 0.01

    // Identity (written by the network thread under `lock`).
    var active = false
    var ssrc: UInt32 = 0
    var userID: UInt32 = 0
    var streamID: UInt32 = 0
    var kind: StreamKind = .mic
    var channels = 1
    var frameSamples = 960
    var username = ""
    var settings = RemoteSettings()
    /// The gain (0 when muted) the last rendered block ended at; NaN before the
    /// stream's first block. A change is ramped over the next block (GainRamp).
    private var appliedGain = Float.nan
    /// Frames opened by the media reader, waiting for the renderer (no lock).
    let inbox = PacketRing(maxPayload: MediaLimits.maxDatagramBytes - MediaLimits.overheadBytes)
    /// Replays caught by the replay window (the media reader writes).
    let duplicates = Atomic<UInt64>(0)
    /// The listener's noise reduction for this stream: created on the control path when
    /// enabled, released when disabled or when the slot gets another stream.
    var noiseReducer: NoiseReducer?
    /// The denoiser whose output plays (the renderer's; nil: the decoded audio). It
    /// follows `noiseReducer` at a frame boundary with a cross-fade (switchDenoiser).
    private var playingReducer: NoiseReducer?
    /// `noiseReducer` has run one frame unheard (its window filled) and can be faded in
    /// (cleared whenever another denoiser, or none, takes its place).
    var reducerPrimed = false
    /// A denoiser faded out, kept until the control path can free it (not the audio path).
    var retiredReducer: NoiseReducer?
    /// Moves the stream by the denoiser's delay when it is switched on or off while the
    /// stream plays (denoise): built on the control path with the slot's first denoiser,
    /// kept for the slot's life.
    var glide: LagGlide?
    /// How fast the stream moves by a denoiser's delay (samples of lag per sample
    /// played): 2 %, its pitch a third of a semitone lower (higher) meanwhile; 10 ms
    /// take 500 ms, 2.5 ms 125 ms.
    static let glideRate = 0.02

    /// Takes every denoiser off the slot (the stream goes away): the caller frees them
    /// outside the slot lock. Lock held by caller.
    func takeReducers() -> [NoiseReducer?] {
        defer { noiseReducer = nil; playingReducer = nil; retiredReducer = nil; reducerPrimed = false }
        return [noiseReducer, playingReducer, retiredReducer]
    }

    /// Talk state as reported to the host: written by the network thread under `lock`
    /// (which host threads take to read it), read by it without.
    var talking = false
    /// Talkspurts whose first frame was played / that ended in playout, and when the
    /// last one ended (monotonic ns). The renderer counts them (under `lock`); the
    /// network thread reads them without the lock to raise the talk events, so its
    /// look never waits for a slot the renderer is decoding. `spurtEndNs` is
    /// stored before `spurtsEnded` is released.
    let spurtsStarted = Atomic<UInt64>(0)
    let spurtsEnded = Atomic<UInt64>(0)
    let spurtEndNs = Atomic<UInt64>(0)
    /// What the network thread saw of them (network thread only).
    var seenStarted: UInt64 = 0
    var seenEnded: UInt64 = 0

    // The media input's token holder only (MediaInput.swift).
    var replay = ReplayWindow()
    /// When the last voice frame arrived, comfort-noise updates (DTX) not counted (ms,
    /// monotonic; read by the network thread for talk state while nothing renders).
    let lastVoiceFrameMs = Atomic<UInt64>(0)

    /// The level of the decoded audio (after NR, before gain and mute) over the last
    /// block rendered, and when (render thread writes, host threads read; under `lock`).
    var level = BlockLevel()
    var levelAtNs: UInt64 = 0
    /// What the last render played, for the renderer's phase (render thread, under
    /// `lock`): the least slack of its frames, whether a talkspurt held its clock for a
    /// late frame (the buffer grew its cushion), whether the stream played anything
    /// but silence or comfort noise (or was in a talkspurt).
    var blockPlayed = PlayedBlock()
    /// The last render started or ended a talkspurt (the network thread raises the event).
    var blockTalkEdge = false

    // The per-speaker tap: the last rendered block of this stream before gain and
    // mute (48 kHz stereo), with the identity it was rendered under. Written and read
    // only by whoever renders, under the output stage's render lock (not `lock`: the
    // network thread may give the slot another stream in between, the tap keeps the
    // block's own identity).
    static let tapCapacity = OutputStage.block
    let tap: UnsafeMutablePointer<Int16>
    var tapFrames = 0
    /// The frames of the tap's last block, after it was handed out (renderLock): what
    /// a new converter of the tap is spliced in with at a format change.
    var tapLastFrames = 0
    var tapSSRC: UInt32 = 0
    var tapUserID: UInt32 = 0
    var tapKind: StreamKind = .mic
    /// Converts the tap to the output format (nil: 48 kHz stereo, nothing to convert),
    /// and the stream it last converted (a new one starts from a clean state).
    var tapConverter: FormatConverter?
    var tapConvertedSSRC: UInt32 = 0
    /// What arrived of this stream before recovery, for the loss reports (fed with
    /// the frames the renderer takes in, read by the network thread; under `lock`).
    let lossMeter = LossMeter()
    /// Inbox overflows seen by the last report, and intervals left without one: frames
    /// the inbox dropped (nothing rendered for a while) are not the network's loss.
    var overflowsSeen: UInt64 = 0
    var reportHold = 0

    /// The session's lateness, lent to this slot's buffer as a stream's first frames
    /// arrive (ReceiveSet.swift).
    private let lateness: SessionLateness

    init(lateness: SessionLateness) throws {
        self.lateness = lateness
        jitter = JitterBuffer(capacity: 64, maxPayload: MediaLimits.maxDatagramBytes - MediaLimits.overheadBytes)
        decoder = try OpusDecoderBox()
        // Not zeroed: only what a decode wrote is read (fifoCount), and a slot that
        // never plays leaves its pages untouched (PacketRing's payloads likewise).
        fifo = .allocate(capacity: RemoteSlot.fifoCapacity * 2)
        tap = .allocate(capacity: RemoteSlot.tapCapacity * 2)
        tap.initialize(repeating: 0, count: RemoteSlot.tapCapacity * 2)
    }

    deinit { fifo.deallocate(); tap.deallocate() }

    /// One codec frame (maxFrameSamples, stereo) as int16 and as float, for
    /// `render(scratch:)`; its owner deallocates it.
    struct Scratch {
        let int16: UnsafeMutablePointer<Int16>
        let float: UnsafeMutablePointer<Float>
        /// The other side of a denoiser's cross-fade (int16 stereo, one codec frame).
        let crossFade: UnsafeMutablePointer<Int16>

        init() {
            int16 = .allocate(capacity: RemoteSlot.maxFrameSamples * 2)
            int16.initialize(repeating: 0, count: RemoteSlot.maxFrameSamples * 2)
            float = .allocate(capacity: RemoteSlot.maxFrameSamples * 2)
            float.initialize(repeating: 0, count: RemoteSlot.maxFrameSamples * 2)
            crossFade = .allocate(capacity: RemoteSlot.maxFrameSamples * 2)
            crossFade.initialize(repeating: 0, count: RemoteSlot.maxFrameSamples * 2)
        }

        func deallocate() { int16.deallocate(); float.deallocate(); crossFade.deallocate() }
    }

    /// Prepares the slot for a new stream (network thread, lock held by caller).
    func configure(_ r: RemoteStream, username: String) {
        active = true
        ssrc = r.ssrc; userID = r.userID; streamID = r.streamID; kind = r.kind
        channels = r.audio.channels
        dredWanted = r.audio.dred && dred.isActive
        frameSamples = r.audio.frameSamples
        self.username = username
        settings = RemoteSettings()
        appliedGain = .nan
        duplicates.store(0, ordering: .relaxed)
        inbox.reset()
        noiseReducer = nil
        playingReducer = nil
        retiredReducer = nil
        reducerPrimed = false
        glide?.reset()
        jitter.reset(frameSamples: frameSamples)
        // A missing frame can be rebuilt from its successor: by DRED, or by in-band
        // FEC where the successor's header says it carries it (senders switch FEC
        // with the loss their listeners report, so the channel's setting says little).
        jitter.recoveryAvailable = dredWanted
        lossMeter.reset(frameSamples: frameSamples)
        overflowsSeen = 0
        reportHold = 0
        decoder.setChannels(channels)   // a mono stream decodes mono: cheaper
        fifoRead = 0; fifoCount = 0; lastDecodeSilent = true; lastBlockQuiet = false
        replay = ReplayWindow()
        lastVoiceFrameMs.store(0, ordering: .relaxed)
        talking = false
        spurtsStarted.store(0, ordering: .relaxed); spurtsEnded.store(0, ordering: .relaxed); spurtEndNs.store(0, ordering: .relaxed)
        seenStarted = 0; seenEnded = 0
        level = BlockLevel()
        levelAtNs = 0
    }

    /// Moves the frames the network thread handed over into the jitter buffer (lock
    /// held by caller: the renderer at `nowMs`, or, nil, a host thread reading
    /// statistics or the media input's token holder finding the inbox full). A renderer that has not ticked for a while has stalled: the buffer's clock
    /// goes on first (JitterBuffer.catchUp), to the render's time, or, for a reader of
    /// statistics, to the newest arrival's (the receive clock).
    func drainInbox(nowMs: Double?) {
        if let t = nowMs {
            jitter.catchUp(toMs: t)
        } else if let t = inbox.lastArrivalMs {
            jitter.catchUp(toMs: t, ticking: false)
        }
        // A stream's first frames: the buffer starts with the session's lateness.
        if jitter.awaitsPrior, let first = inbox.firstArrivalMs { lateness.seed(jitter, arrivalMs: first) }
        inbox.drain { e, payload in
            lossMeter.record(seq: e.seq, timestamp: e.timestamp)
            jitter.insert(seq: e.seq, timestamp: e.timestamp, flags: e.flags, payload: payload, arrivalMs: e.arrivalMs)
        }
    }

    /// Closes a report interval (network thread, lock held): what to report of this
    /// stream over the window, or nil (nothing arrived, or the inbox dropped frames).
    func closeLossInterval() -> LossCounts? {
        let counts = lossMeter.closeInterval()
        let overflows = inbox.overflows.load(ordering: .relaxed)
        if overflows != overflowsSeen {
            overflowsSeen = overflows
            reportHold = lossMeter.windowBuckets
        }
        if reportHold > 0 { reportHold -= 1; return nil }
        return counts.expected > 0 ? counts : nil
    }

    /// Decodes until `frames` are buffered, then adds them (scaled) to the bus.
    /// `nowMs`: the monotonic time of this render. `tap`: also copy the block, before
    /// gain and mute, into the per-speaker tap (frames ≤ tapCapacity; the caller holds
    /// the render lock). `fixedBlock`: a driver renders blocks of one length (a pull
    /// renders what the host asks for). `scratch`: the renderer's buffers of one codec
    /// frame, which every slot decodes into in turn: they stay in cache, where a
    /// buffer per slot would be cold at each decode. Leaves blockPlayed and
    /// blockTalkEdge set. Lock held by caller.
    func render(into bus: MixBus, frames: Int, nowMs: Double, scratch: Scratch, tap tapWanted: Bool = false, fixedBlock: Bool = false) {
        drainInbox(nowMs: nowMs)
        // Decoded audio left past a whole number of blocks (the block length changed,
        // or a host's pulls of other sizes came before the driver) would delay this
        // stream by that much for as long as it lives. Once it is silence (the last
        // frame decoded was, and nothing older is left) it is dropped: nothing is heard
        // missing, and the stream plays at the block's start again. (Frames and blocks
        // divide one another: every frame length is 2.5–60 ms, every block 10 or 20.)
        // (What is dropped must be silent too: a denoiser's output for a silent frame
        // still carries the last ~10 ms of speech; it is dropped a block later.)
        if fixedBlock && lastDecodeSilent && fifoCount <= frameSamples && fifoCount % frames != 0
            && fifoIsSilent(frames: fifoCount % frames) {
            let stray = fifoCount % frames
            fifoRead = (fifoRead + stray) % RemoteSlot.fifoCapacity
            fifoCount -= stray
        }
        // A host's pulls shorter than a frame hand out each decoded frame over several
        // pulls, and the buffer ticks when the FIFO runs dry: at a phase of the pulls
        // nobody picked, so a talkspurt's first frame waited up to a frame more than its
        // cushion. Between talkspurts the rest of a silent frame is not heard: when the
        // first frame waiting has its start's cushion by now, that rest is dropped and
        // the buffer ticks at this pull (told by moveClock), which plays what it decides
        // at once (a card's driver cuts its block of silence the same way). Digital
        // silence only (not comfort noise, not a denoiser's tail).
        if !fixedBlock && lastDecodeSilent && fifoCount > 0 && fifoCount < frameSamples {
            if fifoCount <= jitter.startEarlySamples && fifoIsSilent(frames: fifoCount) {
                jitter.moveClock(earlierByMs: Double(fifoCount) / 48)
                fifoRead = (fifoRead + fifoCount) % RemoteSlot.fifoCapacity
                fifoCount = 0
            }
        }
        blockPlayed = PlayedBlock(talking: jitter.talking)
        blockTalkEdge = false
        let gain: Float = settings.muted ? 0 : settings.gain
        // A gain or mute set since the last block moves there over this one, not at a sample.
        let ramp: GainRamp? = appliedGain.isNaN || appliedGain == gain ? nil : GainRamp(from: appliedGain, to: gain, frames: frames)
        appliedGain = gain
        let tapping = tapWanted && frames <= RemoteSlot.tapCapacity
        // The block's level: the sum of its squares and its largest magnitude (full scale 1).
        var sumSquares: Double = 0
        var peak: Float = 0
        if fifoCount == 0 && frameSamples == frames && noiseReducer == nil && playingReducer == nil && glide?.isIdle ?? true {
            // One codec frame is the block: decoded as float (the int16 API decodes to
            // float too, then soft-clips and converts) and mixed from there; the bus
            // limits the mix.
            decodeNext(into: .float(scratch.float), nowMs: nowMs, block: frames, scratch: scratch)
            if !lastDecodeSilent {
                mixFloat(scratch.float, frames: frames, channels: decoder.channels, into: bus, gain: gain, ramp: ramp, tapping: tapping,
                         sumSquares: &sumSquares, peak: &peak)
            } else if tapping {
                // Silence adds nothing to the bus and the level: only the tap is written.
                tap.update(repeating: 0, count: frames * 2)
            }
        } else if fifoCount == 0 && frameSamples == frames {
            // The same as int16, which the listener's noise reducer takes (a silent
            // frame is mixed too: the reducer's output carries its last window's tail).
            decodeNext(into: .int16(scratch.int16), nowMs: nowMs, block: frames, scratch: scratch)
            mixPiece(scratch.int16, frames: frames, at: 0, into: bus, gain: gain, ramp: ramp, tapping: tapping, sumSquares: &sumSquares,
                     peak: &peak)
        } else {
            while fifoCount < frames {
                decodeNext(into: .int16(scratch.int16), nowMs: nowMs, block: frames, scratch: scratch)
                pushFIFO(scratch.int16, frames: frameSamples)
            }
            // Up to two contiguous pieces of the ring.
            var left = frames
            while left > 0 {
                let run = min(left, RemoteSlot.fifoCapacity - fifoRead)
                mixPiece(fifo + fifoRead * 2, frames: run, at: frames - left, into: bus, gain: gain, ramp: ramp, tapping: tapping,
                         sumSquares: &sumSquares, peak: &peak)
                fifoRead = (fifoRead + run) % RemoteSlot.fifoCapacity
                fifoCount -= run
                left -= run
            }
        }
        level = BlockLevel(rms: frames > 0 ? min(Float((sumSquares / Double(frames * 2)).squareRoot()), 1) : 0, peak: min(peak, 1))
        blockPlayed.heard(peak: peak)   // (a tail of speech beside another stream's comfort noise is not cut)
        let quiet = peak < RemoteSlot.quietPeak
        jitter.reportPlayedLevel(quiet: quiet && lastBlockQuiet)
        lastBlockQuiet = quiet
        levelAtNs = UInt64(max(0, nowMs) * 1e6)   // the render's time: no clock read per stream
        if tapping {
            tapFrames = frames
            tapSSRC = ssrc
            tapUserID = userID
            tapKind = kind
        }
    }

    /// Whether the oldest `frames` frames of the FIFO are silent (DigitalSilence).
    private func fifoIsSilent(frames: Int) -> Bool {
        for k in 0..<frames {
            let i = (fifoRead + k) % RemoteSlot.fifoCapacity
            if abs(Int(fifo[2 * i])) > DigitalSilence.peak || abs(Int(fifo[2 * i + 1])) > DigitalSilence.peak { return false }
        }
        return true
    }

    /// Decodes the next codec frame into `decoded` (mono as L = R, listener NR applied
    /// to int16) for a render of `block` frames.
    private func decodeNext(into decoded: DecodedFrame, nowMs: Double, block: Int, scratch: Scratch) {
        let n = frameSamples
        let before = PlayedBlock.Before(jitter)
        let playout = decoder.playNext(from: jitter, dred: dredWanted ? dred : nil, frames: n, nowMs: nowMs, into: decoded)
        let silentBefore = lastDecodeSilent
        lastDecodeSilent = playout == .silence
        blockPlayed.add(jitter, playout, before: before, blockSamples: block)
        // A mono stream decodes mono (L = R by construction, whatever its packets say):
        // int16 is widened to stereo in place, from the end (NR, the FIFO and the tap
        // take stereo); float stays mono and is added to both channels (mixFloat).
        if decoder.channels == 1, case .int16(let p) = decoded {
            var i = n - 1
            while i >= 0 { let v = p[i]; p[2 * i + 1] = v; p[2 * i] = v; i -= 1 }
        }
        switch jitter.talkEdge {
        case .started:
            spurtsStarted.wrappingAdd(1, ordering: .releasing)
            blockTalkEdge = true
        case .ended:
            blockTalkEdge = true
            spurtEndNs.store(MonotonicClock.nanoseconds(), ordering: .relaxed)
            spurtsEnded.wrappingAdd(1, ordering: .releasing)
        case .startedAndEnded:
            blockTalkEdge = true
            spurtsStarted.wrappingAdd(1, ordering: .releasing)
            spurtEndNs.store(MonotonicClock.nanoseconds(), ordering: .relaxed)
            spurtsEnded.wrappingAdd(1, ordering: .releasing)
        case .none: break
        }
        // Listener-side NR: after decode, before gain and mixing (render decodes int16
        // for a stream that has it).
        // (A slot that never had a denoiser has no glide: it is built with the first one.)
        if case .int16(let p) = decoded, let g = glide {
            denoise(p, frames: n, silent: silentBefore && lastDecodeSilent, glide: g, other: scratch.crossFade)
        }
    }

    /// The listener's denoiser on the decoded frame `p` (stereo int16), and its switches.
    /// The denoiser works on 10 ms windows and its output comes that much after its input
    /// (`blockSize`), so the stream must move 10 ms later when it is switched on while the
    /// stream plays, and 10 ms earlier when it is switched off: a jump there paused the
    /// stream or skipped 10 ms, and a cross-fade between the stream and itself 10 ms
    /// apart is a comb for that frame (a 450 Hz tone, 4.5 periods, cancels). On: the
    /// stream glides to the delay (read 2 % slower, 500 ms for 10 ms: `glide`), the denoiser
    /// running unheard on the decoded audio meanwhile; then its output, on the same
    /// timeline, is cross-faded in over a frame. Off: its output is cross-faded out to the
    /// decoded audio as late, which then glides back. Nothing is dropped or heard twice.
    /// Where the stream is silent (`silent`: this frame and the one before decoded as
    /// silence, outside any talkspurt) the lag moves at once: a denoiser switched on
    /// before a stream talks, or in its pauses, is heard from its second frame. A
    /// denoiser faded out is kept for the control path to free. `other`: a frame of
    /// scratch for the denoiser's output.
    private func denoise(_ p: UnsafeMutablePointer<Int16>, frames n: Int, silent: Bool, glide g: LagGlide,
                         other y: UnsafeMutablePointer<Int16>) {
        if let r = playingReducer {
            g.push(p, frames: n)   // the decoded audio, for a switch off
            if r === noiseReducer {
                r.process(p, frames: n)
                return
            }
            // Off (or replaced): from its output to the decoded audio as late.
            y.update(from: p, count: n * 2)
            r.process(y, frames: n)
            g.read(into: p, frames: n)
            CrossFade.apply(from: y, to: p, frames: n, channels: 2)
            retiredReducer = r
            playingReducer = nil
            reducerPrimed = false
            if noiseReducer == nil { g.glide(to: 0, perSample: RemoteSlot.glideRate) }
            return
        }
        g.push(p, frames: n)
        guard let new = noiseReducer else {
            // Off: back to the decoded audio's own time, if it is not there yet.
            if !g.isIdle {
                if g.target != 0 { g.glide(to: 0, perSample: RemoteSlot.glideRate) }
                if silent { g.jump(to: 0) }
                g.read(into: p, frames: n)
            }
            return
        }
        // On: the denoiser runs unheard while the stream glides to its delay; once the
        // whole frame is read at the delay, its output fades in.
        let delay = new.blockSize
        let atDelay = g.lag == Double(delay) && !g.isMoving
        y.update(from: p, count: n * 2)
        new.process(y, frames: n)
        if g.target != Double(delay) { g.glide(to: delay, perSample: RemoteSlot.glideRate) }
        if silent && g.isMoving { g.jump(to: delay) }
        g.read(into: p, frames: n)
        if atDelay && reducerPrimed {
            CrossFade.apply(from: p, to: y, frames: n, channels: 2)
            p.update(from: y, count: n * 2)
            playingReducer = new
        }
        reducerPrimed = true   // it has run a frame (its window filled)
    }

    /// Adds a float frame (full scale ±1.0; mono or stereo) to the bus (scaled), to the
    /// tap (stereo, rounded and clipped to int16), and to the block's level (a mono
    /// frame counts as L = R). The float decoder does not clip: the frame is first
    /// bounded to ±2 in place, as the int16 API does before its soft clip, so one
    /// stream's overshoot (or a hostile sender's) cannot swamp the bus's limiter.
    private func mixFloat(_ piece: UnsafeMutablePointer<Float>, frames run: Int, channels: Int, into bus: MixBus, gain: Float, ramp: GainRamp?,
                          tapping: Bool, sumSquares: inout Double, peak: inout Float) {
        let count = run * channels
        // Eight lanes at a time (a scalar Float sum or max would not vectorize: its
        // order may not change; `replacing` lowers to a compare and blend).
        let raw = UnsafeMutableRawPointer(piece)
        let top = SIMD8<Float>(repeating: 2), bottom = SIMD8<Float>(repeating: -2)
        var squares = SIMD8<Float>(), hi = SIMD8<Float>(), lo = SIMD8<Float>()
        var i = 0
        while i + 8 <= count {
            let at = i &* MemoryLayout<Float>.stride
            var v = raw.loadUnaligned(fromByteOffset: at, as: SIMD8<Float>.self)
            // Each bound compares the value it bounds (a select on its own operand
            // lowers to one minps / maxps; comparing the unbounded value does not).
            v = v.replacing(with: top, where: v .> top)
            v = v.replacing(with: bottom, where: v .< bottom)
            raw.storeBytes(of: v, toByteOffset: at, as: SIMD8<Float>.self)
            squares += v * v
            hi = hi.replacing(with: v, where: v .> hi)
            lo = lo.replacing(with: v, where: v .< lo)
            i += 8
        }
        var s = Double(squares.sum())
        var p = max(hi.max(), -lo.min())
        while i < count {
            let x = max(-2, min(2, piece[i]))
            piece[i] = x
            s += Double(x * x)
            p = max(p, abs(x))
            i += 1
        }
        sumSquares += channels == 1 ? 2 * s : s
        peak = max(peak, p)
        if let ramp {
            bus.add(piece, frames: run, mono: channels == 1, ramp: ramp)
        } else if gain != 0 {
            if channels == 1 { bus.addMono(piece, frames: run, gain: gain) } else { bus.add(piece, frames: run, gain: gain) }
        }
        if tapping {
            if channels == 1 {
                for i in 0..<run { let v = int16Sample(piece[i]); tap[2 * i] = v; tap[2 * i + 1] = v }
            } else {
                for i in 0..<count { tap[i] = int16Sample(piece[i]) }
            }
        }
    }

    /// Adds `frames` of `piece` at block offset `at` to the bus (scaled), to the tap,
    /// and to the block's level sums.
    private func mixPiece(_ piece: UnsafeMutablePointer<Int16>, frames run: Int, at offset: Int, into bus: MixBus, gain: Float, ramp: GainRamp?,
                          tapping: Bool, sumSquares: inout Double, peak: inout Float) {
        if let ramp { bus.add(piece, frames: run, ramp: ramp, at: offset) } else if gain != 0 { bus.add(piece, frames: run, gain: gain, at: offset) }
        if tapping { (tap + offset * 2).update(from: piece, count: run * 2) }
        // Exact integer sums in two loops the compiler vectorizes: a stereo pair's
        // squares fit in a UInt32 (2 × 2^30), summed into a UInt64; the extremes as
        // Int16 (a single loop with an Int64 sum of each square ran twice as long).
        var s: UInt64 = 0
        for i in 0..<run {
            let l = Int32(piece[2 * i]), r = Int32(piece[2 * i + 1])
            s &+= UInt64(UInt32(bitPattern: l &* l) &+ UInt32(bitPattern: r &* r))
        }
        var hi: Int16 = 0, lo: Int16 = 0
        for i in 0..<(run * 2) {
            hi = max(hi, piece[i])
            lo = min(lo, piece[i])
        }
        sumSquares += Double(s) / (32768 * 32768)
        peak = max(peak, Float(max(Int32(hi), 0 &- Int32(lo))) / 32768)
    }

    private func pushFIFO(_ src: UnsafeMutablePointer<Int16>, frames: Int) {
        var write = (fifoRead + fifoCount) % RemoteSlot.fifoCapacity
        var i = 0
        while i < frames {
            let run = min(frames - i, RemoteSlot.fifoCapacity - write)
            (fifo + write * 2).update(from: src + i * 2, count: run * 2)
            write = (write + run) % RemoteSlot.fifoCapacity
            i += run
        }
        fifoCount += frames
    }

    /// Buffered audio in ms (jitter buffer plus decoded FIFO).
    var depthMs: UInt32 { UInt32(jitter.depthMs + Double(fifoCount) / 48) }
    var targetMs: UInt32 { UInt32(jitter.targetMs) }
}
