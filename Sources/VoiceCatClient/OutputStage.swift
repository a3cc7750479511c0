// The output stage: who takes the final mix, and the one thread that renders it.
//
// Three modes, decided from four inputs (external playback, a sink set, connected,
// audio suspended) by `reconcile`, the only place that starts or stops a render
// driver; every change (sink set or cleared, external playback on or off, connect,
// disconnect, suspend, restart, destroy) goes through it, in any order:
//
//   device   !external && connected && !suspended: a driver thread renders, hands
//            the block to the sink if one is set (a tap) and writes it to the
//            playback device; a device that fails is reopened on a backoff.
//   sink     external && a sink is set: a driver thread renders every 20 ms and
//            hands the block to the sink.
//   pull     otherwise: nothing renders by itself; vc_read_mixed_pcm renders on the
//            caller's thread.
//
// At most one driver exists, so every stream's playout clock advances once per
// rendered block. The driver thread knows itself by its thread role (render).
import Synchronization
import VoiceCatABI
import VoiceCatAudio
import VoiceCatDevices
import VoiceCatSystem

/// The host's mixed-output sink.
public final class SinkBox {
    let deliver: (UnsafePointer<Int16>, Int) -> Void
    public init(_ deliver: @escaping (UnsafePointer<Int16>, Int) -> Void) { self.deliver = deliver }
}

/// Roles of a client's threads (ThreadIdentity).
enum ThreadRole: Int {
    case network = 1
    case render = 2
    case capture = 3
    case pacer = 4
}

final class OutputStage {
    enum Mode: Equatable { case pull, sink, device }

    static let block = 960
    static let mixChunk = 4800

    /// The client whose threads these are (set right after creation).
    weak var owner: AnyObject?
    private let receive: ReceiveSet
    private let streams: StreamTable
    private let events: EventHub
    private let backend: AudioBackend
    let sink = CallbackCell<SinkBox>()
    private let bus = MixBus(capacityFrames: OutputStage.mixChunk)

    /// Serializes reconcile (and so driver start/stop). Never taken by the render path.
    private let reconcileLock = Lock()
    // The inputs, guarded by reconcileLock.
    private var external: Bool
    private var connected = false
    private var suspended = false
    private var playbackDevice: String
    private var driver: RenderDriver?

    /// Serializes renders (a driver's, or vc_read_mixed_pcm callers').
    private let renderLock = Lock()
    /// When the mix was last rendered (ms, monotonic): talk state follows playout
    /// while someone renders.
    let lastRenderMs = Atomic<UInt64>(0)

    /// The mode in effect: a driver owns the mix unless it is `pull` (read before
    /// pulling, without a lock, and again under renderLock).
    private let modeValue = Atomic<Int>(0)

    init(receive: ReceiveSet, streams: StreamTable, events: EventHub, backend: AudioBackend, external: Bool, playbackDevice: String) {
        self.receive = receive; self.streams = streams; self.events = events
        self.backend = backend; self.external = external; self.playbackDevice = playbackDevice
    }

    var mode: Mode {
        switch modeValue.load(ordering: .acquiring) {
        case 1: return .sink
        case 2: return .device
        default: return .pull
        }
    }

    var isExternal: Bool { reconcileLock.withLock { external } }

    // MARK: inputs

    /// vc_set_external_playback. Turning it off opens the device now; when it cannot,
    /// the previous mode stays and the device's error is thrown.
    func setExternal(_ on: Bool) throws {
        try reconcileLock.withLock {
            let old = external
            external = on
            if let e = reconcile(openNow: true) {
                external = old
                _ = reconcile(openNow: true)
                throw e
            }
        }
    }

    /// Sets or clears the sink. Returns once a running call of the previous sink has
    /// returned (never call it from the render thread).
    func setSink(_ box: SinkBox?) {
        sink.set(box)
        reconcileLock.withLock { _ = reconcile(openNow: false) }
    }

