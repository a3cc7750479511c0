// The output stage: who takes the final mix, and the one thread that renders it.
//
// Four modes, decided from the inputs (external playback, a mixed sink set, a
// per-speaker sink set or a recording running, connected, audio suspended) by
// `reconcile`, the only place that starts or stops a render driver; every change
// (a sink set or cleared, a recording started or stopped, external playback on or
// off, connect, disconnect, suspend, restart, the playback device or the output
// format changed, destroy) goes through it, in any order:
//
//   device      !external && connected && !suspended: a driver thread renders, hands
//               the block to the sinks and recordings (taps) and writes it to the
//               playback device (resampled when the device does not run at 48 kHz);
//               a device that fails is reopened on a backoff.
//   sink        otherwise, external && a mixed sink is set: a driver thread renders
//               a block every 20 ms (or 10: vc_set_mixed_output_block_ms) and hands the block to the sinks and recordings; no
//               clock but its own decides, so its ticks follow the talkers' frames
//               (RenderPhase: the phase moves, the rate stays real time).
//   background  otherwise, a per-speaker sink is set or a recording runs: a driver
//               thread renders every 20 ms for them, except while the host pulls
//               (vc_read_mixed_pcm is served, and the driver skips its block while
//               the audio the host's pulls took reaches within 40 ms of now, or half
//               its last pull plus 20 ms: pullHorizonNs), so the host's pulls and the
//               driver never both advance the clock for long.
//   pull        otherwise: nothing renders by itself; vc_read_mixed_pcm renders on
//               the caller's thread.
//
// At most one driver exists, so every stream's playout clock advances once per
// rendered block. The driver thread knows itself by its thread role (render).
//
// Rendering is 48 kHz stereo in blocks of at most 20 ms (the jitter buffers, the
// mixer and the echo canceller's far end work there). What goes out to the host —
// the mixed sink, vc_read_mixed_pcm and the per-speaker sink — is converted to the
// output format (vc_set_output_format) by converters only the renderer touches: the
// mix's here, each speaker's in its receive slot. The per-speaker sink and the
// recordings are handed their blocks under the render lock (so pull callers and the
// background driver take turns; nothing a callback may call takes that lock); the
// mixed sink runs outside it, on the driver thread only.
import Synchronization
import VoiceCatABI
import VoiceCatAudio
import VoiceCatDevices
import VoiceCatProtocol
import VoiceCatSystem

/// Sinks are numbered as made (an address may be reused), so a render can tell a new
/// sink from the one it served last (and fade the new one in). One count for both kinds.
private let sinksMade = Atomic<UInt64>(0)
private func nextSinkSerial() -> UInt64 { sinksMade.wrappingAdd(1, ordering: .relaxed).newValue }

/// The host's mixed-output sink: interleaved PCM, frames, channels.
public final class SinkBox {
    let deliver: (UnsafePointer<Int16>, Int, Int) -> Void
    let serial = nextSinkSerial()
    public init(_ deliver: @escaping (UnsafePointer<Int16>, Int, Int) -> Void) { self.deliver = deliver }
}

/// One block of one remote stream for the per-speaker sink: decoded, after the
/// listener's noise reduction, before gain, mute and mixing, in the output format.
public struct SpeakerBlock {
    public let ssrc: UInt32
    public let userID: UInt32
    public let kind: StreamKind
    public let pcm: UnsafePointer<Int16>
    public let frames: Int
    public let channels: Int
}

/// The host's per-speaker sink.
public final class SpeakerSinkBox {
    let deliver: (SpeakerBlock) -> Void
    let serial = nextSinkSerial()
    public init(_ deliver: @escaping (SpeakerBlock) -> Void) { self.deliver = deliver }
}

/// The format of the PCM handed to the host (sinks, pulls, recordings).
public struct OutputFormat: Equatable, Sendable {
    public var sampleRate: Int
    public var channels: Int
    public init(sampleRate: Int = 48000, channels: Int = 2) { self.sampleRate = sampleRate; self.channels = channels }
    public var isNative: Bool { sampleRate == 48000 && channels == 2 }
}

/// Roles of a client's threads (ThreadIdentity).
enum ThreadRole: Int {
    case network = 1
    case render = 2
    case capture = 3
    case pacer = 4
}

final class OutputStage {
    enum Mode: Equatable { case pull, sink, device, background }

    /// The render block: 20 ms at 48 kHz (every render is at most this long).
    static let block = 960
    /// The per-speaker taps' fade-in, at 48 kHz (they are converted after it).
    static let tapFadeFrames = FadeIn.frames(at: 48000)
    /// The blocks (ms) the mixer thread may render in sink mode (vc_set_mixed_output_block_ms).
    static let sinkBlockMs = [10, 20]
    /// The most frames a block gives in any output format (192 kHz, plus the
    /// resampler's rounding).
    static let maxOutFrames = FormatConverter.rates.upperBound * block / 48000 + 2

    /// The client whose threads these are (set right after creation).
    weak var owner: AnyObject?
    private let receive: ReceiveSet
    private let streams: StreamTable
    private let events: EventHub
    private let backend: AudioBackend
    private let quality: Int
    let sink = CallbackCell<SinkBox>()
    let speakerSink = CallbackCell<SpeakerSinkBox>()
    let recorders = RecorderSet()
    private let bus = MixBus(capacityFrames: OutputStage.block)
    /// What the playback devices lost and hold (vc_get_playback_stats), written by the
    /// render thread of device mode: underruns recovered and failures over every device
    /// this client played on, and what the open card held after the last block (µs; 0
    /// with none open, or one that does not run in real time).
    let deviceUnderruns = AtomicCounter()
    let deviceFailures = AtomicCounter()
    let deviceHeldUs = AtomicCounter()

    /// Serializes reconcile (and so driver start/stop), format changes and recording
    /// start/stop. Never taken by the render path.
    private let reconcileLock = Lock()
    // The inputs, guarded by reconcileLock.
    private var external: Bool
    private var connected = false
    private var suspended = false
    private var playbackDevice: String
    /// The mixer thread's block in sink mode (48 kHz frames).
    private var sinkBlock = OutputStage.block
    private var driver: RenderDriver?
    /// The schedule of a driver stopped for a device that then could not be opened:
    /// the driver started again right after (the previous mode) takes it over.
    private var stoppedSchedule: RenderDriver.Schedule?
    /// 1 from a playback device's VC_EVENT_ERROR until a playback device opens again,
    /// which then raises DEVICE_RESTORED: each failure reported is paired with the news
    /// that playback is back, whoever reopens it (the driver's retry, vc_audio_restart,
    /// a switch, the next session).
    private let playbackDown = AtomicCounter()

