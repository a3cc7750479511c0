// Device I/O: a capture thread per device-fed stream and one playback thread for
// the final mix. Each thread owns its PCM; stopping joins the thread before the
// PCM is closed. Device faults are recovered by ALSA (xruns) or by reopening the
// device once a second, and reported as VC_EVENT_ERROR; never a crash.
import Glibc
import Synchronization
import VoiceCatAudio
import VoiceCatDevices
import VoiceCatSystem

/// A stop flag shared with a worker thread; read every period, so lock-free.
final class StopFlag: Sendable {
    private let value = Atomic<Bool>(false)
    var isSet: Bool { value.load(ordering: .acquiring) }
    func set() { value.store(true, ordering: .releasing) }
}

/// A counter read on the audio path (how many streams cancel echo); lock-free.
final class AtomicCounter: Sendable {
    private let value = Atomic<Int>(0)
    func load() -> Int { value.load(ordering: .relaxed) }
    func add(_ d: Int) { value.wrappingAdd(d, ordering: .relaxed) }
}

/// The loop both device threads run: one 20 ms period of I/O at a time, paced to
/// the clock; on a device failure it reports, closes the PCM and tries to reopen it
/// once a second until it is back or the thread is stopped (logged, not an event).
enum DeviceLoop {
    static let period = 960

    static func run(first: AlsaPCM, reopen: () -> AlsaPCM?, stop: StopFlag, report: (String) -> Void,
                    io: (AlsaPCM) throws -> Void) {
        var pcm: AlsaPCM? = first
        var pacer = PeriodPacer(periodFrames: period)
        while !stop.isSet {
            guard let p = pcm else {
                for _ in 0..<10 where !stop.isSet { sleepMilliseconds(100) }
                if stop.isSet { break }
                pcm = reopen()
                if let p = pcm {
                    ClientLog.log(2, "\(p.direction == .capture ? "capture" : "playback") device \"\(p.name)\" reopened")
                    pacer = PeriodPacer(periodFrames: period)
                }
                continue
            }
            do { try io(p) } catch {
                report("\(error); reopening")
                p.close()
                pcm = nil
                continue
            }
            pacer.wait()
        }
        pcm?.close()
    }
}

/// Captures from an ALSA device into a LocalStream.
final class CaptureWorker {
    let device: String
    let channels: Int
    private let stop = StopFlag()
    private var thread: SystemThread?

    /// Opens the device now (so the caller gets VC_ERR_DEVICE at once) and starts the thread.
    init(device: String, channels: Int, stream: LocalStream, report: @escaping (String) -> Void) throws {
        self.device = device
        self.channels = channels
        let pcm: AlsaPCM
        do { pcm = try AlsaPCM(name: device, direction: .capture, channels: channels) } catch {
            throw ClientError.device("\(error)")
        }
        let stop = self.stop
        thread = SystemThread(name: "vc-capture") {
            CaptureWorker.run(pcm: pcm, device: device, channels: channels, stream: stream, stop: stop, report: report)
        }
    }

    private static func run(pcm first: AlsaPCM, device: String, channels: Int, stream: LocalStream, stop: StopFlag,
                            report: (String) -> Void) {
        let buf = UnsafeMutablePointer<Int16>.allocate(capacity: DeviceLoop.period * channels)
        defer { buf.deallocate() }
        DeviceLoop.run(first: first, reopen: { try? AlsaPCM(name: device, direction: .capture, channels: channels) },
                       stop: stop, report: report) { p in
            try p.read(buf, frames: DeviceLoop.period)
            stream.lock.withLock {
                if !stream.stopped { try? stream.feed(buf, frames: DeviceLoop.period, channels: channels) }
            }
        }
    }

    /// Stops the thread and closes the device.
    func stopAndJoin() {
        stop.set()
        thread?.join()
        thread = nil
    }
}

