// Device capture: one thread per device-fed stream, reading 20 ms periods from the
// client's AudioBackend into the stream. Each thread owns its device; stopping joins
// the thread before the device is closed. A device that fails is reported
// (VC_EVENT_ERROR, VC_ERR_DEVICE), reopened on a backoff, and reported again when it
// is back (VC_EVENT_DEVICE_RESTORED). Playback is the output stage's (OutputStage).
import Glibc
import VoiceCatABI
import VoiceCatAudio
import VoiceCatDevices
import VoiceCatSystem

extension ClientEvent {
    /// A device failed and is reopened on a backoff (logged too).
    static func deviceFailed(_ kind: vc_device_kind, reason: String, streamID: UInt32 = 0) -> ClientEvent {
        ClientLog.log(1, "\(reason); reopening")
        var e = ClientEvent(type: VC_EVENT_ERROR)
        e.code = VC_ERR_DEVICE
        e.kind = UInt32(kind.rawValue)
        e.streamID = streamID
        e.text = "\(reason); reopening"
        return e
    }

    /// A failed device is back (logged too).
    static func deviceRestored(_ kind: vc_device_kind, name: String, streamID: UInt32 = 0) -> ClientEvent {
        ClientLog.log(2, "\(kind == VC_DEVICE_CAPTURE ? "capture" : "playback") device \"\(name)\" is back")
        var e = ClientEvent(type: VC_EVENT_DEVICE_RESTORED)
        e.kind = UInt32(kind.rawValue)
        e.streamID = streamID
        e.text = name
        return e
    }
}

/// Captures from a device into one stream slot.
final class CaptureWorker {
    let device: String
    let channels: Int
    /// The rate asked of the device (it may give another: then it is resampled).
    let sampleRate: Int
    private let stop = StopFlag()
    private let wakeup = Condition()
    private var thread: SystemThread?

    /// What a worker does when its device cannot be opened as it starts.
    enum IfAway {
        /// The start fails (VC_ERR_DEVICE at once).
        case fail
        /// The thread starts without it and reopens it on the backoff, as one lost while
        /// running: counted and reported (VC_EVENT_ERROR) as a failure...
        case retry
        /// ...or not, when it is the device that was away already (reported when it went).
        case retrySilently
    }

    /// Why the device could not be opened when the worker started retrying it; nil
    /// when it opened.
    private(set) var openError: ClientError?
    /// 1 while the device is away (lost, or not opened yet) and the thread retries it.
    let deviceAway = AtomicCounter()

    /// Opens the device now (so the caller gets VC_ERR_DEVICE at once), or takes the
    /// one the caller opened (`opened`, same device, channels and rate), and starts the
    /// thread. A device that cannot be opened is as `ifAway` says (`openError` says why;
    /// VC_EVENT_DEVICE_RESTORED when it is back).
    init(owner: AnyObject, backend: AudioBackend, device: String, channels: Int, sampleRate: Int, quality: Int, slot: StreamSlot,
         streamID: UInt32, streams: StreamTable, opened: Capture? = nil, ifAway: IfAway = .fail,
         raise: @escaping (ClientEvent) -> Void) throws {
        self.device = device
        self.channels = channels
        self.sampleRate = sampleRate
        var first: Capture? = opened
        if first == nil {
            do {
                first = try Capture.open(backend: backend, device: device, channels: channels, sampleRate: sampleRate, quality: quality)
            } catch let e as ClientError where ifAway != .fail {
                openError = e
                if ifAway == .retry {
                    CaptureWorker.failed(e.description, overruns: 0, slot: slot, streamID: streamID, raise: raise)
                }
            }
        }
        let stop = self.stop, wakeup = self.wakeup, away = deviceAway
        away.store(first == nil ? 1 : 0)
        thread = SystemThread(name: "vc-capture") { [unowned owner] in
            ThreadIdentity.mark(owner: owner, role: ThreadRole.capture.rawValue)
            CaptureWorker.run(first: first, backend: backend, device: device, channels: channels, sampleRate: sampleRate,
                              quality: quality, slot: slot, streamID: streamID, streams: streams, stop: stop, wakeup: wakeup,
                              away: away, raise: raise)
        }
    }