    /// Serializes renders (a driver's, or vc_read_mixed_pcm callers') and guards the
    /// renderer's state below.
    private let renderLock = Lock()
    /// When the mix was last rendered (ms, monotonic): talk state follows playout
    /// while someone renders.
    let lastRenderMs = Atomic<UInt64>(0)
    // The renderer's state (renderLock).
    private var format = OutputFormat()
    private var mixConverter: FormatConverter
    private let pullMix: UnsafeMutablePointer<Int16>        // one 48 kHz block
    /// The last block's worth of the 48 kHz mix (oldest first): a converter that
    /// replaces the mix's at a format change is spliced in with it (FormatConverter.splice).
    private let mixHistory: UnsafeMutablePointer<Int16>
    /// Converted frames a pull rendered beyond what it was asked for.
    private var pullRest: UnsafeMutablePointer<Int16>
    private var pullRestCount = 0
    private var pullRestHead = 0
    /// How far the host's pulls have taken the audio (monotonic ns): each pull moves it
    /// by the audio it asked for, from now if it had fallen behind (at most a second
    /// ahead). A background driver stays away until the host is more than a margin
    /// behind it (40 ms, or half its last pull plus 20 ms), so a host that pulls 100 ms
    /// at a time, or two blocks at once every 40 ms, is not mistaken for one that
    /// stopped, and one pull after a pause (a peek, an audio callback restarted) keeps
    /// the driver away only for what it took.
    private var pullHorizonNs: UInt64 = 0
    private var pullMarginNs: UInt64 = 40_000_000
    /// The most blocks one pull rendered lately (renderLock): a host that pulls several
    /// blocks at a time takes all of their audio at once, so every stream's jitter
    /// buffer keeps that much in hand (ReceiveSet.setConsumerBurst). Held for
    /// `burstHoldNs` after the last pull that large, so pulls of varying sizes do not
    /// move it each time.
    private var burstBlocks = 0
    private var burstSinceNs: UInt64 = 0
    /// Whether the last render tapped the streams, and how far (48 kHz frames) the taps'
    /// fade-in has gone since they started (renderLock): per-speaker blocks that start
    /// while someone talks fade in over FadeIn.milliseconds, from a converter without
    /// the history of an earlier tapping (a click otherwise: the waveform's value after
    /// silence, or after the filter delay's zeros of a fresh resampler).
    private var tapsWereOn = false
    private var tapFadeDone = Int.max
    /// The mixed sink the drivers last handed a block to (SinkBox.serial) and how far
    /// (output frames) its fade-in has gone: a sink set, or replaced, while the mix
    /// plays fades in as a per-speaker sink does. Driver threads only (one at a time:
    /// a driver is joined before the next starts), so a driver that replaces another
    /// (another block length, another mode) goes on without a new fade.
    private var sinkServed: UInt64 = 0
    private var sinkFadeDone = Int.max
    /// The same for the per-speaker sink (renderLock), in output frames, on the
    /// render's clock from the first render after the sink was set (a stream that
    /// starts later starts as its codec starts it, as with the taps' fade): a sink put
    /// in place of another, or set while a speaker's recording keeps the taps running,
    /// fades in on its own (the recordings are handed their blocks before it). When the
    /// taps start with it, their own fade (startTapFade) is the sink's.
    private var speakerServed: UInt64 = 0
    private var speakerFadeDone = Int.max
    /// The serial of the per-speaker sink set last (stored before the sink is).
    private let speakerSinkSerial = Atomic<UInt64>(0)
    static let burstHoldNs: UInt64 = 2_000_000_000

    /// The mode in effect: a driver owns the mix unless it is `pull` or `background`
    /// (read before pulling, without a lock, and again under renderLock).
    private let modeValue = Atomic<Int>(0)

    init(receive: ReceiveSet, streams: StreamTable, events: EventHub, backend: AudioBackend, external: Bool, playbackDevice: String,
         resamplerQuality: Int) throws {
        self.receive = receive; self.streams = streams; self.events = events
        self.backend = backend; self.external = external; self.playbackDevice = playbackDevice
        quality = resamplerQuality
        mixConverter = try OutputStage.mixConverter(for: OutputFormat(), quality: resamplerQuality)
        pullMix = .allocate(capacity: OutputStage.block * 2)
        pullMix.initialize(repeating: 0, count: OutputStage.block * 2)
        mixHistory = .allocate(capacity: OutputStage.block * 2)
        mixHistory.initialize(repeating: 0, count: OutputStage.block * 2)
        pullRest = .allocate(capacity: mixConverter.maxOutFrames * 2)
    }

    deinit { pullMix.deallocate(); pullRest.deallocate(); mixHistory.deallocate() }

    /// A converter from the engine's 48 kHz stereo to `f`, for the mix and for each
    /// speaker's tap. Every one keeps the resampler's filter delay (1-2 ms at most
    /// rates, 4 ms at 8 kHz) from its start and at each new stream (handOutSpeakers):
    /// every block is then as long as its 48 kHz block gives (20 ms at 16 kHz: 320
    /// frames, the first one too), and a speaker's block covers the same audio as the
    /// mix block of its render. (The mix's once skipped it at its start: the first
    /// block of a format came short by it, 32 frames at 16 kHz, which a host feeding
    /// fixed 20 ms frames to a VAD or a recogniser could not take; a speaker's that
    /// skipped it at each new stream put the stream's blocks that much early.)
    static func mixConverter(for f: OutputFormat, quality: Int) throws -> FormatConverter {
        do {
            return try FormatConverter(inRate: 48000, outRate: f.sampleRate, inChannels: 2, outChannels: f.channels,
                                       maxInFrames: OutputStage.block, quality: quality)
        } catch { throw ClientError.invalidArgument("\(error)") }
    }

    var mode: Mode {
        switch modeValue.load(ordering: .acquiring) {
        case 1: return .sink
        case 2: return .device
        case 3: return .background
        default: return .pull
        }
    }

    var isExternal: Bool { reconcileLock.withLock { external } }

    /// True on a thread inside the per-speaker sink (a pull caller's thread there is
    /// a host thread, yet it is inside a callback of the client).
    var callingThreadIsInsideSpeakerSink: Bool { speakerSink.callingThreadIsInside }

    /// Whether the calling thread runs any client's per-speaker sink: it holds that
    /// client's render lock, so it must not wait for anything that may wait for a
    /// render (an event callback that pulls), of this client or another.
    static let insideSpeakerSink = ThreadFlag()

    // MARK: inputs

    /// vc_set_external_playback. Turning it off opens the device now; when it cannot,
    /// the previous mode stays and the device's error is thrown.
    func setExternal(_ on: Bool) throws { try change(\.external, to: on) }

    /// vc_set_playback_device: plays on `name` from now on. When the device plays the
    /// mix now, the new one is opened at once; when it cannot be, the previous one
    /// stays and the error is thrown. Otherwise the name is kept for later.
    func setPlaybackDevice(_ name: String) throws { try change(\.playbackDevice, to: name) }