/// Plays the final mix on an ALSA device, 20 ms at a time.
final class PlaybackWorker {
    let device: String
    private let stop = StopFlag()
    private var thread: SystemThread?

    init(device: String, client: VoiceClient) throws {
        self.device = device
        let pcm: AlsaPCM
        do { pcm = try AlsaPCM(name: device, direction: .playback, channels: 2) } catch {
            throw ClientError.device("\(error)")
        }
        let stop = self.stop
        thread = SystemThread(name: "vc-playback") { [unowned client] in
            PlaybackWorker.run(pcm: pcm, device: device, client: client, stop: stop)
        }
    }

    private static func run(pcm first: AlsaPCM, device: String, client: VoiceClient, stop: StopFlag) {
        client.mixLock.withLock { client.mixerThreadID = currentThreadID() }
        let buf = UnsafeMutablePointer<Int16>.allocate(capacity: DeviceLoop.period * 2)
        defer { buf.deallocate() }
        DeviceLoop.run(first: first, reopen: { try? AlsaPCM(name: device, direction: .playback, channels: 2) },
                       stop: stop, report: { client.reportDevice($0) }) { p in
            client.renderMix(into: buf, frames: DeviceLoop.period)
            client.tapSink(buf, frames: DeviceLoop.period)
            try p.write(buf, frames: DeviceLoop.period)
        }
        client.mixLock.withLock { client.mixerThreadID = nil }
    }

    func stopAndJoin() {
        stop.set()
        thread?.join()
        thread = nil
    }
}

extension VoiceClient {
    /// An asynchronous device problem, as an error event.
    func reportDevice(_ text: String) {
        ClientLog.log(1, text)
        var e = ClientEvent(type: .error)
        e.code = -10
        e.text = text
        emit(e)
    }

    // MARK: input gate

    public func setInputMode(_ m: InputMode) { gateLock.withLock { gate.mode = m } }

    public func setVAD(threshold: Float, hangMs: UInt32) throws {
        guard threshold.isFinite, threshold >= 0, threshold <= 1 else { throw ClientError.invalidArgument("VAD threshold must be within 0..1") }
        guard hangMs <= 10_000 else { throw ClientError.invalidArgument("hang time must be at most 10000 ms") }
        gateLock.withLock { gate.threshold = threshold; gate.hangMs = hangMs }
    }

    public func setPushToTalk(_ active: Bool) { gateLock.withLock { gate.pushToTalk = active } }

    func gateSettings() -> GateSettings { gateLock.withLock { gate } }

    // MARK: capture

    /// Starts device capture for a stream (device streams only).
    func startCapture(_ s: LocalStream, device: String, channels: Int) throws {
        let w = try CaptureWorker(device: device, channels: channels, stream: s) { [weak self] text in self?.reportDevice(text) }
        s.capture = w
        s.device = device
        s.inputChannels = channels
    }