    /// An open capture device, its 20 ms period at the rate it runs at, and the
    /// converter to 48 kHz and the stream's channels when the device runs at another
    /// rate or offers only the other channel count (a stereo-only card for a mono
    /// stream is downmixed, a mono microphone for a stereo one read as L = R).
    struct Capture {
        let device: AudioDevice
        let period: Int
        let converter: FormatConverter?

        static func open(backend: AudioBackend, device: String, channels: Int, sampleRate: Int, quality: Int) throws -> Capture {
            let d: AudioDevice
            do {
                d = try backend.open(device, direction: .capture, channels: channels, sampleRate: sampleRate, periodFrames: sampleRate / 50)
            } catch let e as ClientError { throw e } catch {
                throw ClientError.device("\(error)")
            }
            guard FormatConverter.rates.contains(d.sampleRate) else {
                d.close()
                throw ClientError.device("capture device \"\(device)\" runs at \(d.sampleRate) Hz, outside 8000..192000")
            }
            let period = d.sampleRate / 50
            var conv: FormatConverter? = nil
            if d.sampleRate != 48000 || d.channels != channels {
                // The filter delay is kept: each period then converts to a whole frame
                // at once (skipped, the first came out short by it and every frame
                // waited for the next period, 20 ms more delay for good).
                do {
                    conv = try FormatConverter(inRate: d.sampleRate, outRate: 48000, inChannels: d.channels, outChannels: channels,
                                               maxInFrames: period, quality: quality)
                } catch {
                    d.close()
                    throw ClientError.device("capture device \"\(device)\": \(error)")
                }
            }
            return Capture(device: d, period: period, converter: conv)
        }
    }

    /// The stream's capture device failed, stalled or could not be opened, and is
    /// retried on the backoff: the one place that counts it on the stream
    /// (vc_send_stats device_failures, with the overruns before it) and raises its
    /// VC_EVENT_ERROR, so each event has its count.
    private static func failed(_ reason: String, overruns: Int, slot: StreamSlot, streamID: UInt32,
                               raise: (ClientEvent) -> Void) {
        slot.lock.withLock {
            guard let s = slot.stream, s.streamID == streamID else { return }
            s.deviceOverruns += UInt64(overruns)
            s.deviceFailures += 1
        }
        raise(.deviceFailed(VC_DEVICE_CAPTURE, reason: reason, streamID: streamID))
    }