    /// Changes an input and reconciles, opening a device now; on failure the input
    /// goes back (and with it the previous mode) and the device's error is thrown.
    private func change<T>(_ input: ReferenceWritableKeyPath<OutputStage, T>, to value: T) throws {
        try reconcileLock.withLock {
            let old = self[keyPath: input]
            self[keyPath: input] = value
            if let e = reconcile(openNow: true, retryAway: true) {
                // Back to what was: a previous device that is away (or cannot be opened
                // again now) gets a driver that retries it, not none.
                self[keyPath: input] = old
                _ = reconcile(openNow: false)
                throw e
            }
        }
    }

    var currentPlaybackDevice: String { reconcileLock.withLock { playbackDevice } }

    /// vc_set_mixed_output_block_ms: the mixer thread renders blocks of `ms` (one of
    /// sinkBlockMs) in sink mode from now on (a running one with another block is
    /// restarted with it, on its schedule).
    func setSinkBlock(ms: Int) throws {
        guard OutputStage.sinkBlockMs.contains(ms) else {
            throw ClientError.invalidArgument("the mixed output's block must be 10 or 20 ms (got \(ms) ms)")
        }
        // No device is opened for it: the sink driver is restarted, or nothing runs
        // that renders for the sink now.
        reconcileLock.withLock {
            sinkBlock = ms * 48
            _ = reconcile(openNow: false)
        }
    }

    /// Sets or clears the mixed sink. Returns once a running call of the previous sink
    /// has returned (never call it from the render thread).
    func setSink(_ box: SinkBox?) {
        sink.set(box)
        reconcileLock.withLock { _ = reconcile(openNow: false) }
    }

    /// Sets or clears the per-speaker sink (the same rules as the mixed sink).
    func setSpeakerSink(_ box: SpeakerSinkBox?) throws {
        try reconcileLock.withLock {
            if let box {
                try prepareSpeakerConverters(wanted: true)
                // Before the sink: a render that sees the serial but still calls the sink
                // it replaces leaves the fade where it starts (handOutSpeakers).
                speakerSinkSerial.store(box.serial, ordering: .releasing)
            }
            speakerSink.set(box)
            _ = reconcile(openNow: false)
        }
    }

    /// The session came up or went away. Returns the device error when the playback
    /// device could not be opened (reported and counted, and the driver keeps trying on
    /// a backoff).
    @discardableResult
    func setConnected(_ on: Bool) -> ClientError? {
        reconcileLock.withLock { connected = on; return reconcile(openNow: false, reportAgain: on) }
    }

    func suspend() { reconcileLock.withLock { suspended = true; _ = reconcile(openNow: false) } }

    /// Reopens the playback device (if the mode wants one); returns its error, if any
    /// (reported and counted, and the driver keeps trying on a backoff). A device that is away (lost, or never
    /// opened: its driver retries on the backoff) is tried again now, so that the caller
    /// hears whether it can be opened.
    func restart() -> ClientError? {
        reconcileLock.withLock {
            // The mix starts again (nothing rendered it while suspended: a pull or a sink
            // may have gone on, and then the limiter's gain follows the audio as usual).
            let idleMs = MonotonicClock.milliseconds() &- lastRenderMs.load(ordering: .relaxed)
            if suspended && idleMs > 100 { renderLock.withLock { bus.resetLimiter() } }
            suspended = false
            return reconcile(openNow: false, retryAway: true, reportAgain: true)
        }
    }

    /// Destroy: no driver, no sink, every recording finished.
    func shutdown() {
        sink.set(nil)
        speakerSink.set(nil)
        reconcileLock.withLock {
            connected = false
            external = true
            _ = reconcile(openNow: false)
        }
        for ssrc in recorders.sources { try? stopRecording(ssrc: ssrc) }
    }

    // MARK: format

    private func readFormat() -> OutputFormat { renderLock.withLock { format } }

    var outputFormat: OutputFormat { readFormat() }

    /// vc_set_output_format: what the sinks, pulls and recordings get from now on.
    /// Refused while a recording runs (its file has the format of its start).
    func setOutputFormat(_ f: OutputFormat) throws {
        guard FormatConverter.rates.contains(f.sampleRate) else {
            throw ClientError.invalidArgument("sample_rate must be within 8000..192000 (got \(f.sampleRate))")
        }
        guard f.channels == 1 || f.channels == 2 else { throw ClientError.invalidArgument("channels must be 1 or 2 (got \(f.channels))") }
        try reconcileLock.withLock {
            guard recorders.isEmpty else {
                throw ClientError.state("a recording is running; stop it before changing the output format")
            }
            if f == readFormat() { return }
            // Everything is built here, on the caller's thread, then swapped in at once
            // between two renders (a driver keeps running: it copies each converted
            // block out under the render lock).
            let conv = try OutputStage.mixConverter(for: f, quality: quality)
            let speakers = try speakerConverters(for: f, wanted: speakerSink.isSet)
            let rest = UnsafeMutablePointer<Int16>.allocate(capacity: conv.maxOutFrames * f.channels)
            var old: (UnsafeMutablePointer<Int16>, FormatConverter, [FormatConverter?])
            old = renderLock.withLock {
                format = f
                // The new converters go on from the audio the old ones converted last,
                // not from silence (a talker heard through the change is not cut by the
                // filter delay's worth of zeros), and move from where the old output
                // left off into their own timeline (their filter delays differ, and a
                // pull's rest in the old format is dropped): no jump, no click.
                conv.splice(after: mixConverter, history: mixHistory, frames: OutputStage.block, unheardFrames: pullRestCount)
                let o = (pullRest, mixConverter, installSpeakerConverters(speakers, primed: true))
                mixConverter = conv
                pullRest = rest
                pullRestCount = 0
                pullRestHead = 0
                return o
            }
            old.0.deallocate()
            old.2.removeAll()   // the old converters are freed here, outside the render lock
        }
    }

    /// Makes sure every receive slot converts its tap to the output format when
    /// per-speaker blocks are wanted (reconcileLock held).
    private func prepareSpeakerConverters(wanted: Bool) throws {
        let f = readFormat()
        let fresh = try speakerConverters(for: f, wanted: wanted)
        var old = renderLock.withLock { installSpeakerConverters(fresh) }
        old.removeAll()   // freed outside the render lock
    }

