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

/// Captures from a device into one stream slot.
final class CaptureWorker {
    let device: String
    let channels: Int
    private let stop = StopFlag()
    private let wakeup = Condition()
    private var thread: SystemThread?

    /// Opens the device now (so the caller gets VC_ERR_DEVICE at once) and starts the thread.
    init(owner: AnyObject, backend: AudioBackend, device: String, channels: Int, slot: StreamSlot, streamID: UInt32,
         pacer: SendPacer, raise: @escaping (ClientEvent) -> Void) throws {
        self.device = device
        self.channels = channels
        let first: AudioDevice
        do {
            first = try backend.open(device, direction: .capture, channels: channels, sampleRate: 48000, periodFrames: 960)
        } catch {
            throw ClientError.device("\(error)")
        }
        guard first.sampleRate == 48000 else {
            first.close()
            throw ClientError.device("capture device \"\(device)\" does not offer 48000 Hz (it offers \(first.sampleRate))")
        }
        let stop = self.stop, wakeup = self.wakeup
        thread = SystemThread(name: "vc-capture") { [unowned owner] in
            ThreadIdentity.mark(owner: owner, role: ThreadRole.capture.rawValue)
            CaptureWorker.run(first: first, backend: backend, device: device, channels: channels, slot: slot, streamID: streamID,
                              sendPacer: pacer, stop: stop, wakeup: wakeup, raise: raise)
        }
    }

    private static func run(first: AudioDevice, backend: AudioBackend, device: String, channels: Int, slot: StreamSlot,
                            streamID: UInt32, sendPacer: SendPacer, stop: StopFlag, wakeup: Condition, raise: (ClientEvent) -> Void) {
        let period = 960
        let buf = UnsafeMutablePointer<Int16>.allocate(capacity: period * channels)
        defer { buf.deallocate() }
        var pcm: AudioDevice? = first
        var pacer = PeriodPacer(periodFrames: period)
        var backoffMs: UInt64 = 250
        var retryAtMs: UInt64 = 0
        while !stop.isSet {
            guard let p = pcm else {
                let now = MonotonicClock.milliseconds()
                if now < retryAtMs {
                    wakeup.withLock { if !stop.isSet { wakeup.wait(untilMs: retryAtMs) } }
                    continue
                }
                if let d = try? backend.open(device, direction: .capture, channels: channels, sampleRate: 48000, periodFrames: period),
                   d.sampleRate == 48000 {
                    pcm = d
                    backoffMs = 250
                    pacer = PeriodPacer(periodFrames: period)
                    ClientLog.log(2, "capture device \"\(device)\" is back")
                    var e = ClientEvent(type: VC_EVENT_DEVICE_RESTORED)
                    e.kind = UInt32(VC_DEVICE_CAPTURE.rawValue)
                    e.streamID = streamID
                    e.text = device
                    raise(e)
                } else {
                    retryAtMs = now + backoffMs
                    backoffMs = min(backoffMs * 2, 5000)
                }
                continue
            }
            do { try p.read(buf, frames: period) } catch {
                p.close()
                pcm = nil
                retryAtMs = MonotonicClock.milliseconds() + backoffMs
                ClientLog.log(1, "\(error); reopening")
                var e = ClientEvent(type: VC_EVENT_ERROR)
                e.code = VC_ERR_DEVICE
                e.kind = UInt32(VC_DEVICE_CAPTURE.rawValue)
                e.streamID = streamID
                e.text = "\(error); reopening"
                raise(e)
                continue
            }
            let due = slot.lock.withLock { () -> UInt64? in
                guard let s = slot.stream, s.streamID == streamID else { return nil }
                try? s.feed(buf, frames: period, channels: channels, now: MonotonicClock.nanoseconds())
                return s.deadline
            }
            if let due { sendPacer.kick(due) }
            if !p.pacesItself { pacer.wait() }
        }
        pcm?.close()
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

    /// Starts device capture for a stream (deviceLock held).
    func startCapture(_ s: LocalStream, device: String, channels: Int) throws {
        let w = try CaptureWorker(owner: self, backend: config.backend, device: device, channels: channels, slot: s.slot,
                                  streamID: s.streamID, pacer: streams.pacer) { [unowned self] e in self.events.raise(e) }
        s.capture = w
        s.device = device
        s.inputChannels = channels
    }

    /// vc_set_capture_channels: reopens a device stream's capture with 1 or 2 channels.
    public func setCaptureChannels(streamID: UInt32, channels: Int) throws {
        try refuseInCallback("vc_set_capture_channels")
        guard channels == 1 || channels == 2 else { throw fail(.invalidArgument("channels must be 1 or 2 (got \(channels))")) }
        let s = try failing { try streams.withStream(streamID) { s, _ in s } }
        try deviceLock.withLock {
            guard let old = s.capture else {
                s.slot.lock.withLock { s.inputChannels = channels }
                return
            }
            old.stopAndJoin()
            s.capture = nil
            if audioSuspended { s.inputChannels = channels; return }
            do { try startCapture(s, device: old.device, channels: channels) } catch let e as ClientError {
                // Put the previous capture back so the stream keeps working.
                try? startCapture(s, device: old.device, channels: old.channels)
                throw fail(e)
            }
        }
    }

    /// Stops a stream's capture thread (deviceLock taken here).
    func stopCapture(_ s: LocalStream) {
        deviceLock.withLock { s.capture?.stopAndJoin(); s.capture = nil }
    }

    // MARK: playback

    /// vc_set_external_playback. Opening the device can fail with a device error.
    public func setExternalPlayback(_ on: Bool) throws {
        try refuseInCallback("vc_set_external_playback")
        do { try output.setExternal(on) } catch let e as ClientError { throw fail(e) }
    }

    public var isExternalPlayback: Bool { output.isExternal }

    // MARK: suspend / restart

    /// Closes every device; the session and its streams stay. Idempotent.
    public func suspendAudio() throws {
        try refuseInCallback("vc_audio_suspend")
        deviceLock.withLock {
            audioSuspended = true
            for s in streams.all {
                if let w = s.capture { w.stopAndJoin(); s.capture = nil; s.device = s.device ?? w.device }
            }
        }
        output.suspend()
    }

    /// Reopens the devices against the current route. Idempotent.
    public func restartAudio() throws {
        try refuseInCallback("vc_audio_restart")
        var firstError: ClientError? = output.restart()
        deviceLock.withLock {
            audioSuspended = false
            for s in streams.all where !s.externalFeed && s.capture == nil {
                do { try startCapture(s, device: s.device ?? "default", channels: s.inputChannels) } catch let e as ClientError {
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