    private static func run(first: Capture?, backend: AudioBackend, device: String, channels: Int, sampleRate: Int, quality: Int,
                            slot: StreamSlot, streamID: UInt32, streams: StreamTable, stop: StopFlag, wakeup: Condition,
                            away: AtomicCounter, raise: (ClientEvent) -> Void) {
        // Room for 20 ms at the highest rate a device may run at, in stereo (a device
        // may run with 2 channels for a mono stream).
        let capacity = FormatConverter.rates.upperBound / 50
        let buf = UnsafeMutablePointer<Int16>.allocate(capacity: capacity * 2)
        buf.initialize(repeating: 0, count: capacity * 2)
        defer { buf.deallocate() }
        var cap: Capture? = first
        var pacer = PeriodPacer(periodFrames: first?.period ?? sampleRate / 50, sampleRate: first?.device.sampleRate ?? sampleRate,
                                catchUpPeriods: AlsaPCM.bufferPeriods)
        var backoffMs: UInt64 = 250
        var retryAtMs: UInt64 = first == nil ? MonotonicClock.milliseconds() + backoffMs : 0
        var stallBackoff = StallBackoff()
        // The device failed or stalled: closed, counted and reported, retried later.
        func lose(_ c: Capture, _ reason: String, retryInMs: UInt64) {
            let overruns = c.device.takeXruns()
            c.device.close()
            cap = nil
            away.store(1)
            retryAtMs = MonotonicClock.milliseconds() + retryInMs
            failed(reason, overruns: overruns, slot: slot, streamID: streamID, raise: raise)
        }
        while !stop.isSet {
            guard let c = cap else {
                let now = MonotonicClock.milliseconds()
                if now < retryAtMs {
                    wakeup.withLock { if !stop.isSet { wakeup.wait(untilMs: retryAtMs) } }
                    continue
                }
                // Reopened at whatever rate the device offers now (a converter is
                // built here when it is not 48 kHz: recovery, not the steady state).
                if let c = try? Capture.open(backend: backend, device: device, channels: channels, sampleRate: sampleRate, quality: quality) {
                    cap = c
                    away.store(0)
                    backoffMs = 250
                    pacer = PeriodPacer(periodFrames: c.period, sampleRate: c.device.sampleRate, catchUpPeriods: AlsaPCM.bufferPeriods)
                    raise(.deviceRestored(VC_DEVICE_CAPTURE, name: device, streamID: streamID))
                } else {
                    retryAtMs = now + backoffMs
                    backoffMs = min(backoffMs * 2, 5000)
                }
                continue
            }
            // A card paces the loop to its clock: the read comes when it has a period
            // (after a stall, up to its buffer, read back to back), so it does not block.
            if let held = c.device.heldFrames(), held < c.period,
               !pacer.wait(forCapture: c.device, held: held, period: c.period, stopped: { stop.isSet }) {
                lose(c, "capture device \"\(device)\" stopped delivering: nothing came for \(PeriodPacer.cardStallNs / 1_000_000) ms",
                     retryInMs: stallBackoff.stalled())
                continue
            }
            if stop.isSet { break }
            do { try c.device.read(buf, frames: c.period) } catch {
                lose(c, "\(error)", retryInMs: backoffMs)
                continue
            }
            let (pcm, frames) = c.converter?.convert(buf, frames: c.period) ?? (UnsafePointer(buf), c.period)
            let overruns = c.device.takeXruns()
            let due = slot.lock.withLock { () -> UInt64? in
                guard let s = slot.stream, s.streamID == streamID else { return nil }
                s.deviceOverruns += UInt64(overruns)
                try? s.feed(pcm, frames: frames, channels: channels, clock: MonotonicClock.nanoseconds)
                return s.deadline
            }
            streams.rescheduled(due)
            stallBackoff.moved()
            // Only a PCM that does not run in real time is paced to the monotonic clock
            // (a card: above, before the read).
            if c.device.heldFrames() == nil { pacer.wait() }
        }
        cap?.device.close()
    }

    /// Stops the thread and closes the device.
    func stopAndJoin() {
        wakeup.withLock { stop.set(); wakeup.broadcast() }
        thread?.join()
        thread = nil
    }
}

extension VoiceClient {
    // MARK: input gate

    public func setInputMode(_ m: InputMode) { streams.gate.setMode(m) }

    public func setVAD(threshold: Float, hangMs: UInt32) throws {
        guard threshold.isFinite, threshold >= 0, threshold <= 1 else {
            throw fail(.invalidArgument("VAD threshold must be within 0..1 (got \(threshold))"))
        }
        guard hangMs <= 10_000 else { throw fail(.invalidArgument("VAD hang time must be at most 10000 ms (got \(hangMs))")) }
        streams.gate.setVAD(threshold: threshold, hangMs: hangMs)
    }

    public func setPushToTalk(_ active: Bool) { streams.gate.setPushToTalk(active) }

    // MARK: capture

    /// Starts device capture for a stream (deviceLock held). `retryIfAway`: a device
    /// that cannot be opened is retried on the backoff by the capture thread, and the
    /// reason returned; it is a failure (VC_EVENT_ERROR, counted) unless the stream's
    /// device was away already (reported when it went), or `sayAgain` (vc_audio_restart).
    /// Otherwise the call fails. A device that opens while the stream's was away raises
    /// DEVICE_RESTORED, so every failure reported is paired with the news it is back.
    @discardableResult
    func startCapture(_ s: LocalStream, device: String, channels: Int, opened: CaptureWorker.Capture? = nil,
                      retryIfAway: Bool = false, sayAgain: Bool = false) throws -> ClientError? {
        let ifAway: CaptureWorker.IfAway = !retryIfAway ? .fail : s.captureAway && !sayAgain ? .retrySilently : .retry
        let w = try CaptureWorker(owner: self, backend: config.backend, device: device, channels: channels, sampleRate: s.inputRate,
                                  quality: config.resamplerQuality, slot: s.slot, streamID: s.streamID,
                                  streams: streams, opened: opened, ifAway: ifAway) { [unowned self] e in self.events.raise(e) }
        if w.openError == nil && s.captureAway { events.raise(.deviceRestored(VC_DEVICE_CAPTURE, name: device, streamID: s.streamID)) }
        // From here its thread pairs what it reports.
        s.captureAway = false
        s.capture = w
        s.device = device
        s.inputChannels = channels
        return w.openError
    }