    /// A converter to `f` for each receive slot (kept where one exists), or none when
    /// per-speaker blocks are not wanted or need no conversion (48 kHz stereo; but a
    /// slot converting to another format now gets one that passes its blocks through,
    /// so that the change back is spliced as the mix's is, not a jump).
    private func speakerConverters(for f: OutputFormat, wanted: Bool) throws -> [FormatConverter?] {
        guard wanted else { return Array(repeating: nil, count: receive.slots.count) }
        return try receive.slots.map { s in
            let current = renderLock.withLock { s.tapConverter }
            if let c = current, c.outRate == f.sampleRate, c.outChannels == f.channels { return c }
            if f.isNative && current == nil { return nil }
            return try OutputStage.mixConverter(for: f, quality: quality)
        }
    }

    /// Swaps the slots' converters (renderLock held); returns the ones replaced. A new
    /// converter starts with the slot's current stream (it has no memory to forget,
    /// and its start is as mixConverter says); a kept one goes on undisturbed.
    /// `primed`: a new one is spliced in after the old with the slot's last block (a format change: the
    /// stream goes on through it, as the mix's converter does).
    private func installSpeakerConverters(_ fresh: [FormatConverter?], primed: Bool = false) -> [FormatConverter?] {
        var replaced: [FormatConverter?] = []
        for (s, c) in zip(receive.slots, fresh) where s.tapConverter !== c {
            if primed, let c { c.splice(after: s.tapConverter, history: s.tap, frames: s.tapLastFrames) }
            replaced.append(s.tapConverter)
            s.tapConverter = c
            s.tapConvertedSSRC = s.tapSSRC
        }
        return replaced
    }

    // MARK: recordings

    /// vc_start_recording: records the mix (ssrc 0) or a remote stream to a WAV file
    /// in the output format.
    func startRecording(path: String, ssrc: UInt32) throws {
        try reconcileLock.withLock {
            if ssrc != 0 { _ = try receive.withSlot(ssrc: ssrc) { $0.ssrc } }
            let f = readFormat()
            try recorders.checkCanAdd(ssrc: ssrc, path: path)
            if ssrc != 0 { try prepareSpeakerConverters(wanted: true) }
            let r = try Recorder(ssrc: ssrc, path: path, sampleRate: f.sampleRate, channels: f.channels) { [weak self] why in
                var e = ClientEvent(type: .error)
                e.code = VC_ERR_DEVICE
                e.ssrc = ssrc
                e.text = why
                self?.events.raise(e)
            }
            do { try recorders.add(r) } catch {
                r.finish()
                throw error
            }
            // The stream may have been removed since it was looked up (before the
            // recording could be told): then it records nothing, even if the ssrc returns.
            if ssrc != 0 && (try? receive.withSlot(ssrc: ssrc) { _ in true }) == nil { r.sourceEnded.store(true, ordering: .relaxed) }
            _ = reconcile(openNow: false)
        }
    }

    /// vc_stop_recording: finishes the recording of `ssrc` (0: the mix).
    func stopRecording(ssrc: UInt32) throws {
        let r: Recorder = try reconcileLock.withLock {
            guard let r = recorders.remove(ssrc: ssrc) else {
                throw ClientError.notFound(ssrc == 0 ? "the mix is not being recorded" : "ssrc \(ssrc) is not being recorded")
            }
            _ = reconcile(openNow: false)
            return r
        }
        if let incomplete = r.finish() { throw ClientError.device(incomplete) }
    }

    // MARK: modes

    /// Computes the mode the inputs ask for and makes it so (reconcileLock held).
    /// `openNow`: a device that cannot be opened is an error and nothing starts.
    /// Otherwise one that cannot be is returned and retried by the driver started
    /// without it: a failure (playbackFailed) unless it is already reported as down,
    /// or `reportAgain` (vc_connect, vc_audio_restart: the host asked for it now).
    /// `retryAway`: a device driver whose device is away is replaced, so the device is
    /// tried now (DEVICE_RESTORED when it opens, as the driver's own retry raises; when
    /// it does not, the error is returned and the new driver retries as the old did).
    private func reconcile(openNow: Bool, retryAway: Bool = false, reportAgain: Bool = false) -> ClientError? {
        let want: Mode
        if !external && connected && !suspended {
            want = .device
        } else if external && sink.isSet {
            want = .sink
        } else if speakerSink.isSet || !recorders.isEmpty {
            want = .background
        } else {
            want = .pull
        }
        let block = want == .sink ? sinkBlock : OutputStage.block
        var wasAway = false
        if let d = driver, d.mode == want, want != .device || d.deviceName == playbackDevice, d.blockFrames == block {
            guard retryAway && want == .device && d.deviceAway.load() != 0 else { return nil }
            wasAway = true
        }
        if driver == nil && want == .pull { return nil }
        // Stop what runs; the mix is the pull callers' until the next driver starts,
        // which takes over its schedule.
        var previous: RenderDriver.Schedule? = stoppedSchedule
        stoppedSchedule = nil
        if let d = driver {
            previous = d.stopAndJoin()
            driver = nil
            setMode(.pull)
        }
        guard want != .pull else { return nil }
        var first: PlaybackDevice? = nil
        var failure: ClientError? = nil
        if want == .device {
            // A device that was away and still is: the driver goes on retrying it on
            // the stopped one's schedule, and the caller is told.
            do { first = try PlaybackDevice.open(backend: backend, name: playbackDevice, quality: quality) } catch let e as ClientError {
                failure = e
            } catch {
                failure = .device("\(error)")
            }
            if failure != nil && openNow && !wasAway {
                stoppedSchedule = previous
                return failure
            }
        }
        if first != nil {
            playbackOpened(playbackDevice)
        } else if let f = failure, !openNow, reportAgain || playbackDown.load() == 0 {
            playbackFailed(f.description)
        }
        setMode(want)
        driver = RenderDriver(mode: want, stage: self, deviceName: playbackDevice, device: first, startsDown: failure != nil,
                              blockFrames: block, after: previous)
        return failure
    }

    private func setMode(_ m: Mode) {
        let v: Int
        let oneBlockAtATime: Bool   // a driver renders one block at a time: no burst to keep in hand
        switch m {
        case .pull: v = 0; oneBlockAtATime = false
        case .sink: v = 1; oneBlockAtATime = true
        case .device: v = 2; oneBlockAtATime = true
        case .background: v = 3; oneBlockAtATime = false
        }
        renderLock.withLock {
            modeValue.store(v, ordering: .releasing)
            if oneBlockAtATime, burstBlocks > 1 {
                burstBlocks = 0
                receive.setConsumerBurst(ms: 0)
            }
        }
    }

    /// Something takes the rendered blocks besides the device: a sink, or a recording.
    fileprivate var hasTaps: Bool { sink.isSet || speakerSink.isSet || !recorders.isEmpty }

    // MARK: rendering

    /// vc_read_mixed_pcm: renders `frames` in the output format on the caller's
    /// thread, in pull and background modes.
    func pull(into out: UnsafeMutablePointer<Int16>, frames: Int) throws {
        try pull(frames: frames) { src, n, at, ch in (out + at * ch).update(from: src, count: n * ch) }
    }

