// A published stream: reframer, a bounded queue paced in talkspurts, send
// processing, input gate, Opus encoder, header flags, seal, send. Driven under its
// slot's lock (the only lock a sent frame takes, see SendPath.swift) by whichever
// thread feeds it (vc_stream_feed_pcm, its capture thread) and by the client's
// pacer thread for frames that are not due yet. Nothing here allocates per frame.
//
// The time model of fed audio (issue: hosts feed any amount at any time):
//   * Fed PCM is reframed to the channel's frame size and queued (at most
//     `maxQueueSamples`, the partial frame included; past it a feed is refused whole,
//     nothing queued is lost).
//   * A talkspurt starts when a frame is complete and none is running. Frame k of a
//     talkspurt is sent at max(the moment it is complete, anchor + k × frame): a
//     host feeding in real time gets no added delay, a host feeding a whole file
//     gets it paced at real time. A late frame goes out at once and leaves the
//     schedule alone; the first frame a call completes (or a lone frame) at most
//     `driftSlackNs` early (a host whose clock runs a little fast) goes out at once
//     and moves the schedule earlier, so pacing never accumulates delay. A host
//     slower than real time (a feed-then-sleep loop; a slow capture clock) falls
//     behind the schedule: once even the least lateness of its feeds (`hostLag`: when
//     its newest sample came against the schedule, to the sample, so a block's phase
//     against the frames does not count) over the frames of the last
//     `lagWindowFrames` to twice that is a whole frame more than the least of any
//     earlier window of the talkspurt, the stream skips a frame's time (the timestamp
//     advances by two frames, the seq by one; not on a frame that carries the marker,
//     and at most one in `skipSpacingFrames`), so listeners conceal one frame at that
//     place instead of taking ever later frames for network jitter (their delay grew
//     by hundreds of ms). A constant lateness (a resampler's start-up delay, a stall
//     whose phase the host keeps) is not growth; late blocks for less than a window
//     are not either.
//   * A real-time host whose blocks are not whole frames (30 ms blocks, 20 ms frames)
//     completes frames unevenly: a block brings one frame or two, so frame k is
//     complete up to a frame's time after its slot counted from the first (blocks
//     shorter than a frame that do not divide it, 512-sample periods, fall unevenly
//     too). Sent as they complete, that unevenness is jitter every listener must
//     learn, and a new stream's first talkspurt, which plays with no cushion, conceals
//     a frame to learn it. The sender knows it exactly from the block's length: a
//     talkspurt's first frame is held, from the call that completes it, by the worst
//     of it (`startHoldNs`; at 48 kHz less than a frame: 10 ms for 30 ms blocks, 8 ms
//     for 512-sample blocks, 0 for blocks of whole frames or that divide a frame, and
//     for calls of more than 100 ms, more likely a sentence than a period; a
//     resampled stream keeps its resampler's filter delay, so blocks of whole frames
//     at another rate give whole frames too), and every frame then leaves in its
//     slot; the talkspurt's timestamps
//     start at its held anchor. The delay is the one listeners held before, moved to
//     where it is known. (A block fed in pieces is reckoned again with each piece
//     while the first frame is held; when a piece before the last completes a frame
//     unheld, the talkspurt is not held. A talkspurt started by a block that came late
//     after a dry end is not held. The fast-clock follow below takes later blocks to
//     be as long as the one the hold was reckoned from; a host whose blocks vary is
//     followed back toward sending frames as they complete, as before.)
//   * A real-time host's next block is expected when the last one's audio has
//     passed (`blockEndNs`; blocks of any length, whole frames or not; calls that
//     follow each other within `splitCallNs` are one block fed in pieces). When the
//     queue is dry and the later of that and a frame past the last
//     frame taken has passed by a small slack, the talkspurt ends: the partial
//     frame is padded and sent with the last-frame flag. The slack follows how late
//     this host's blocks come against their expected time (5 ms for a steady
//     feeder, up to 40 ms for a jittery one), so a steady host's listeners learn of
//     the pause within a few ms and a jittery host's talkspurts are not cut. Measured
//     against the host's own last block, a host whose clock runs slow is never
//     taken for late. After a call of more than a second (a whole file, a sentence)
//     the host is not waited for once that audio is sent: its padded frame leaves on
//     time (unless the host was seen to feed such blocks in real time: its next
//     block came right after such an end). The next audio starts a new talkspurt
//     with the marker, and its timestamp advances by the wall-clock time that
//     passed, so receivers see a pause, not jitter (a block that came within 40 ms
//     after the talkspurt was ended waiting for it is paced from when it was due, not
//     before the last talkspurt's last frame, and its timestamps continue right after
//     that talkspurt: a late block's successors, on time, must not be held back).
//   * Fed PCM at another rate than 48 kHz (vc_stream_desc.sample_rate) is resampled
//     before the reframer, by a converter per input channel count built with the
//     stream; float PCM is converted to int16 in a preallocated chunk first.
//   * DTX: the encoder's comfort-noise updates during silence are sent (flagged
//     DTX), its empty frames are not. SCREEN_AUDIO and AUX_DEVICE streams on a
//     channel without DTX stop sending after `zeroGateMs` of digital silence (a
//     zero gate) and resume with the marker.
import Glibc
import VoiceCatABI
import VoiceCatAudio
import VoiceCatProtocol
import VoiceCatSystem

final class LocalStream {
    static let defaultMaxQueueMs = 10_000
    /// Capture streams are fed in real time: a small queue is enough.
    static let captureQueueMs = 400
    static let minDrySlackNs: UInt64 = 5_000_000
    static let maxDrySlackNs: UInt64 = 40_000_000
    static let driftSlackNs: UInt64 = 2_000_000
    /// A call bringing more audio than this is taken for a whole file or sentence,
    /// not a real-time host's block (those are 2.5..a few hundred ms; one that feeds
    /// longer blocks in real time shows it at its first block boundary).
    static let longFeedNs: UInt64 = 1_000_000_000
    static let zeroGateMs = 200