    /// Stops a device stream's capture (deviceLock held) and ends its talkspurt: the next
    /// audio, from this device reopened or another, starts a new one with the marker
    /// (with a device stream's 100 ms dry slack a quick switch carried the talkspurt on,
    /// its next frames late by the gap: delay listeners kept). Returns whether the
    /// device was away (its thread retrying it) when the thread stopped, or, with no
    /// capture, when the last one stopped (kept in `captureAway` for the next start).
    @discardableResult
    func endCapture(_ s: LocalStream) -> Bool {
        guard let w = s.capture else { return s.captureAway }
        w.stopAndJoin()
        s.captureAway = w.deviceAway.load() != 0
        s.capture = nil
        s.device = s.device ?? w.device
        s.slot.lock.withLock { if s.slot.stream === s { s.flush() } }
        return w.deviceAway.load() != 0
    }

    /// The stream `s` still is stream `streamID` (deviceLock held: it was looked up
    /// before; a stop in between retired it, and a capture started for it then would
    /// run, and retry its device, for ever).
    private func stillInstalled(_ s: LocalStream, _ streamID: UInt32) throws {
        guard (try? streams.withStream(streamID) { st, _ in st === s }) == true else {
            throw ClientError.notFound("stream \(streamID) was stopped meanwhile")
        }
    }

    /// vc_set_capture_channels: reopens a device stream's capture with 1 or 2 channels.
    public func setCaptureChannels(streamID: UInt32, channels: Int) throws {
        try refuseInCallback("vc_set_capture_channels")
        guard channels == 1 || channels == 2 else { throw fail(.invalidArgument("channels must be 1 or 2 (got \(channels))")) }
        let s = try failing { try streams.withStream(streamID) { s, _ in s } }
        try failing {
            try deviceLock.withLock {
                try stillInstalled(s, streamID)
                guard let old = s.capture else {
                    s.slot.lock.withLock { s.inputChannels = channels }
                    return
                }
                endCapture(s)
                if audioSuspended { s.inputChannels = channels; return }
                do { try startCapture(s, device: old.device, channels: channels) } catch let e as ClientError {
                    // Put the previous capture back so the stream keeps working (retried
                    // on the backoff if it cannot be opened again at once).
                    _ = try? startCapture(s, device: old.device, channels: old.channels, retryIfAway: true)
                    throw e
                }
            }
        }
    }

    /// vc_set_capture_device: moves a device stream to another capture device; the
    /// stream (its id, ssrc and talkspurt state) stays. When the new device cannot be
    /// opened the previous one is reopened and the error thrown.
    public func setCaptureDevice(streamID: UInt32, device: String) throws {
        try refuseInCallback("vc_set_capture_device")
        let s = try failing { try streams.withStream(streamID) { s, _ in s } }
        guard !s.externalFeed else { throw fail(.state("stream \(streamID) is fed by the host (external_feed); it has no capture device")) }
        try failing {
            try deviceLock.withLock {
                try stillInstalled(s, streamID)
                // The old capture stops first: a device may be opened only once at a time.
                let old = s.capture
                endCapture(s)
                if audioSuspended { s.device = device; return }
                do { try startCapture(s, device: device, channels: s.inputChannels) } catch let e as ClientError {
                    if let old { _ = try? startCapture(s, device: old.device, channels: old.channels, retryIfAway: true) }
                    throw e
                }
            }
        }
    }

    /// The capture device a device stream reads (nil for a fed stream).
    public func captureDevice(streamID: UInt32) throws -> String? {
        let s = try failing { try streams.withStream(streamID) { s, _ in s } }
        return deviceLock.withLock { s.externalFeed ? nil : s.device }
    }

    /// Stops a stream's capture thread (deviceLock taken here; a retired stream is no
    /// longer in its slot, so its talkspurt is left as retiring leaves it).
    func stopCapture(_ s: LocalStream) {
        deviceLock.withLock { _ = endCapture(s) }
    }