    /// vc_read_mixed_pcm_f32: the same, as float (full scale ±1.0).
    func pullFloat(into out: UnsafeMutablePointer<Float>, frames: Int) throws {
        try pull(frames: frames) { src, n, at, ch in
            let dst = out + at * ch
            for i in 0..<(n * ch) { dst[i] = floatSample(src[i]) }
        }
    }

    /// Renders until `frames` output frames were emitted: `emit(pcm, frames, at, channels)`.
    private func pull(frames: Int, emit: (UnsafePointer<Int16>, Int, Int, Int) -> Void) throws {
        // Any client's: the sink holds that client's render lock, and a pull of another
        // client's mix takes this one's (two such pulls, each from the other's sink,
        // wait for each other).
        if OutputStage.insideSpeakerSink.isSet {
            throw ClientError.state("vc_read_mixed_pcm cannot be called from inside a per-speaker sink (of any client)")
        }
        // The log callback may run while its thread holds a render lock (a failing call
        // made from a per-speaker sink): a pull there could wait for a render that waits
        // for it. It has no use there.
        if ClientLog.callingThreadIsInside {
            throw ClientError.state("vc_read_mixed_pcm cannot be called from inside the log callback")
        }
        if let e = refusal() { throw e }
        renderLock.lock()
        defer { renderLock.unlock() }
        if let e = refusal() { throw e }
        // Nothing to render: not a pull (no clock, burst or background yield moves).
        guard frames > 0 else { return }
        let now = MonotonicClock.nanoseconds()
        let audioNs = UInt64(frames) * 1_000_000_000 / UInt64(format.sampleRate)
        pullHorizonNs = min(max(pullHorizonNs, now) &+ audioNs, now &+ 1_000_000_000)
        pullMarginNs = max(40_000_000, audioNs / 2 + 20_000_000)
        let ch = format.channels
        // The blocks this pull renders, known before it renders them: the jitter
        // buffers learn the burst before its first frame is played.
        let rate = format.sampleRate
        let fresh = max(0, frames - pullRestCount)
        noteBurst(blocks: (fresh * 48000 / rate + OutputStage.block - 1) / OutputStage.block, nowNs: now)
        var done = 0
        while done < frames {
            if pullRestCount > 0 {
                let n = min(pullRestCount, frames - done)
                emit(pullRest + pullRestHead * ch, n, done, ch)
                pullRestHead += n
                pullRestCount -= n
                done += n
                continue
            }
            // Enough 48 kHz frames for what is still missing, at most one block; a whole
            // block after an output format change, whose first block moves from the old
            // converters' timeline into the new ones' (a pull of a few frames had no
            // room for it: the audio jumped back by the filter delays' difference).
            let need = frames - done
            let chunk = mixConverter.splicePending ? OutputStage.block
                : rate == 48000 ? min(OutputStage.block, need) : max(1, min(OutputStage.block, (need * 48000 + rate - 1) / rate))
            var noDevice: DevicePhase? = nil   // the host's clock: the whole block is played
            renderBlock(into: pullMix, frames: chunk, device: &noDevice, card: nil)
            let (p, n) = handOutMix(pullMix, frames: chunk)
            let take = min(n, need)
            if take > 0 { emit(p, take, done, ch) }
            if n > take {
                (pullRest).update(from: p + take * ch, count: (n - take) * ch)
                pullRestHead = 0
                pullRestCount = n - take
            }
            done += take
        }
    }

    /// A pull rendered `blocks` blocks at once (renderLock held): more than one, and
    /// its audio is all taken now (see burstBlocks).
    private func noteBurst(blocks: Int, nowNs: UInt64) {
        let before = burstBlocks
        if blocks >= burstBlocks || nowNs &- burstSinceNs > OutputStage.burstHoldNs {
            burstBlocks = blocks
            burstSinceNs = nowNs
        }
        // One block is no burst: the receive set hears only when "several" changes.
        let held = burstBlocks > 1 ? burstBlocks : 0
        if held != (before > 1 ? before : 0) {
            receive.setConsumerBurst(ms: Double(held * OutputStage.block) / 48)
        }
    }

    private func refusal() -> ClientError? {
        switch mode {
        case .pull, .background: return nil
        case .sink: return .state("a mixed-output sink is set: the client's mixer thread owns the mix (clear the sink to pull)")
        case .device: return .state("the playback device plays the mix (use external playback to pull it)")
        }
    }

    /// The driver's render of one block into `buf` (48 kHz stereo), and the block in
    /// the output format copied into `out` (maxOutFrames × 2) for the mixed sink,
    /// which runs after the render lock is released. `device`: a device driver's moves
    /// (nil: another driver), and `card` (room for `frames`; nil: no card open) what the
    /// card is to play of the block (DevicePhase.fit: a silent cut or a glide). Returns
    /// the block's frames and channels in the output format, what it played, and the
    /// frames written to `card` (`frames` without one); nil when a background driver
    /// yields to the host's pulls.
    fileprivate func renderForDriver(into buf: UnsafeMutablePointer<Int16>, frames: Int, mode: Mode,
                                     out: UnsafeMutablePointer<Int16>, device: inout DevicePhase?, card: UnsafeMutablePointer<Int16>?)
        -> (frames: Int, channels: Int, rate: Int, played: PlayedBlock, cardFrames: Int)? {
        renderLock.lock()
        defer { renderLock.unlock() }
        if mode == .background && pullHorizonNs &+ pullMarginNs > MonotonicClock.nanoseconds() {
            return nil
        }
        // A background driver renders a block at a time once the host stopped pulling:
        // the pulls' burst is let go as after smaller pulls (held 2 s).
        if mode == .background { noteBurst(blocks: 1, nowNs: MonotonicClock.nanoseconds()) }
        let played = renderBlock(into: buf, frames: frames, fixedBlock: true, device: &device, card: card)
        let (p, n) = handOutMix(buf, frames: frames)
        if mode != .background { out.update(from: p, count: n * format.channels) }
        return (n, format.channels, format.sampleRate, played.played, played.cardFrames)
    }

    /// The driver's block for the mixed sink `box` (`pcm`, the sink's own copy): faded
    /// in when `box` is not the sink the last block went to (driver thread).
    fileprivate func fadeForSink(_ box: SinkBox, _ pcm: UnsafeMutablePointer<Int16>, frames: Int, channels: Int, rate: Int) {
        if box.serial != sinkServed {
            sinkServed = box.serial
            sinkFadeDone = 0
        }
        sinkFadeDone = FadeIn.apply(pcm, frames: frames, channels: channels, done: sinkFadeDone, total: FadeIn.frames(at: rate))
    }

