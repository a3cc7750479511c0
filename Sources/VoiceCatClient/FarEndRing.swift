// Thread hand-off of the played mix to the capture side (system edge: it locks).
import VoiceCatSystem

/// The far-end reference for echo cancellation: the mono downmix of the mix as it is
/// played, handed from the playback side to the capture side through a bounded
/// ring. The capture side takes one block per near-end block, so the delay between
/// them stays what the device buffering makes it; the canceller's tail absorbs it.
public final class FarEndRing: @unchecked Sendable {
    public let blockSize: Int
    private let capacity: Int
    private let buf: UnsafeMutablePointer<Int16>
    private var write = 0
    private var count = 0
    private let lock = Lock()

    public init(blockSize: Int = 480, blocks: Int = 64) {
        self.blockSize = blockSize
        capacity = blockSize * blocks
        buf = .allocate(capacity: capacity)
        buf.initialize(repeating: 0, count: capacity)
    }

    deinit { buf.deallocate() }

    /// Appends the played stereo mix (downmixed); the oldest is overwritten when full.
    public func pushStereo(_ pcm: UnsafePointer<Int16>, frames: Int) {
        lock.lock()
        for i in 0..<frames {
            buf[write] = Int16((Int32(pcm[2 * i]) + Int32(pcm[2 * i + 1])) / 2)
            write = (write + 1) % capacity
        }
        count = min(capacity, count + frames)
        lock.unlock()
    }

    /// Takes the oldest `blockSize` samples into `out`; false (out untouched) when
    /// less than a block is waiting.
    public func pop(into out: UnsafeMutablePointer<Int16>) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        guard count >= blockSize else { return false }
        var r = (write - count + capacity) % capacity
        for i in 0..<blockSize { out[i] = buf[r]; r = (r + 1) % capacity }
        count -= blockSize
        return true
    }

    public func clear() { lock.withLock { count = 0 } }
}
