// An AudioBackend without hardware: capture devices play PCM the test or host put
// in, playback devices record what they are given. Devices can be told to fail
// (the next I/O throws) and to refuse opening, to exercise recovery. Like a file-
// backed ALSA PCM it does not block: callers pace it to the clock.
import VoiceCatSystem

public final class MemoryAudioBackend: AudioBackend, @unchecked Sendable {
    /// The state of one named device, shared by every open of it.
    public final class Device: @unchecked Sendable {
        public let name: String
        public let direction: DeviceDirection
        public let channels: Int
        public let sampleRate: Int
        /// A capture device that records what the system plays (listed as a monitor).
        public let isMonitor: Bool
        let lock = Lock()
        var input: [Int16] = []
        var readPos = 0
        var loopInput = false
        var output: [Int16] = []
        var failNext = false
        var refuseOpen = false
        var opens = 0

        init(name: String, direction: DeviceDirection, channels: Int, sampleRate: Int, isMonitor: Bool) {
            self.name = name; self.direction = direction; self.channels = channels; self.sampleRate = sampleRate
            self.isMonitor = isMonitor
        }

        /// Capture: the interleaved PCM reads return (silence after the end, or the
        /// start again when `loop`).
        public func setInput(_ pcm: [Int16], loop: Bool = false) { lock.withLock { input = pcm; readPos = 0; loopInput = loop } }
        /// Playback: everything written so far (interleaved).
        public var written: [Int16] { lock.withLock { output } }
        /// How many samples have been written (cheap; `written` copies them all).
        public var writtenCount: Int { lock.withLock { output.count } }
        public func clearWritten() { lock.withLock { output.removeAll(keepingCapacity: true) } }
        /// The next read or write on an open device throws, as a device that went away.
        public func failNextIO() { lock.withLock { failNext = true } }
        /// While true, opening the device fails (it stays away).
        public func setRefuseOpen(_ on: Bool) { lock.withLock { refuseOpen = on } }
        /// How many times the device has been opened.
        public var openCount: Int { lock.withLock { opens } }
    }

    private let lock = Lock()
    private var devices: [String: Device] = [:]

    public init() {}
    public var name: String { "memory" }

    /// Adds (or replaces) a device. `sampleRate` is the only rate it offers.
    @discardableResult
    public func addDevice(_ name: String, direction: DeviceDirection, channels: Int, sampleRate: Int = 48000,
                          isMonitor: Bool = false) -> Device {
        let d = Device(name: name, direction: direction, channels: channels, sampleRate: sampleRate, isMonitor: isMonitor)
        lock.withLock { devices[name] = d }
        return d
    }

    public func device(_ name: String) -> Device? { lock.withLock { devices[name] } }

    public func listDevices(_ direction: DeviceDirection) -> [DeviceInfo] {
        lock.withLock {
            devices.values.filter { $0.direction == direction }.map { DeviceInfo(name: $0.name, description: "memory device", isMonitor: $0.isMonitor) }
                .sorted { $0.name < $1.name }
        }
    }

    public func open(_ name: String, direction: DeviceDirection, channels: Int, sampleRate: Int, periodFrames: Int) throws -> AudioDevice {
        guard let d = device(name), d.direction == direction else {
            throw DeviceError("cannot open \(direction == .capture ? "capture" : "playback") device \"\(name)\": no such memory device")
        }
        try d.lock.withLock {
            if d.refuseOpen { throw DeviceError("cannot open device \"\(name)\": it is gone") }
            d.opens += 1
        }
        // As ALSA's does: the other of 1 and 2 channels when only that one is offered.
        guard channels == d.channels || (1...2).contains(channels) && (1...2).contains(d.channels) else {
            throw DeviceError("device \"\(name)\" has \(d.channels) channels, not \(channels)")
        }
        return Handle(d)
    }

    final class Handle: AudioDevice {
        let d: Device
        var closed = false
        init(_ d: Device) { self.d = d }
        var name: String { d.name }
        var direction: DeviceDirection { d.direction }
        var channels: Int { d.channels }
        var sampleRate: Int { d.sampleRate }
        var periodFrames: Int { d.sampleRate / 50 }
        var bufferFrames: Int { Int.max / 4 }
        func heldFrames() -> Int? { nil }
        /// Memory neither over- nor underruns.
        func takeXruns() -> Int { 0 }

        private func checkIO() throws {
            if closed { throw DeviceError("device \"\(d.name)\" is closed") }
            if d.failNext { d.failNext = false; throw DeviceError("device \"\(d.name)\" failed: it went away") }
        }

        func read(_ buf: UnsafeMutablePointer<Int16>, frames: Int) throws {
            try d.lock.withLock {
                try checkIO()
                let n = frames * d.channels
                for i in 0..<n {
                    if d.readPos >= d.input.count && d.loopInput && !d.input.isEmpty { d.readPos = 0 }
                    buf[i] = d.readPos < d.input.count ? d.input[d.readPos] : 0
                    d.readPos += 1
                }
            }
        }

        func write(_ buf: UnsafePointer<Int16>, frames: Int) throws {
            try d.lock.withLock {
                try checkIO()
                d.output.append(contentsOf: UnsafeBufferPointer(start: buf, count: frames * d.channels))
            }
        }

        func close() { closed = true }
    }
}