    /// Renders `frames` (≤ block) of the final 48 kHz stereo mix and hands each
    /// speaker's block to the per-speaker sink and its recording (renderLock held).
    /// `device`: a device driver's moves, which decide what of the block the card
    /// plays, written to `card` (DevicePhase: a silent cut before a talkspurt, or the
    /// block played a little faster; its next block comes that much earlier). Returns
    /// what the block played, for the driver's phase, and the frames for the card.
    @discardableResult
    private func renderBlock(into out: UnsafeMutablePointer<Int16>, frames: Int, fixedBlock: Bool = false,
                             device: inout DevicePhase?, card: UnsafeMutablePointer<Int16>?) -> (played: PlayedBlock, cardFrames: Int) {
        let nowNs = MonotonicClock.nanoseconds()
        lastRenderMs.store(nowNs / 1_000_000, ordering: .relaxed)
        // What arrived up to now is played by this render (the clock is read first: a
        // frame that comes during the read counts as after this render).
        receive.readForRender()
        let tapping = speakerSink.isSet || recorders.recordsSpeakers
        if tapping != tapsWereOn {
            tapsWereOn = tapping
            if tapping { startTapFade() }
        }
        bus.clear(frames: frames)
        let played = receive.render(into: bus, frames: frames, nowMs: Double(nowNs) / 1e6, tap: tapping, fixedBlock: fixedBlock)
        bus.render(into: out, frames: frames)
        var playedPCM = out, cardFrames = frames
        if device != nil, let c = card {
            let cut = played.silentCut(out, frames: frames)
            let move = device!.move(after: played, cut: cut, frames: frames)
            cardFrames = DevicePhase.fit(out, frames: frames, move: move, silent: cut > 0, into: c)
            playedPCM = c
        }
        // The echo canceller's far-end reference: what is played (the card's block: a
        // cut or glide counted in as a whole block would leave the reference that much
        // behind the card).
        if streams.aecStreams.load() > 0 { streams.farEnd.pushStereo(playedPCM, frames: cardFrames) }
        if tapping { handOutSpeakers(frames: frames) }
        return (played, cardFrames)
    }

    /// The taps start (a per-speaker sink set, a speaker's recording started, with
    /// neither running): every consumer is new, so the slots' converters forget what
    /// they converted when taps last ran, and the first blocks fade in (renderLock held).
    private func startTapFade() {
        for s in receive.slots { s.tapConverter?.reset() }
        tapFadeDone = 0
    }

    /// Each tapped slot's block, converted, to the per-speaker sink and its recording.
    private func handOutSpeakers(frames rendered: Int) {
        let slots = receive.slots
        let recordSpeakers = recorders.recordsSpeakers
        let fadeFrom = tapFadeDone
        let serial = speakerSinkSerial.load(ordering: .acquiring)
        if serial != speakerServed {
            speakerServed = serial
            speakerFadeDone = fadeFrom < OutputStage.tapFadeFrames ? Int.max : 0
        }
        var servedNew = false, servedOld = false
        OutputStage.insideSpeakerSink.enter()
        defer { OutputStage.insideSpeakerSink.leave() }
        for i in 0..<slots.count {
            let s = slots[i]
            guard s.tapFrames > 0 else { continue }
            FadeIn.apply(s.tap, frames: s.tapFrames, channels: 2, done: fadeFrom, total: OutputStage.tapFadeFrames)
            var pcm = UnsafePointer(s.tap)
            var frames = s.tapFrames
            var channels = 2
            if let conv = s.tapConverter {
                if s.tapConvertedSSRC != s.tapSSRC {
                    conv.reset()   // keeps the filter delay: in step with the mix (mixConverter)
                    s.tapConvertedSSRC = s.tapSSRC
                }
                (pcm, frames) = conv.convert(pcm, frames: frames)
                channels = conv.outChannels
            }
            s.tapLastFrames = s.tapFrames
            s.tapFrames = 0
            guard frames > 0 else { continue }
            let block = SpeakerBlock(ssrc: s.tapSSRC, userID: s.tapUserID, kind: s.tapKind, pcm: pcm, frames: frames, channels: channels)
            if recordSpeakers { recorders.push(ssrc: block.ssrc, pcm, frames: frames, fadedIn: fadeFrom == 0) }
            speakerSink.call { box in
                if box.serial == serial {
                    // The tap's or the converter's buffer: the caller's until its next block.
                    FadeIn.apply(UnsafeMutablePointer(mutating: pcm), frames: frames, channels: channels, done: speakerFadeDone,
                                 total: FadeIn.frames(at: format.sampleRate))
                    servedNew = true
                } else {
                    servedOld = true   // the sink being replaced (set between the serial and the box)
                }
                box.deliver(block)
            }
        }
        // The fade goes on with the render's clock, unless only the sink it replaces was called.
        if speakerFadeDone < FadeIn.frames(at: format.sampleRate) && (servedNew || !servedOld) {
            speakerFadeDone += rendered * format.sampleRate / 48000
        }
        // The fade runs on the render's clock: a stream that starts later starts as
        // its codec starts it, unfaded.
        if fadeFrom < OutputStage.tapFadeFrames { tapFadeDone = fadeFrom + rendered }
    }

    /// The mix block in the output format, recorded if the mix is (renderLock held).
    private func handOutMix(_ mix: UnsafeMutablePointer<Int16>, frames: Int) -> (UnsafePointer<Int16>, Int) {
        let (p, n) = mixConverter.convert(mix, frames: frames)
        if recorders.recordsMix && n > 0 { recorders.push(ssrc: 0, p, frames: n) }
        // The history keeps the newest block's worth (a pull's chunk may be shorter).
        let keep = OutputStage.block - min(frames, OutputStage.block)
        for i in 0..<(keep * 2) { mixHistory[i] = mixHistory[i + frames * 2] }
        (mixHistory + keep * 2).update(from: mix + (frames - (OutputStage.block - keep)) * 2, count: (OutputStage.block - keep) * 2)
        return (p, n)
    }

    fileprivate func raise(_ e: ClientEvent) { events.raise(e) }
    /// The playback device failed, stalled or could not be opened, and its driver
    /// retries it on a backoff: the one place that counts it (vc_playback_stats
    /// device_failures) and raises its VC_EVENT_ERROR, so each event has its count.
    fileprivate func playbackFailed(_ reason: String) {
        deviceFailures.add(1)
        deviceHeldUs.store(0)
        playbackDown.store(1)
        raise(.deviceFailed(VC_DEVICE_PLAYBACK, reason: reason))
    }
    /// A playback device opened: DEVICE_RESTORED when one was reported down. (The
    /// render thread and reconcile never run it at once: reconcile joins the driver.)
    fileprivate func playbackOpened(_ name: String) {
        guard playbackDown.load() != 0 else { return }
        playbackDown.store(0)
        raise(.deviceRestored(VC_DEVICE_PLAYBACK, name: name))
    }
    /// The driver's ticks move `ms` earlier (negative: later) from the next one on.
    fileprivate func moveClocks(earlierByMs ms: Double) { receive.moveClocks(earlierByMs: ms) }
    fileprivate var deviceBackend: AudioBackend { backend }
    fileprivate var resamplerQuality: Int { quality }
}