    // MARK: playback

    /// vc_set_external_playback. Opening the device can fail with a device error.
    public func setExternalPlayback(_ on: Bool) throws {
        try refuseInCallback("vc_set_external_playback")
        do { try output.setExternal(on) } catch let e as ClientError { throw fail(e) }
    }

    public var isExternalPlayback: Bool { output.isExternal }

    /// vc_set_playback_device: plays on `name` from now on (opened at once when the
    /// device plays the mix now; the previous one stays when it cannot be).
    public func setPlaybackDevice(_ name: String) throws {
        try refuseInCallback("vc_set_playback_device")
        guard !name.isEmpty else { throw fail(.invalidArgument("the playback device name is empty")) }
        do { try output.setPlaybackDevice(name) } catch let e as ClientError { throw fail(e) }
    }

    public var playbackDevice: String { output.currentPlaybackDevice }

    // MARK: suspend / restart

    /// Closes every device; the session and its streams stay. Idempotent.
    public func suspendAudio() throws {
        try refuseInCallback("vc_audio_suspend")
        deviceLock.withLock {
            audioSuspended = true
            for s in streams.all { endCapture(s) }
        }
        output.suspend()
    }

    /// Reopens the devices against the current route. Idempotent.
    public func restartAudio() throws {
        try refuseInCallback("vc_audio_restart")
        // Each device that cannot be opened is a failure as one lost while running is: an
        // event and a count (the call's error names the first only), then its backoff.
        var firstError: ClientError? = output.restart()
        deviceLock.withLock {
            audioSuspended = false
            // A capture device that cannot be opened is retried on the backoff, as one
            // lost while running (before, its stream stayed silent until the host called
            // vc_audio_restart again, with no event).
            // One whose device is away (its thread retrying it) is tried again now, so
            // the host hears whether it opens.
            // (One still away once stopped: one that its thread reopened meanwhile has
            // said so. One that opens now after one that was away raises DEVICE_RESTORED.)
            for s in streams.all where !s.externalFeed && (s.capture == nil || s.capture?.deviceAway.load() != 0) {
                endCapture(s)
                do {
                    if let e = try startCapture(s, device: s.device ?? "default", channels: s.inputChannels, retryIfAway: true,
                                                sayAgain: true) {
                        firstError = firstError ?? e
                    }
                } catch let e as ClientError {
                    firstError = firstError ?? e
                } catch {}
            }
        }
        if let e = firstError { throw fail(e) }
    }
}

extension VoiceClient {
    /// vc_set_send_processing: NS, AGC and AEC for a MIC stream on a mono channel.
    public func setSendProcessing(streamID: UInt32, _ p: SendProcessing) throws {
        try refuseInCallback("vc_set_send_processing")
        guard p.agcLevel.isFinite, p.agcLevel > 0, p.agcLevel <= 1 else {
            throw fail(.invalidArgument("agc_level must be within (0, 1] (got \(p.agcLevel))"))
        }
        let (kind, audio) = try failing { try streams.withStream(streamID) { s, _ in (s.kind, s.audio) } }
        guard kind == .mic else { throw fail(.invalidArgument("send processing applies to MIC streams only")) }
        guard audio.channels == 1 else { throw fail(.unsupported("send processing needs a mono channel")) }
        // Built here, on the caller's thread; swapped in under the stream's lock.
        let fresh = p.isActive ? SpeexApm(frameSamples: audio.frameSamples, settings: p) : nil
        let old = try failing {
            try streams.withStream(streamID) { s, _ -> SpeexApm? in
                let o = s.apm
                s.apm = fresh
                // The canceller reads the played mix from now on, in the order it is played.
                if p.echoCancellation && o?.settings.echoCancellation != true { s.farCursor = streams.farEnd.cursorAtPresent() }
                return o
            }
        }
        let was = old?.settings.echoCancellation == true, now = p.echoCancellation
        if was != now { streams.aecStreams.add(now ? 1 : -1) }
    }

    public func sendProcessing(streamID: UInt32) throws -> SendProcessing {
        try failing { try streams.withStream(streamID) { s, _ in s.apm?.settings ?? SendProcessing() } }
    }
}