    /// The session came up or went away. Returns the device error when the playback
    /// device could not be opened (the driver keeps trying on a backoff).
    @discardableResult
    func setConnected(_ on: Bool) -> ClientError? {
        reconcileLock.withLock { connected = on; return reconcile(openNow: false) }
    }

    func suspend() { reconcileLock.withLock { suspended = true; _ = reconcile(openNow: false) } }

    /// Reopens the playback device (if the mode wants one); returns its error, if any
    /// (the driver keeps trying on a backoff).
    func restart() -> ClientError? { reconcileLock.withLock { suspended = false; return reconcile(openNow: false) } }

    /// Destroy: no driver, no sink.
    func shutdown() {
        sink.set(nil)
        reconcileLock.withLock {
            connected = false
            external = true
            _ = reconcile(openNow: false)
        }
    }

    /// Computes the mode the inputs ask for and makes it so (reconcileLock held).
    /// `openNow`: a device that cannot be opened is an error and nothing starts.
    private func reconcile(openNow: Bool) -> ClientError? {
        let want: Mode
        if !external && connected && !suspended { want = .device } else if external && sink.isSet { want = .sink } else { want = .pull }
        if let d = driver, d.mode == want, want != .device || d.deviceName == playbackDevice { return nil }
        if driver == nil && want == .pull { return nil }
        // Stop what runs; the mix is the pull callers' until the next driver starts.
        if let d = driver {
            d.stopAndJoin()
            driver = nil
            setMode(.pull)
        }
        guard want != .pull else { return nil }
        var first: AudioDevice? = nil
        var failure: ClientError? = nil
        if want == .device {
            do {
                first = try backend.open(playbackDevice, direction: .playback, channels: 2, sampleRate: 48000,
                                         periodFrames: OutputStage.block)
                if first!.sampleRate != 48000 {
                    first!.close()
                    first = nil
                    throw DeviceError("playback device \"\(playbackDevice)\" does not offer 48000 Hz")
                }
            } catch {
                failure = .device("\(error)")
                if openNow { return failure }
            }
        }
        setMode(want)
        driver = RenderDriver(mode: want, stage: self, deviceName: playbackDevice, device: first, startsDown: failure != nil)
        return failure
    }

    private func setMode(_ m: Mode) {
        renderLock.withLock { modeValue.store(m == .pull ? 0 : (m == .sink ? 1 : 2), ordering: .releasing) }
    }

    // MARK: rendering

    /// vc_read_mixed_pcm: renders on the caller's thread, only in pull mode.
    func pull(into out: UnsafeMutablePointer<Int16>, frames: Int) throws {
        if let e = refusal() { throw e }
        renderLock.lock()
        defer { renderLock.unlock() }
        if let e = refusal() { throw e }
        renderMix(into: out, frames: frames)
    }

    private func refusal() -> ClientError? {
        switch mode {
        case .pull: return nil
        case .sink: return .state("a mixed-output sink is set: the client's mixer thread owns the mix (clear the sink to pull)")
        case .device: return .state("the playback device plays the mix (use external playback to pull it)")
        }
    }

    /// The driver's render of one block.
    fileprivate func renderForDriver(into out: UnsafeMutablePointer<Int16>, frames: Int) {
        renderLock.lock()
        renderMix(into: out, frames: frames)
        renderLock.unlock()
    }

    /// Renders `frames` of the final stereo mix (renderLock held).
    private func renderMix(into out: UnsafeMutablePointer<Int16>, frames: Int) {
        let nowNs = MonotonicClock.nanoseconds()
        lastRenderMs.store(nowNs / 1_000_000, ordering: .relaxed)
        let nowMs = Double(nowNs) / 1e6
        var done = 0
        while done < frames {
            let n = min(OutputStage.mixChunk, frames - done)
            bus.clear(frames: n)
            receive.render(into: bus, frames: n, nowMs: nowMs)
            bus.render(into: out + done * 2, frames: n)
            // The echo canceller's far-end reference: what is being played.
            if streams.aecStreams.load() > 0 { streams.farEnd.pushStereo(out + done * 2, frames: n) }
            done += n
        }
    }

