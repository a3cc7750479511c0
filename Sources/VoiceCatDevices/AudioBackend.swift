// The seam between the client engine and sound hardware: a backend lists and opens
// capture and playback devices; an open device moves interleaved int16 PCM in
// blocking periods. ALSA is one implementation (AlsaBackend); MemoryAudioBackend is
// another, for tests and hosts that want no hardware at all. A PipeWire or
// PulseAudio backend would be a third.

public enum DeviceDirection: Sendable { case capture, playback }

public struct DeviceInfo: Equatable, Sendable {
    public var name: String
    public var description: String
    /// A capture device that records what the system plays (a PulseAudio/PipeWire
    /// monitor source): usable for SCREEN_AUDIO.
    public var isMonitor: Bool
    public init(name: String, description: String, isMonitor: Bool = false) {
        self.name = name; self.description = description; self.isMonitor = isMonitor
    }
}

/// One open device. Used by one thread at a time (the capture or render thread).
public protocol AudioDevice: AnyObject {
    var name: String { get }
    var direction: DeviceDirection { get }
    var channels: Int { get }
    /// The rate the device runs at (48000 unless the device cannot).
    var sampleRate: Int { get }
    /// The period it runs in (frames at sampleRate): a card may tell its position only
    /// in steps of it.
    var periodFrames: Int { get }
    /// What its buffer holds at most (frames at sampleRate): a write of more than the
    /// room left blocks until the device has played that much.
    var bufferFrames: Int { get }
    /// What a device that runs in real time (a sound card) holds now, in its own
    /// frames: playback, written and not yet played; capture, captured and not yet
    /// read (after an over- or underrun, which the next transfer recovers: playback 0,
    /// capture a period: transfer now). nil for a device
    /// that runs as fast as it is driven (a file or null plugin, memory: it takes or
    /// gives any amount at once): the caller paces that one to the monotonic clock. A
    /// card's own clock paces the loops instead: paced to the monotonic clock, a card
    /// whose clock runs a little fast underran (playback) or overran (capture) as the
    /// two drifted apart.
    func heldFrames() -> Int?
    /// Over- (capture) or underruns (playback) recovered since the last call (or since
    /// it was opened): audio a listener lost to the device, not to the network. The
    /// thread that uses the device takes them as it counts them for the host.
    func takeXruns() -> Int
    /// Reads exactly `frames` interleaved frames. Throws DeviceError when the device fails.
    func read(_ buf: UnsafeMutablePointer<Int16>, frames: Int) throws
    /// Writes exactly `frames` interleaved frames. Throws DeviceError when the device fails.
    func write(_ buf: UnsafePointer<Int16>, frames: Int) throws
    func close()
}

/// Lists and opens devices.
public protocol AudioBackend: AnyObject, Sendable {
    var name: String { get }
    func listDevices(_ direction: DeviceDirection) -> [DeviceInfo]
    /// Opens `name` with `channels` at `sampleRate` (or the nearest rate the device
    /// offers; see AudioDevice.sampleRate; and the other of 1 and 2 channels when the
    /// device offers only that: see AudioDevice.channels), in periods of `periodFrames`.
    func open(_ name: String, direction: DeviceDirection, channels: Int, sampleRate: Int, periodFrames: Int) throws -> AudioDevice
}