/// An open playback device and the converter from the mix's 48 kHz to its rate.
final class PlaybackDevice {
    let device: AudioDevice
    let converter: FormatConverter?
    /// What a card holds when the next block is rendered (its frames): a block for a
    /// render that wakes late, and a period, since a card may tell its position only
    /// in steps of one (then it holds less than it says by up to a period). Less (at
    /// least a period) when its buffer cannot take that and two blocks: a block
    /// written then would wait for room, and a card that stalled kept it for ever.
    let leadFrames: Int
    /// The last write started the card again with its lead in silence (the first, or
    /// one after an underrun): what it holds is not the last block's count plus one.
    private(set) var restarted = false
    /// The lead in silence, written just before the first block (`primed`): a card
    /// started with the first block alone took a second one at once, a tick its
    /// streams' buffers had no frame for yet (a concealed frame and a period more delay
    /// after every device switch or reopen). Written by the render thread, not at open
    /// (on the host's thread, a driver's start later: the card could run dry first).
    private let silence: UnsafeMutablePointer<Int16>
    private var primed = false

    /// ALSA periods of 5 ms in a buffer of 80 ms: the lead is 25 ms.
    static let periodMs = 5

    private init(device: AudioDevice, converter: FormatConverter?) {
        self.device = device
        self.converter = converter
        let block = device.sampleRate / 50
        leadFrames = max(device.periodFrames, min(block + device.periodFrames, device.bufferFrames - 2 * block))
        silence = .allocate(capacity: leadFrames * device.channels)
        silence.initialize(repeating: 0, count: leadFrames * device.channels)
    }

    deinit { silence.deallocate() }

    static func open(backend: AudioBackend, name: String, quality: Int) throws -> PlaybackDevice {
        let d: AudioDevice
        do {
            d = try backend.open(name, direction: .playback, channels: 2, sampleRate: 48000, periodFrames: 48 * periodMs)
        } catch { throw ClientError.device("\(error)") }
        guard d.sampleRate != 48000 || d.channels != 2 else { return PlaybackDevice(device: d, converter: nil) }
        do {
            // The device's buffer takes blocks of any length: the filter delay is skipped
            // (0.75 ms less latency at 44.1 kHz, 4 ms at 8 kHz). A mono-only device
            // (a USB headset's) gets the mix downmixed.
            let c = try FormatConverter(inRate: 48000, outRate: d.sampleRate, inChannels: 2, outChannels: d.channels,
                                        maxInFrames: OutputStage.block, quality: quality, skipFilterDelay: true)
            return PlaybackDevice(device: d, converter: c)
        } catch {
            d.close()
            throw ClientError.device("playback device \"\(name)\" runs at \(d.sampleRate) Hz: \(error)")
        }
    }

    /// Plays one 48 kHz stereo block, after the lead in silence the first time and
    /// when a card is seen to have run dry (an underrun, not yet recovered: it starts
    /// again as it did the first time; one recovered inside the write starts with the
    /// block alone).
    func write(_ pcm: UnsafePointer<Int16>, frames: Int) throws {
        restarted = !primed || device.heldFrames() == 0
        if restarted {
            primed = true
            try device.write(silence, frames: leadFrames)
        }
        if let c = converter {
            let (p, n) = c.convert(pcm, frames: frames)
            if n > 0 { try device.write(p, frames: n) }
        } else {
            try device.write(pcm, frames: frames)
        }
    }
}

/// The one thread that renders the mix in device, sink or background mode, paced to
/// the clock (or to a card's clock, when it runs in real time).
final class RenderDriver {
    let mode: OutputStage.Mode
    let deviceName: String
    /// Frames of each render (48 kHz): OutputStage.block, or the sink's block.
    let blockFrames: Int
    /// 1 while a device driver has no device (it failed, or could not be opened, and
    /// is retried on a backoff); written by the driver's thread.
    let deviceAway = AtomicCounter()
    private let stop = StopFlag()
    private let wakeup = Condition()
    private var thread: SystemThread?
    /// Where a stopped driver's schedule was, for the driver that replaces it: written
    /// by the driver's thread as it ends, read after it was joined.
    final class Schedule: @unchecked Sendable {
        /// When the block it did not render was due (monotonic ns; 0: none).
        var nextDueNs: UInt64 = 0
        /// Its RenderPhase lead (ms), and its blocks (frames).
        var leadMs = 0.0
        var blockFrames = 0
    }
    private let schedule = Schedule()

    /// `after`: the schedule of the driver this one replaces (nil: none just stopped).
    init(mode: OutputStage.Mode, stage: OutputStage, deviceName: String, device: PlaybackDevice?, startsDown: Bool, blockFrames: Int,
         after previous: Schedule?) {
        self.mode = mode
        self.deviceName = deviceName
        self.blockFrames = blockFrames
        schedule.blockFrames = blockFrames
        deviceAway.store(mode == .device && device == nil ? 1 : 0)
        let stop = self.stop, wakeup = self.wakeup, schedule = self.schedule, away = deviceAway
        thread = SystemThread(name: mode == .device ? "vc-playback" : "vc-mixer") { [unowned stage] in
            RenderDriver.run(stage: stage, mode: mode, deviceName: deviceName, first: device, startsDown: startsDown,
                             frames: blockFrames, previous: previous, schedule: schedule, away: away, stop: stop, wakeup: wakeup)
        }
    }

    /// Stops the thread; returns where its schedule was.
    @discardableResult
    func stopAndJoin() -> Schedule {
        wakeup.withLock { stop.set(); wakeup.broadcast() }
        thread?.join()
        thread = nil
        return schedule
    }