    fileprivate func raise(_ e: ClientEvent) { events.raise(e) }
    fileprivate var deviceBackend: AudioBackend { backend }
}

/// The one thread that renders the mix in sink or device mode, paced to the clock.
final class RenderDriver {
    let mode: OutputStage.Mode
    let deviceName: String
    private let stop = StopFlag()
    private let wakeup = Condition()
    private var thread: SystemThread?

    init(mode: OutputStage.Mode, stage: OutputStage, deviceName: String, device: AudioDevice?, startsDown: Bool) {
        self.mode = mode
        self.deviceName = deviceName
        let stop = self.stop, wakeup = self.wakeup
        thread = SystemThread(name: mode == .device ? "vc-playback" : "vc-mixer") { [unowned stage] in
            RenderDriver.run(stage: stage, mode: mode, deviceName: deviceName, first: device, startsDown: startsDown,
                             stop: stop, wakeup: wakeup)
        }
    }

    func stopAndJoin() {
        wakeup.withLock { stop.set(); wakeup.broadcast() }
        thread?.join()
        thread = nil
    }

    private static func run(stage: OutputStage, mode: OutputStage.Mode, deviceName: String, first: AudioDevice?, startsDown: Bool,
                            stop: StopFlag, wakeup: Condition) {
        if let owner = stage.owner { ThreadIdentity.mark(owner: owner, role: ThreadRole.render.rawValue) }
        defer { ThreadIdentity.clear() }
        let frames = OutputStage.block
        let buf = UnsafeMutablePointer<Int16>.allocate(capacity: frames * 2)
        buf.initialize(repeating: 0, count: frames * 2)
        defer { buf.deallocate() }
        var device = first
        var down = startsDown
        var backoffMs: UInt64 = 250
        var retryAtMs = MonotonicClock.milliseconds() + (startsDown ? backoffMs : 0)
        var pacer = PeriodPacer(periodFrames: frames)
        while !stop.isSet {
            if mode == .device && device == nil {
                let now = MonotonicClock.milliseconds()
                if now >= retryAtMs {
                    if let d = try? stage.deviceBackend.open(deviceName, direction: .playback, channels: 2, sampleRate: 48000,
                                                             periodFrames: frames), d.sampleRate == 48000 {
                        device = d
                        backoffMs = 250
                        pacer = PeriodPacer(periodFrames: frames)
                        if down {
                            down = false
                            ClientLog.log(2, "playback device \"\(deviceName)\" is back")
                            var e = ClientEvent(type: VC_EVENT_DEVICE_RESTORED)
                            e.kind = UInt32(VC_DEVICE_PLAYBACK.rawValue)
                            e.text = deviceName
                            stage.raise(e)
                        }
                    } else {
                        retryAtMs = now + backoffMs
                        backoffMs = min(backoffMs * 2, 5000)
                    }
                }
                // Nothing consumes the mix while the device is away and no sink taps
                // it: render nothing (the streams' clocks wait) until the next try.
                if device == nil && !stage.sink.isSet {
                    wakeup.withLock { if !stop.isSet { wakeup.wait(untilMs: retryAtMs) } }
                    continue
                }
            }
            stage.renderForDriver(into: buf, frames: frames)
            stage.sink.call { $0.deliver(buf, frames) }
            if let d = device {
                do { try d.write(buf, frames: frames) } catch {
                    d.close()
                    device = nil
                    down = true
                    retryAtMs = MonotonicClock.milliseconds() + backoffMs
                    ClientLog.log(1, "\(error); reopening")
                    var e = ClientEvent(type: VC_EVENT_ERROR)
                    e.code = VC_ERR_DEVICE
                    e.kind = UInt32(VC_DEVICE_PLAYBACK.rawValue)
                    e.text = "\(error); reopening"
                    stage.raise(e)
                }
            }
            if device?.pacesItself != true { pacer.wait() }
        }
        device?.close()
    }
}