    let streamID: UInt32
    /// Changes only under the slot lock (a reconnect gives the stream a new ssrc).
    var ssrc: UInt32
    let kind: StreamKind
    let externalFeed: Bool
    let audio: AudioConfig
    var inputChannels: Int
    /// Fed streams: the rate of the PCM the host feeds. Device streams: the rate asked
    /// of the capture device (the capture worker converts what the device gives).
    let inputRate: Int
    /// Fed streams at another rate than 48 kHz: one resampler to 48 kHz, in the
    /// channel's layout. Fed PCM in the other layout is first put in the channel's
    /// (`relayout`: channels only, at the input rate), so a host may switch between
    /// mono and stereo calls without the resampler's state breaking (one resampler per
    /// input layout, as before, each saw only the calls of its layout: alternating
    /// calls came out as noise, a switch cut a few ms).
    private let resampler: FormatConverter?
    private let relayout: FormatConverter?
    /// Float feeds are converted to int16 here first, a chunk at a time.
    static let floatChunk = 960
    private let floatScratch: UnsafeMutablePointer<Int16>
    let reframer: Reframer
    let encoder: OpusEncoderBox
    private let opusBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: MediaLimits.maxDatagramBytes - MediaLimits.overheadBytes, alignment: 16)
    private let sealBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: MediaLimits.maxDatagramBytes,
                                                                    alignment: 16)
    /// The encoder's packet limit: what fits the server's datagram limit (set by the
    /// session under the slot lock; a reconnect may change it).
    var maxOpusBytes = MediaLimits.maxOpusBytes(serverLimit: 0)
    private let silence: UnsafeMutablePointer<Int16>
    /// Scratch for the processed copy of a frame.
    private let processed: UnsafeMutablePointer<Int16>
    private(set) var seq: UInt64 = 0
    private var needMarker = true
    /// The slot it lives in (its lock guards everything here) and the table's shared parts.
    unowned let slot: StreamSlot
    unowned let table: StreamTable
    /// MIC streams only: VAD / push-to-talk.
    private var gate = InputGate()
    /// The level of the last frame after send processing, before the gate, and when.
    private(set) var level = BlockLevel()
    private(set) var levelAtNs: UInt64 = 0
    /// The device capture feeding this stream (nil for external feed).
    var capture: CaptureWorker?
    var device: String?
    /// Its device was away (its VC_EVENT_ERROR raised, not yet DEVICE_RESTORED) when its
    /// capture last ended; the next capture started pairs it (deviceLock, as `capture`).
    var captureAway = false
    /// Talker-side processing (MIC streams on mono channels); swapped under the slot lock.
    var apm: SpeexApm?
    /// This stream's read position in the played mix (echo cancellation).
    var farCursor = FarEndRing.Cursor()
    /// The encoder's loss protection, driven by the server's loss feedback (issue #16).
    private(set) var fecPolicy: FECPolicy
    /// Frames sent, those that carried FEC, and their datagram bytes.
    private(set) var packetsSent: UInt64 = 0
    private(set) var fecPacketsSent: UInt64 = 0
    private(set) var bytesSent: UInt64 = 0
    private let farBlock = UnsafeMutablePointer<Int16>.allocate(capacity: 480)

    // The queue: whole frames in the channel's layout.
    private let queue: UnsafeMutablePointer<Int16>
    let maxQueueFrames: Int
    /// The bound in 48 kHz samples, the partial frame included (max_queue_ms exactly,
    /// at least two frames): what vc_stream_queued_ms can reach.
    private let maxQueueSamples: Int
    private var queueHead = 0
    private(set) var queuedFrames = 0
    private var frameLength: Int { audio.frameSamples * audio.channels }
    private let frameNs: UInt64

    // The talkspurt clock.
    /// How late the host's blocks come against the end of the last one's audio (a
    /// peak decaying with `latePeakDecayNs`, ns).
    private var feedLatePeakNs: Double = 0
    static let latePeakDecayNs = 4e9
    var drySlackNs: UInt64 {
        guard externalFeed else { return LocalStream.captureDrySlackNs }
        return min(LocalStream.maxDrySlackNs, max(LocalStream.minDrySlackNs, UInt64(feedLatePeakNs * 1.5)))
    }
    /// A capture device's stream is a continuous clock whose talkspurts the input gate
    /// ends: a read that comes late (the capture thread not scheduled, a slow plugin)
    /// finds the audio waiting in the device's buffer (four 20 ms periods), so it is
    /// no pause. Its talkspurt ends dry only once the device has stopped delivering
    /// for longer than that buffer (it failed, or it overran and lost audio). With a
    /// host's slack (5 ms for a steady one) a read 15 ms late ended the talkspurt in
    /// mid-word, in CONTINUOUS mode too: a padded hole, then a new talkspurt whose
    /// timestamp jumped (helper-86).
    static let captureDrySlackNs: UInt64 = 100_000_000
    private var inSpurt = false
    private var anchorNs: UInt64 = 0
    /// When the call that started this talkspurt came (0: the talkspurt is not held,
    /// `startHoldNs`), moved with the schedule for a fast host clock; the block length
    /// and the audio of that call the hold was reckoned from. A block fed in pieces
    /// reckons it again with each piece while the first frame is held.
    private var heldSinceNs: UInt64 = 0
    private var heldBlockNs: UInt64 = 0
    private var heldAudioNs: UInt64 = 0
    /// When the last frame was taken from the queue (sent or gated).
    private var lastTakenNs: UInt64 = 0
    /// When the host last fed this stream (after the call's audio was queued; 0:
    /// never, or flushed since).
    private var lastFedNs: UInt64 = 0
    /// The host's current block (one call, or calls that followed each other within
    /// `splitCallNs`): its audio (ns), and when that audio ends counted from the
    /// block's first call: a real-time host's next block is due then.
    private var blockNs: UInt64 = 0
    private var blockEndNs: UInt64 = 0
    /// When the current block's first call came.
    private var blockStartNs: UInt64 = 0
    static let splitCallNs: UInt64 = 1_000_000
    /// The last talkspurt ended by the dry rule, waiting for this host's next block.
    private var endedDry = false
    /// When a talkspurt last ended without waiting after a long call (0: it did not).
    private var endedUnwaitedNs: UInt64 = 0
    /// This host feeds long blocks at real time: its next block came within the slack
    /// of a talkspurt ended without waiting. From then on it always gets the slack.
    private var pacesLongBlocks = false
    /// Frames taken from the queue in this talkspurt (sent or gated), and the frame
    /// times skipped for a host slower than real time.
    private var spurtFrames: UInt64 = 0
    /// The host's lateness at its last feed (`hostLag`), and the least of it over the
    /// frames taken in this talkspurt's current window of `lagWindowFrames` and in the
    /// window before, and the least of any window so far, the talkspurt's baseline
    /// (.max: none yet).
    static let lagWindowFrames = 25
    static let skipSpacingFrames: UInt64 = 5
    private var hostLagNs: UInt64 = 0
    private var lagMinNs: UInt64 = .max
    private var lagMinBeforeNs: UInt64 = .max
    private var lagBaselineNs: UInt64 = .max
    private var lagFrames = 0
    /// The first frame of the talkspurt that may skip a frame's time.
    private var skipAllowedAt: UInt64 = 0
    /// Frame times skipped because the host fell a frame behind real time.
    private(set) var framesSkipped: UInt64 = 0
    /// Frames taken from the queue to be sent, over the stream's life.
    private(set) var framesTaken: UInt64 = 0
    /// Frames that came due while there was no media path (an automatic reconnect's
    /// gap): dropped, not sent (vc_send_stats.frames_dropped). And that count when the
    /// host last fed an empty queue: what vc_stream_drain reports lost of the audio it
    /// waits for.
    private(set) var framesLostNoPath: UInt64 = 0
    private var lostBeforeBatch: UInt64 = 0
    /// The same two counts less talkspurts' closing frames of silence alone (no audio
    /// fed in them): what vc_stream_drain reports of the audio fed.
    private var fedLostNoPath: UInt64 = 0
    private var fedSentPathLost: UInt64 = 0
    /// The frame being sent is such a closing frame (endSpurt).
    private var sendingClosingSilence = false
    /// Frames of the audio fed since the queue was last empty that were dropped for
    /// want of a media path.
    var framesLostSinceIdle: UInt64 { fedLostNoPath - lostBeforeBatch }
    /// Frames sent while the media path was lost (SendSnapshot.pathLost): most likely
    /// unheard (vc_send_stats.frames_sent_path_lost); and since the queue was last empty.
    private(set) var framesSentPathLost: UInt64 = 0
    /// Its capture devices' overruns and failures (vc_send_stats.device_overruns,
    /// device_failures), counted by the capture thread under the slot lock.
    var deviceOverruns: UInt64 = 0
    var deviceFailures: UInt64 = 0
    private var sentPathLostBeforeBatch: UInt64 = 0
    var framesSentPathLostSinceIdle: UInt64 { fedSentPathLost - sentPathLostBeforeBatch }
    private var spurtTimestamp: UInt32 = 0
    /// Where the next talkspurt's timestamps continue from: the timestamp and the
    /// nominal time of the frame after the last one taken.
    private var resumeTimestamp: UInt32 = 0
    private var resumeNs: UInt64 = 0
    /// A talkspurt has ended: `resumeTimestamp` and `resumeNs` hold where the next one
    /// continues from (before it, the stream's first talkspurt starts the timestamps).
    private var spurtEverEnded = false
    /// `framesSkipped` when this talkspurt started.
    private var skippedBeforeSpurt: UInt64 = 0
    /// The last packet sent carried the last-frame flag (or nothing was sent yet).
    private var packetSpurtClosed = true
    /// Consecutive samples (per channel) of digital silence (zero gate).
    private var zeroRun = 0
    private var zeroGated = false

    init(streamID: UInt32, ssrc: UInt32, kind: StreamKind, externalFeed: Bool, inputChannels: Int, audio: AudioConfig,
         maxQueueMs: Int = LocalStream.defaultMaxQueueMs, inputRate: Int = 48000, resamplerQuality: Int = FormatConverter.defaultQuality,
         slot: StreamSlot, table: StreamTable) throws {
        self.streamID = streamID; self.ssrc = ssrc; self.kind = kind; self.externalFeed = externalFeed
        self.slot = slot; self.table = table
        self.inputChannels = inputChannels
        self.inputRate = inputRate
        self.audio = audio
        do { encoder = try OpusEncoderBox(config: audio) } catch { throw ClientError.codec("\(error)") }
        if externalFeed && inputRate != 48000 {
            // The filter delay is kept, not skipped: every block then gives as much
            // audio as it brings (at 1-2 ms more delay), so a real-time host's blocks
            // of whole frames complete whole frames from the first one. Skipped, the
            // first block came out short of its frames by the delay, every frame was
            // complete a block after its slot counted from the first, and the
            // talkspurt was held a frame for it (40 ms blocks) or started a block late.
            do {
                resampler = try FormatConverter(inRate: inputRate, outRate: 48000, inChannels: audio.channels, outChannels: audio.channels,
                                                maxInFrames: LocalStream.floatChunk, quality: resamplerQuality)
                relayout = try FormatConverter(inRate: inputRate, outRate: inputRate, inChannels: 3 - audio.channels,
                                               outChannels: audio.channels, maxInFrames: LocalStream.floatChunk)
            } catch { throw ClientError.invalidArgument("\(error)") }
        } else {
            resampler = nil
            relayout = nil
        }
        floatScratch = .allocate(capacity: LocalStream.floatChunk * 2)
        floatScratch.initialize(repeating: 0, count: LocalStream.floatChunk * 2)
        fecPolicy = FECPolicy(fec: audio.fec, expectedLoss: Int(audio.expectedPacketLoss))
        reframer = Reframer(frameSamples: audio.frameSamples, channels: audio.channels)
        let frameLength = audio.frameSamples * audio.channels
        silence = .allocate(capacity: frameLength)
        silence.initialize(repeating: 0, count: frameLength)
        processed = .allocate(capacity: frameLength)
        processed.initialize(repeating: 0, count: frameLength)
        frameNs = UInt64(audio.frameMicros) * 1000
        let queueMs = externalFeed ? maxQueueMs : LocalStream.captureQueueMs
        maxQueueFrames = max(2, (queueMs * 1000 + Int(audio.frameMicros) - 1) / Int(audio.frameMicros))
        maxQueueSamples = max(2 * audio.frameSamples, queueMs * 48)
        queue = .allocate(capacity: maxQueueFrames * frameLength)
        queue.initialize(repeating: 0, count: maxQueueFrames * frameLength)
    }

    deinit {
        opusBuffer.deallocate(); sealBuffer.deallocate(); silence.deallocate(); processed.deallocate(); farBlock.deallocate()
        queue.deallocate(); floatScratch.deallocate()
    }

    // MARK: feeding and pacing (slot lock held by the caller)

    /// Audio queued and not yet sent (whole frames plus the partial one), in ns and ms.
    private var queuedAudioNs: UInt64 {
        UInt64(queuedFrames) &* frameNs &+ UInt64(reframer.pending) &* 1_000_000_000 / 48000
    }
    var queuedMs: UInt32 { UInt32(queuedAudioNs / 1_000_000) }

    /// True when everything fed has been sent (the partial frame too).
    var isDrained: Bool { queuedFrames == 0 && reframer.pending == 0 }

    /// Queues `frames` of PCM (at inputRate) and sends what is due. Refused whole
    /// (nothing queued) when the queue cannot take it. `clock` is read once the audio
    /// is queued: converting a whole file takes tens of milliseconds, and a talkspurt
    /// that starts now must start when its first frame is complete, not before, or its
    /// first frame leaves late against the rest and every listener's jitter buffer
    /// holds that lateness as extra delay (then sheds a frame of speech to lose it).
    func feed(_ pcm: UnsafePointer<Int16>, frames: Int, channels: Int, clock: () -> UInt64) throws {
        guard frames > 0 else { return }   // nothing fed: not a block the talkspurt's timing sees
        try admit(frames: frames)
        let before = queuedFrames
        push(pcm, frames: frames, channels: channels)
        fed(frames: frames, now: clock(), queuedBefore: before)
    }

    /// vc_stream_feed_pcm_f32: float PCM (full scale ±1.0, clipped), converted to
    /// int16 a chunk at a time, then as `feed`.
    func feedFloat(_ pcm: UnsafePointer<Float>, frames: Int, channels: Int, clock: () -> UInt64) throws {
        guard frames > 0 else { return }
        try admit(frames: frames)
        let before = queuedFrames
        var done = 0
        while done < frames {
            let n = min(LocalStream.floatChunk, frames - done)
            let src = pcm + done * channels
            for i in 0..<(n * channels) { floatScratch[i] = int16Sample(src[i]) }
            push(UnsafePointer(floatScratch), frames: n, channels: channels)
            done += n
        }
        fed(frames: frames, now: clock(), queuedBefore: before)
    }

    /// `samples` at 48 kHz as ms: whole, or to a hundredth where it is not (so that a
    /// call a sample longer than the queue is not said to be as long as it).
    static func msText(samples: Int) -> String {
        if samples % 48 == 0 { return "\(samples / 48) ms" }
        let hundredths = (samples * 100 + 24) / 48
        let frac = hundredths % 100
        return "\(hundredths / 100).\(frac < 10 ? "0" : "")\(frac) ms"
    }

    /// Throws when the queue cannot take `frames` input frames (at inputRate, counted
    /// with the resampler's bound, so a feed is refused whole or taken whole).
    private func admit(frames: Int) throws {
        let at48 = resampler?.outputBound(forInput: frames) ?? frames
        let completes = (reframer.pending + at48) / audio.frameSamples
        let samples = queuedFrames * audio.frameSamples + reframer.pending + at48
        guard queuedFrames + completes <= maxQueueFrames && samples <= maxQueueSamples else {
            let callMs = LocalStream.msText(samples: at48)
            if at48 / audio.frameSamples > maxQueueFrames || at48 > maxQueueSamples {
                throw ClientError.noMemory("this call's \(callMs) is more than stream \(streamID)'s queue holds (at most "
                                           + "\(maxQueueSamples / 48) ms, max_queue_ms): feed it in parts; nothing of it was queued")
            }
            // A few samples of a partial frame round to "0 ms": say what is there.
            let queued = queuedMs > 0 || reframer.pending == 0 ? "\(queuedMs) ms" : "\(reframer.pending) samples at 48 kHz"
            throw ClientError.noMemory("stream \(streamID)'s queue is full: \(queued) queued of at most "
                                       + "\(maxQueueSamples / 48) ms (max_queue_ms), this call's \(callMs) "
                                       + "would not fit; nothing of this call was queued")
        }
        if isDrained {
            lostBeforeBatch = fedLostNoPath
            sentPathLostBeforeBatch = fedSentPathLost
        }
    }

    /// Resamples (when the stream's rate is not 48 kHz) and reframes into the queue.
    private func push(_ pcm: UnsafePointer<Int16>, frames: Int, channels: Int) {
        guard let conv = resampler else { return reframe(pcm, frames: frames, channels: channels) }
        func toFrames(_ p: UnsafePointer<Int16>, _ n: Int) {
            conv.convertAll(p, frames: n) { q, m in reframe(q, frames: m, channels: audio.channels) }
        }
        // In the channel's layout first (mono upmixed L = R, stereo averaged, as the
        // reframer does at 48 kHz).
        if channels != audio.channels, let relayout { relayout.convertAll(pcm, frames: frames, toFrames) } else { toFrames(pcm, frames) }
    }

    private func reframe(_ pcm: UnsafePointer<Int16>, frames: Int, channels: Int) {
        reframer.push(pcm, frames: frames, inChannels: channels) { frame in
            guard queuedFrames < maxQueueFrames else { return }   // admit() bounded it; never overwrite
            (queue + ((queueHead + queuedFrames) % maxQueueFrames) * frameLength).update(from: frame, count: frameLength)
            queuedFrames += 1
        }
    }

    /// The host fed `frames` (at inputRate) at `now`, with `queuedBefore` whole frames
    /// queued before them.
    private func fed(frames: Int, now: UInt64, queuedBefore: Int) {
        guard frames > 0 else { return pump(now: now) }
        // Device capture feeds 48 kHz periods whatever rate it asked of the device.
        let rate = UInt64(externalFeed ? inputRate : 48000)
        let callNs = UInt64(frames) * 1_000_000_000 / rate
        if lastFedNs != 0 && now >= lastFedNs && now - lastFedNs <= LocalStream.splitCallNs && now < blockEndNs {
            // The rest of a block fed in pieces (a ring buffer's wrap, a loop over a
            // callback's buffer): the block's audio grows, nothing came late.
            blockNs += callNs
            blockEndNs += callNs
            lastFedNs = now
            if inSpurt && heldSinceNs == blockStartNs && spurtFrames == 0 { holdFirstFrame(since: heldSinceNs) }
            return pump(now: now)
        }
        // A talkspurt ended unwaited just before this block: the host feeds long blocks
        // in real time (one cut, then the slack for good).
        if endedUnwaitedNs != 0 && now >= endedUnwaitedNs && now - endedUnwaitedNs <= drySlackNs { pacesLongBlocks = true }
        endedUnwaitedNs = 0
        var late: UInt64 = 0
        if lastFedNs != 0 && now >= lastFedNs {
            // How late this block came against the end of the last one's audio: a
            // real-time host's jitter, learned for the slack. Later than the largest
            // slack is a pause (the host had nothing to say), not jitter; past the
            // slack (the talkspurt was ended for it, or a short pause: the two look
            // alike) it is learned at most twice the slack, so one short pause does not
            // raise the slack at once, and a host whose blocks do come that late gets
            // there within a few such ends.
            feedLatePeakNs *= exp(-Double(now - lastFedNs) / LocalStream.latePeakDecayNs)
            if now > blockEndNs && now - blockEndNs <= LocalStream.maxDrySlackNs {
                late = now - blockEndNs
                feedLatePeakNs = max(feedLatePeakNs, min(Double(late), 2 * Double(drySlackNs)))
            }
        }
        lastFedNs = now
        blockNs = callNs
        blockStartNs = now
        blockEndNs = now &+ callNs
        pump(now: now, freshHead: queuedBefore == 0, late: endedDry ? late : 0, fed: true)
    }

    /// When a dry queue ends the talkspurt (the queue empty, a talkspurt running), and
    /// whether that time waits for the host. A real-time host's next block is due when
    /// the last one's audio has passed, or when the frame after the last one taken is
    /// (a host that fed ahead of real time); it may come a little late, so the queue
    /// waits the dry slack past the later of the two. After a call of more than
    /// `longFeedNs` (a whole file, a sentence) there is no next block to wait for
    /// once that audio is sent: the padded last frame of a file leaves in its slot
    /// instead of a slack late (where a listener with a thin cushion concealed a
    /// frame before it). A host feeding long blocks in real time looks like that
    /// until its next block comes right after such an end (`pacesLongBlocks`): from
    /// then on it is waited for too.
    private var dryEnd: (at: UInt64, waits: Bool) {
        let nextFrame = lastTakenNs &+ frameNs
        guard blockNs <= LocalStream.longFeedNs || pacesLongBlocks else { return (nextFrame, false) }
        return (max(nextFrame, blockEndNs) &+ drySlackNs, true)
    }

    /// Sends every frame that is due at `now`; ends a talkspurt that ran dry.
    /// `freshHead`: the head of the queue was completed by the block fed now;
    /// `late`: how late that block came against the end of the last one's audio,
    /// when the talkspurt before it ended by the dry rule waiting for it; `fed`: the
    /// host fed just now (its lateness is measured).
    func pump(now: UInt64, freshHead: Bool = false, late: UInt64 = 0, fed: Bool = false) {
        // Audio is waiting (a partial frame too): a talkspurt runs, so the partial is
        // sent, padded, once the host stops feeding. A talkspurt that starts with a
        // block that came late, after the last one was ended waiting for it, keeps the
        // time the host meant it for (not before the previous talkspurt's last frame):
        // its next blocks, on time, are not held back by that lateness (its first
        // frame goes out at once, late).
        if !inSpurt && (queuedFrames > 0 || reframer.pending > 0) {
            startSpurt(at: late == 0 ? now : max(now &- late, min(now, resumeNs &- frameNs)))
            if fed && late == 0 { holdFirstFrame(since: now) }
        } else if fed && inSpurt && spurtFrames == 0 && heldSinceNs != 0 && heldAudioNs < frameNs && queuedFrames > 0 {
            // The talkspurt started with less than a frame (blocks shorter than one):
            // its hold is reckoned from the call that completes its first frame.
            holdFirstFrame(since: now)
        }
        if fed && inSpurt { hostLagNs = hostLag(now) }
        var fresh = freshHead
        while queuedFrames > 0 {
            let due = anchorNs &+ spurtFrames &* frameNs
            if due > now {
                // The frame a block completed (or a lone frame) a little early, beyond what
                // a held talkspurt's blocks explain: the host's clock runs fast; follow it.
                // (A late frame goes out at once; the schedule stays, so frames after it
                // that come on time are not held back.)
                let early = due - now
                let explained = expectedEarlyNs(frame: spurtFrames, audioFrame: spurtFrames &- (framesSkipped &- skippedBeforeSpurt))
                guard (fresh || queuedFrames == 1) && early > explained
                        && early - explained <= LocalStream.driftSlackNs else { break }
                anchorNs -= early - explained
                if heldSinceNs != 0 { heldSinceNs -= early - explained }
                // Still early by what the blocks explain: it waits for its slot.
                if explained > 0 { break }
            }
            fresh = false
            noteLag(hostLagNs)
            if !needMarker && spurtFrames >= skipAllowedAt && fellAFrameBehind() {
                spurtFrames += 1
                framesSkipped += 1
                skipAllowedAt = spurtFrames + LocalStream.skipSpacingFrames
                hostLagNs = hostLagNs > frameNs ? hostLagNs - frameNs : 0
            }
            let frame = queue + queueHead * frameLength
            queueHead = (queueHead + 1) % maxQueueFrames
            queuedFrames -= 1
            framesTaken += 1
            let ts = spurtTimestamp &+ UInt32(truncatingIfNeeded: spurtFrames &* UInt64(audio.frameSamples))
            spurtFrames += 1
            lastTakenNs = max(lastTakenNs, now)
            processAndSend(UnsafePointer(frame), timestamp: ts, last: false)
        }
        // Dry past the host's next block and the slack: the talkspurt ends.
        if inSpurt && queuedFrames == 0 {
            let end = dryEnd
            if now >= end.at {
                if !end.waits { endedUnwaitedNs = now }
                endSpurt()
                endedDry = end.waits
            }
        }
        publishDeadline()
    }

    /// Publishes `deadline` in the slot for the pacer, which reads it without the slot
    /// lock (held here). Every change of the deadline ends in pump, flush or finish.
    private func publishDeadline() { slot.due.store(deadline ?? .max, ordering: .releasing) }

    /// When this stream next needs the pacer (nil: not until it is fed again).
    var deadline: UInt64? {
        guard inSpurt || queuedFrames > 0 else { return nil }
        return queuedFrames > 0 ? anchorNs &+ spurtFrames &* frameNs : dryEnd.at
    }

    /// How late the host's newest sample came against the talkspurt's schedule. A
    /// real-time host feeds audio once it has passed: sample P of the talkspurt (48 kHz;
    /// taken, queued and pending, skipped frame times included) comes at anchor + P less
    /// a frame (frame k's slot starts at anchor + k frames, when it is complete). Per
    /// sample, so it stays put for a real-time host whatever its blocks' phase against
    /// the frames or a resampler's; a host ahead of the schedule (a file) is not late.
    private func hostLag(_ now: UInt64) -> UInt64 {
        let fed = (spurtFrames &+ UInt64(queuedFrames)) &* UInt64(audio.frameSamples) &+ UInt64(reframer.pending)
        let expected = anchorNs &+ fed &* 1_000_000_000 / 48000
        return now &+ frameNs > expected ? now &+ frameNs &- expected : 0
    }

    /// Notes the host's lateness for a frame taken.
    private func noteLag(_ lag: UInt64) {
        lagMinNs = min(lagMinNs, lag)
        lagFrames += 1
        if lagFrames == LocalStream.lagWindowFrames {
            lagMinBeforeNs = lagMinNs
            lagBaselineNs = min(lagBaselineNs, lagMinNs)
            lagMinNs = .max
            lagFrames = 0
        }
    }

    /// True when even the least lateness over the last one to two windows is a whole
    /// frame more than the talkspurt's baseline: the host runs slower than real time,
    /// and the stream skips a frame's time (every later feed is then a frame less late).
    private func fellAFrameBehind() -> Bool {
        guard lagMinBeforeNs != .max && lagBaselineNs != .max
                && min(lagMinBeforeNs, lagMinNs) >= lagBaselineNs &+ frameNs else { return false }
        lagMinBeforeNs -= frameNs
        if lagMinNs != .max { lagMinNs -= frameNs }
        return true
    }

    /// The talkspurt's first timestamp: the last talkspurt's next one, advanced by the
    /// wall-clock time from that talkspurt's end (its next frame's slot) to this one's
    /// first slot, so timestamps keep step with send times across pauses.
    private func stampSpurt() {
        guard spurtEverEnded else { spurtTimestamp = resumeTimestamp; return }
        let pauseNs = anchorNs > resumeNs ? anchorNs - resumeNs : 0
        spurtTimestamp = resumeTimestamp &+ UInt32(truncatingIfNeeded: pauseNs * 48 / 1_000_000)
    }

    /// Anchors the talkspurt `startHoldNs` after `since`, the call that started it
    /// (its timestamps with it: a held start is a longer pause).
    private func holdFirstFrame(since: UInt64) {
        heldBlockNs = blockNs
        heldAudioNs = queuedAudioNs
        anchorNs = since &+ LocalStream.startHoldNs(blockNs: heldBlockNs, audioNs: heldAudioNs, frameNs: frameNs)
        heldSinceNs = since
        stampSpurt()
    }

    /// How early the frame in slot k of a held talkspurt, the talkspurt's audio frame
    /// j (slots skipped for a slow host are not audio), is complete against its slot
    /// when the host's blocks come on time (0 when not held).
    private func expectedEarlyNs(frame k: UInt64, audioFrame j: UInt64) -> UInt64 {
        guard heldSinceNs != 0 else { return 0 }
        let complete = LocalStream.completedNs(frame: j, blockNs: heldBlockNs, audioNs: heldAudioNs, frameNs: frameNs)
        let slot = anchorNs &- heldSinceNs &+ k &* frameNs
        return slot > complete ? slot - complete : 0
    }

    /// When frame k is complete, counted from a call that brought `audioNs`, a
    /// real-time host bringing `blockNs` more each `blockNs` after it. Lengths are
    /// whole ns (a 1024-sample block is 21,333,333.3): audio short of a frame by less
    /// than `sampleSlackNs`, under a sample, is taken as complete.
    static let sampleSlackNs: UInt64 = 20_000
    static func completedNs(frame k: UInt64, blockNs: UInt64, audioNs: UInt64, frameNs: UInt64) -> UInt64 {
        let needed = (k &+ 1) &* frameNs
        guard needed > audioNs &+ sampleSlackNs && blockNs > 0 else { return 0 }
        return (needed - audioNs - sampleSlackNs + blockNs - 1) / blockNs * blockNs
    }

    /// How late, at worst, a frame of a talkspurt is complete against its slot when
    /// the talkspurt's first call brought `audioNs` (at least a frame) and a real-time
    /// host brings `blockNs` more each `blockNs`: frame k is complete with the first
    /// block that takes the audio past k + 1 frames, its slot is k frames after the
    /// first call. Over the first 100 frames (a cycle of any usual block length); 0
    /// for blocks of whole frames and for a call longer than `maxHeldBlockNs`: a
    /// device's or a callback's period is shorter, a longer call is more likely a
    /// sentence fed at once (nothing follows it to be uneven; its start is not held).
    static let maxHeldBlockNs: UInt64 = 100_000_000
    static func startHoldNs(blockNs: UInt64, audioNs: UInt64, frameNs: UInt64) -> UInt64 {
        guard blockNs > 0 && blockNs <= maxHeldBlockNs && audioNs >= frameNs else { return 0 }
        var worst: UInt64 = 0
        for k in 0..<UInt64(100) {
            let complete = completedNs(frame: k, blockNs: blockNs, audioNs: audioNs, frameNs: frameNs)
            if complete > k * frameNs { worst = max(worst, complete - k * frameNs) }
        }
        return worst
    }

    private func startSpurt(at now: UInt64) {
        inSpurt = true
        anchorNs = now
        heldSinceNs = 0
        lastTakenNs = now &- frameNs
        spurtFrames = 0
        endedDry = false
        lagMinNs = .max
        lagMinBeforeNs = .max
        lagBaselineNs = .max
        lagFrames = 0
        hostLagNs = 0
        skipAllowedAt = 0
        skippedBeforeSpurt = framesSkipped
        stampSpurt()
        needMarker = true
    }

    /// The queue ran dry (or was flushed): send the partial frame padded with the
    /// last-frame flag, then nothing until the next talkspurt.
    private func endSpurt() {
        var ts = spurtTimestamp &+ UInt32(truncatingIfNeeded: spurtFrames &* UInt64(audio.frameSamples))
        if reframer.pending > 0 || !packetSpurtClosed {
            let missing = reframer.frameSamples - reframer.pending
            var padded = false
            sendingClosingSilence = reframer.pending == 0
            defer { sendingClosingSilence = false }
            reframer.push(silence, frames: missing, inChannels: reframer.channels) { frame in
                processAndSend(frame, timestamp: ts, last: true)
                padded = true
            }
            if padded {
                spurtFrames += 1
                ts = ts &+ UInt32(audio.frameSamples)
            }
        }
        resumeTimestamp = ts
        resumeNs = anchorNs &+ spurtFrames &* frameNs
        spurtEverEnded = true
        inSpurt = false
        // The talkspurt's last frame went out: an open gate closes with it (the next
        // audio opens it again, with the marker), so the gate events follow the wire.
        if kind == .mic && gate.isOpen {
            gate.reset()
            raiseGate(VC_EVENT_GATE_CLOSED)
        }
    }

    /// A MIC stream's gate opened or closed: a local event (any thread that drives the
    /// stream; the event hub's lock is a leaf and nothing here allocates in steady state).
    private func raiseGate(_ type: vc_event_type) {
        var e = ClientEvent(type: type)
        e.streamID = streamID
        e.ssrc = ssrc
        e.kind = UInt32(kind.rawValue)
        table.events?.raise(e)
    }

    /// vc_stream_flush: drops what is queued (barge-in) and ends the talkspurt.
    func flush() {
        queuedFrames = 0
        queueHead = 0
        if inSpurt { endSpurt() }
        // What the host feeds next starts afresh: not late against the flushed audio.
        lastFedNs = 0
        endedDry = false
        publishDeadline()
    }

    /// Stops the stream: queued audio is dropped; the last frame (the partial one, or
    /// a silent one) goes out with the last-frame flag. An idle stream (its talkspurt
    /// ended, nothing pending) sends nothing more, even when its closing frame could
    /// not be sent (server mute, media path down): a one-frame talkspurt of silence
    /// would open and close its gate, GATE_OPENED then GATE_CLOSED, and listeners
    /// take the stream's removal as its end anyway.
    func finish() {
        queuedFrames = 0
        queueHead = 0
        if !inSpurt && reframer.pending == 0 {
            publishDeadline()
            return
        }
        if !inSpurt { startSpurt(at: MonotonicClock.nanoseconds()) }
        packetSpurtClosed = false
        endSpurt()
        publishDeadline()
    }

    /// The stream ends without a closing frame (the session moved to another channel,
    /// or ended): a MIC stream's open gate closes with it, as it does when the stream
    /// is stopped, so a host that follows the gate events is not left "speaking".
    func abandon() {
        if kind == .mic && gate.isOpen {
            gate.reset()
            raiseGate(VC_EVENT_GATE_CLOSED)
        }
    }

    // MARK: one frame

    /// Send processing (NS / AGC / AEC), then the input gate (MIC streams) or the
    /// zero gate (other streams on channels without DTX), then encode and send.
    private func processAndSend(_ input: UnsafePointer<Int16>, timestamp: UInt32, last: Bool) {
        let frame: UnsafePointer<Int16>
        if let apm {
            // Process a copy in the stream's scratch: the queue owns `input`.
            let work = processed
            work.update(from: input, count: audio.frameSamples)
            var off = 0
            while off + apm.blockSize <= audio.frameSamples {
                let far: UnsafePointer<Int16>? = apm.settings.echoCancellation && apm.blockSize == 480
                    && table.farEnd.pop(into: farBlock, cursor: &farCursor) ? UnsafePointer(farBlock) : nil
                apm.process(work + off, farEnd: far)
                off += apm.blockSize
            }
            frame = UnsafePointer(work)
        } else {
            frame = input
        }
        level = BlockLevel.measure(frame, count: frameLength)
        levelAtNs = MonotonicClock.nanoseconds()
        guard let path = slot.path else {
            // A reconnect's gap: dropped before the gate (closed at the gap's start by
            // abandon(): it opens again with the first frame after it), counted for
            // vc_stream_drain and vc_send_stats; the next frame sent starts a talkspurt.
            needMarker = true
            framesLostNoPath += 1
            if !sendingClosingSilence { fedLostNoPath += 1 }
            return
        }
        if kind == .mic {
            let wasOpen = gate.isOpen
            let decision = gate.process(frame, frameSamples: audio.frameSamples, channels: audio.channels, settings: table.gate.settings)
            if !wasOpen && gate.isOpen { raiseGate(VC_EVENT_GATE_OPENED) }
            switch decision {
            case .open:
                encodeAndSend(frame, timestamp: timestamp, last: last, path: path)
            case .closing:
                encodeAndSend(frame, timestamp: timestamp, last: true, path: path)
                raiseGate(VC_EVENT_GATE_CLOSED)
            case .closed:
                needMarker = true   // gated frames are not encoded; time still passes
            }
            return
        }
        if !audio.dtx {
            if isDigitalSilence(frame) {
                zeroRun += audio.frameSamples
                if zeroRun > LocalStream.zeroGateMs * 48 {
                    if !zeroGated {
                        zeroGated = true
                        encodeAndSend(frame, timestamp: timestamp, last: true, path: path)
                    }
                    needMarker = true
                    return
                }
            } else {
                zeroRun = 0
                zeroGated = false
            }
        }
        encodeAndSend(frame, timestamp: timestamp, last: last, path: path)
    }

    private func isDigitalSilence(_ frame: UnsafePointer<Int16>) -> Bool {
        for i in 0..<frameLength where frame[i] != 0 { return false }
        return true
    }

    private func encodeAndSend(_ frame: UnsafePointer<Int16>, timestamp: UInt32, last: Bool, path: SendSnapshot) {
        let n: Int
        do { n = try encoder.encode(frame, into: UnsafeMutableRawBufferPointer(rebasing: opusBuffer[0..<maxOpusBytes])) } catch {
            needMarker = true
            return
        }
        // DTX: the encoder's empty frames are not sent; the next real frame is a new
        // talkspurt (marker). FEC: flagged when the packet really carries it.
        guard let flags = encoder.headerFlags(length: n, marker: needMarker, last: last) else {
            needMarker = true
            return
        }
        let header = FrameHeader(type: .voice, flags: flags, ssrc: ssrc, seq: seq, timestamp: timestamp)
        guard send(header: header, opus: UnsafeRawBufferPointer(rebasing: opusBuffer[0..<n]), path: path) else {
            // Not sent (server-muted, a full socket buffer): the next sent frame is a new talkspurt.
            needMarker = true
            return
        }
        seq += 1
        packetsSent += 1
        if flags.contains(.fec) { fecPacketsSent += 1 }
        packetSpurtClosed = last
        // After a last frame or a comfort-noise update, the next real frame starts a talkspurt.
        needMarker = last || encoder.lastWasDTX
    }

    /// Seals under the slot's snapshot and sends; false when nothing could be sent
    /// (not connected, server-muted, socket buffer full).
    private func send(header: FrameHeader, opus: UnsafeRawBufferPointer, path: SendSnapshot) -> Bool {
        guard !path.serverMuted else { return false }
        let n = MediaCrypto.seal(header: header, payload: opus, key: path.key, into: sealBuffer)
        guard (try? path.socket.sendTo(UnsafeRawBufferPointer(rebasing: sealBuffer[0..<n]), path.address)) != nil else { return false }
        slot.packetsOut += 1
        slot.bytesOut += UInt64(n)
        bytesSent += UInt64(n)
        if path.pathLost {
            framesSentPathLost += 1
            if !sendingClosingSilence { fedSentPathLost += 1 }
        }
        return true
    }

    // MARK: loss protection (slot lock held by the caller)

    /// Takes the server's loss feedback for this stream: the protection now in force
    /// when it changed, else nil. The encoder changes between two frames.
    func applyLossFeedback(_ counts: LossCounts, listeners: UInt32) -> FECPolicy.Protection? {
        guard fecPolicy.apply(counts, listeners: listeners) else { return nil }
        let p = fecPolicy.current
        do { try encoder.setProtection(fec: p.fec, lossPercent: p.lossPercent) } catch {
            ClientLog.log(1, "stream \(streamID): \(error)")
            return nil
        }
        return p
    }
}