    private static func run(stage: OutputStage, mode: OutputStage.Mode, deviceName: String, first: PlaybackDevice?, startsDown: Bool,
                            frames: Int, previous: Schedule?, schedule: Schedule, away: AtomicCounter, stop: StopFlag,
                            wakeup: Condition) {
        if let owner = stage.owner { ThreadIdentity.mark(owner: owner, role: ThreadRole.render.rawValue) }
        defer { ThreadIdentity.clear() }
        let buf = UnsafeMutablePointer<Int16>.allocate(capacity: frames * 2)
        buf.initialize(repeating: 0, count: frames * 2)
        let card = UnsafeMutablePointer<Int16>.allocate(capacity: frames * 2)   // what the card plays of buf
        card.initialize(repeating: 0, count: frames * 2)
        let out = UnsafeMutablePointer<Int16>.allocate(capacity: OutputStage.maxOutFrames * 2)
        out.initialize(repeating: 0, count: OutputStage.maxOutFrames * 2)
        defer { buf.deallocate(); card.deallocate(); out.deallocate() }
        var device = first
        var backoffMs: UInt64 = 250
        var retryAtMs = MonotonicClock.milliseconds() + (startsDown ? backoffMs : 0)
        var stallBackoff = StallBackoff()
        var pacer = PeriodPacer(periodFrames: frames)
        // A driver that replaces another (a new block length, another mode) takes over
        // its schedule: its first block comes when the other's next one was due, so
        // the jitter buffers' ticks do not jump earlier (a jump nobody is told of makes
        // every arrival after it look late).
        // Its phase starts from the other's lead, so it stays within the bounds the
        // header promises across the change. A longer block than the other's comes
        // that much later: it is decided when the last of the shorter blocks it covers
        // would have been (a 20 ms block after 10 ms ones holds a frame that a slot
        // would otherwise decode 10 ms before its tick, and miss).
        let due = previous?.nextDueNs ?? 0
        let startNs = MonotonicClock.nanoseconds()
        var leadMs = 0.0
        // (The other stops when it wakes for its next block, so that is often just past.)
        if let p = previous, due != 0 && due + 20_000_000 >= startNs && due <= startNs + 20_000_000 {
            let longerNs = frames > p.blockFrames ? UInt64(frames - p.blockFrames) * 1_000_000_000 / 48000 : 0
            pacer.resume(at: due + longerNs)
            pacer.wait()
            leadMs = p.leadMs - Double(longerNs) / 1e6
        }
        // Only the sink driver picks its own phase; a device's clock is the device's, which
        // its driver moves by what it writes (DevicePhase).
        var phase = RenderPhase(periodMs: Double(frames) / 48, leadMs: mode == .sink ? leadMs : 0)
        var devicePhase: DevicePhase? = mode == .device ? DevicePhase(periodMs: Double(frames) / 48) : nil
        // What the driver that replaces this one takes over (read after the join).
        var nextDueNs: UInt64 = 0
        defer {
            schedule.nextDueNs = nextDueNs
            schedule.leadMs = phase.leadMs
        }
        // The device failed or stalled: closed, counted and reported, retried later.
        func lose(_ reason: String, retryInMs: UInt64) {
            device?.device.close()
            device = nil
            away.store(1)
            retryAtMs = MonotonicClock.milliseconds() + retryInMs
            stage.playbackFailed(reason)
        }
        // The length of the block last written to the device (48 kHz frames; shorter for a
        // silent cut or a glide).
        var written = frames
        while !stop.isSet {
            if mode == .device && device == nil {
                let now = MonotonicClock.milliseconds()
                if now >= retryAtMs {
                    if let d = try? PlaybackDevice.open(backend: stage.deviceBackend, name: deviceName, quality: stage.resamplerQuality) {
                        device = d
                        away.store(0)
                        backoffMs = 250
                        pacer = PeriodPacer(periodFrames: frames)
                        // (What the glide counted of the blocks before the outage says
                        // nothing of this card's clock.)
                        devicePhase = DevicePhase(periodMs: Double(frames) / 48)
                        stage.playbackOpened(deviceName)
                    } else {
                        retryAtMs = now + backoffMs
                        backoffMs = min(backoffMs * 2, 5000)
                    }
                }
                // Nothing consumes the mix while the device is away and nothing taps
                // it: render nothing (the streams' clocks wait) until the next try.
                if device == nil && !stage.hasTaps {
                    wakeup.withLock { if !stop.isSet { wakeup.wait(untilMs: retryAtMs) } }
                    continue
                }
            }
            // (No card: nothing is moved; the taps' clock stays the schedule's.)
            let rendered = stage.renderForDriver(into: buf, frames: frames, mode: mode, out: out, device: &devicePhase,
                                                 card: device != nil ? card : nil)
            if let (n, channels, rate, played, cardFrames) = rendered {
                // Frames all had time to spare: the next block comes that much earlier.
                if mode == .sink {
                    let moved = phase.rendered(played)
                    if moved != 0 {
                        // The jitter buffers first: they take it at their next tick, and
                        // place what arrives until then on the grid it is moved to.
                        stage.moveClocks(earlierByMs: moved)
                        pacer.move(earlierByNs: Int64(moved * 1e6))
                    }
                }
                // The background driver has no mixed sink to feed (reconcile would have
                // chosen the sink mode); the device and sink drivers do.
                if mode != .background && n > 0 {
                    stage.sink.call { box in
                        stage.fadeForSink(box, out, frames: n, channels: channels, rate: rate)
                        box.deliver(out, n, channels)
                    }
                }
                if let d = device {
                    // The card is written a shorter block (DevicePhase): silence cut short
                    // where a talkspurt's first frame waits for its cushion, or the block
                    // played a little faster while frames had time to spare. Its next
                    // block, and every stream's next tick, come that much earlier.
                    let move = frames - cardFrames
                    if move > 0 {
                        stage.moveClocks(earlierByMs: Double(move) / 48)
                        pacer.move(earlierByNs: Int64(move) * 1_000_000 / 48)
                    }
                    written = cardFrames
                    do { try d.write(card, frames: cardFrames) } catch { lose("\(error)", retryInMs: backoffMs) }
                    stage.deviceUnderruns.add(d.device.takeXruns())
                }
            }
            if let p = device, let held = p.device.heldFrames() {
                stage.deviceHeldUs.store(held * 1_000_000 / p.device.sampleRate)
                // A card plays on its own clock: the blocks follow it, so that it holds
                // its lead when the next one is rendered (it does not run dry for a
                // render that wakes a little late) and its buffer does not drift towards
                // empty or full (paced to the monotonic clock alone, a card that ran a
                // little fast underran every few seconds, and every period at 1 %).
                if let due = pacer.wait(for: p.device, held: held, lead: p.leadFrames, block: written * p.device.sampleRate / 48000,
                                        restarted: p.restarted, stopped: { stop.isSet }) {
                    nextDueNs = due
                    stallBackoff.moved()
                } else {
                    // A card that opens and then stalls again (a sound server's stream
                    // suspended) is retried ever less often, as one that cannot be opened.
                    lose("playback device \"\(deviceName)\" stopped playing: it played nothing of what it held for "
                         + "\(PeriodPacer.cardStallNs / 1_000_000) ms", retryInMs: stallBackoff.stalled())
                }
            } else {
                // (No card, or one that does not run in real time: it holds nothing.)
                stage.deviceHeldUs.store(0)
                nextDueNs = pacer.nextDueNs
                pacer.wait()
            }
        }
        device?.device.close()
        stage.deviceHeldUs.store(0)
    }
}