    /// vc_set_capture_channels: reopens a device stream's capture with 1 or 2 channels.
    public func setCaptureChannels(streamID: UInt32, channels: Int) throws {
        try refuseInCallback("vc_set_capture_channels")
        guard channels == 1 || channels == 2 else { throw fail(.invalidArgument("channels must be 1 or 2")) }
        guard let s = cond.withLock({ localStreams[streamID] }) else { throw fail(.notFound("no stream \(streamID)")) }
        try deviceLock.withLock {
            guard let old = s.capture else {
                s.lock.withLock { s.inputChannels = channels }
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

    // MARK: playback

    /// vc_set_external_playback. Opening the device can fail with a device error.
    public func setExternalPlayback(_ on: Bool) throws {
        try refuseInCallback("vc_set_external_playback")
        try deviceLock.withLock {
            externalPlayback = on
            if on {
                playback?.stopAndJoin()
                playback = nil
            } else if isConnected && !audioSuspended && playback == nil {
                do { playback = try PlaybackWorker(device: config.playbackDevice, client: self) } catch let e as ClientError {
                    externalPlayback = true
                    throw fail(e)
                }
            }
        }
    }

    public var isExternalPlayback: Bool { deviceLock.withLock { externalPlayback } }

    /// Called after connecting: opens the playback device unless external playback is on.
    func openPlaybackAfterConnect() {
        deviceLock.withLock {
            guard !externalPlayback, !audioSuspended, playback == nil else { return }
            do { playback = try PlaybackWorker(device: config.playbackDevice, client: self) } catch {
                reportDevice("\(error)")
            }
        }
    }

    func closeAllDevices(includingCaptures: Bool) {
        deviceLock.withLock {
            playback?.stopAndJoin()
            playback = nil
            guard includingCaptures else { return }
            for s in cond.withLock({ Array(localStreams.values) }) {
                s.capture?.stopAndJoin()
            }
        }
    }

    // MARK: suspend / restart

    /// Closes every device; the session and its streams stay. Idempotent.
    public func suspendAudio() throws {
        try refuseInCallback("vc_audio_suspend")
        deviceLock.withLock {
            audioSuspended = true
            playback?.stopAndJoin()
            playback = nil
            for s in cond.withLock({ Array(localStreams.values) }) {
                if let w = s.capture { w.stopAndJoin(); s.capture = nil; s.device = s.device ?? w.device }
            }
        }
    }

    /// Reopens the devices against the current route. Idempotent.
    public func restartAudio() throws {
        try refuseInCallback("vc_audio_restart")
        try deviceLock.withLock {
            audioSuspended = false
            var firstError: ClientError? = nil
            if !externalPlayback && playback == nil && isConnected {
                do { playback = try PlaybackWorker(device: config.playbackDevice, client: self) } catch let e as ClientError { firstError = e }
            }
            for s in cond.withLock({ Array(localStreams.values) }) where !s.externalFeed && s.capture == nil {
                do { try startCapture(s, device: s.device ?? "default", channels: s.inputChannels) } catch let e as ClientError {
                    firstError = firstError ?? e
                }
            }
            if let e = firstError { throw fail(e) }
        }
    }

    /// The mix is also handed to the sink (if any) when a device plays it.
    func tapSink(_ buf: UnsafePointer<Int16>, frames: Int) {
        let fn = mixLock.withLock { sink }
        fn?(buf, frames)
    }
}

extension VoiceClient {
    /// vc_set_send_processing: NS, AGC and AEC for a MIC stream on a mono channel.
    public func setSendProcessing(streamID: UInt32, _ p: SendProcessing) throws {
        try refuseInCallback("vc_set_send_processing")
        guard p.agcLevel.isFinite, p.agcLevel > 0, p.agcLevel <= 1 else { throw fail(.invalidArgument("agc_level must be within (0, 1]")) }
        guard let s = cond.withLock({ localStreams[streamID] }) else { throw fail(.notFound("no stream \(streamID)")) }
        guard s.kind == .mic else { throw fail(.invalidArgument("send processing applies to MIC streams")) }
        guard s.audio.channels == 1 else { throw fail(.unsupported("send processing needs a mono channel")) }
        // Built here, on the caller's thread; swapped in under the stream's lock.
        let fresh = p.isActive ? SpeexApm(frameSamples: s.audio.frameSamples, settings: p) : nil
        let old = s.lock.withLock { () -> SpeexApm? in
            let o = s.apm
            s.apm = fresh
            return o
        }
        let was = old?.settings.echoCancellation == true, now = p.echoCancellation
        if was != now { aecStreams.add(now ? 1 : -1) }
        if aecStreams.load() == 0 { farEnd.clear() }
    }

    public func sendProcessing(streamID: UInt32) throws -> SendProcessing {
        guard let s = cond.withLock({ localStreams[streamID] }) else { throw ClientError.notFound("no stream \(streamID)") }
        return s.lock.withLock { s.apm?.settings ?? SendProcessing() }
    }
}
