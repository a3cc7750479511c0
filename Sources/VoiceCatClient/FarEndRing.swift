// Hand-off of the played mix to the talker-side echo cancellers, without a lock.
import Synchronization

/// The far-end reference for echo cancellation: the mono downmix of the mix as it is
/// played. One producer writes (the thread that renders; renders are serialized by
/// the output stage), every echo-cancelling stream reads with its own cursor, one
/// block per near-end block, so the delay between them stays what the device
/// buffering makes it; the canceller's tail absorbs it. A reader that falls a whole
/// ring behind skips ahead to half a ring behind the writer.
public final class FarEndRing: @unchecked Sendable {
    public let blockSize: Int
    private let capacity: Int
    private let mask: Int
    private let buf: UnsafeMutablePointer<Int16>
    /// Samples written since creation; the producer's release publishes them.
    private let written = Atomic<UInt64>(0)

    public init(blockSize: Int = 480, blocks: Int = 64) {
        self.blockSize = blockSize
        var c = 1
        while c < blockSize * blocks { c <<= 1 }
        capacity = c
        mask = c - 1
        buf = .allocate(capacity: capacity)
        buf.initialize(repeating: 0, count: capacity)
    }

    deinit { buf.deallocate() }

    /// Producer: appends the played stereo mix, downmixed.
    public func pushStereo(_ pcm: UnsafePointer<Int16>, frames: Int) {
        let w = written.load(ordering: .relaxed)
        for i in 0..<frames {
            buf[(Int(truncatingIfNeeded: w) &+ i) & mask] = Int16((Int32(pcm[2 * i]) + Int32(pcm[2 * i + 1])) / 2)
        }
        written.store(w &+ UInt64(frames), ordering: .releasing)
    }

    /// A reader's position; nil until its first read, which starts at the present.
    public struct Cursor { public var position: UInt64? = nil; public init() {} }

    /// A cursor at what is being written now: a reader that starts here takes the
    /// played mix from this moment on, in order.
    public func cursorAtPresent() -> Cursor {
        var c = Cursor()
        c.position = written.load(ordering: .acquiring)
        return c
    }

    /// Reader: takes the next `blockSize` samples into `out`; false (out untouched)
    /// when less than a block is waiting.
    public func pop(into out: UnsafeMutablePointer<Int16>, cursor: inout Cursor) -> Bool {
        let w = written.load(ordering: .acquiring)
        var c = cursor.position ?? w
        if w &- c > UInt64(capacity - blockSize) { c = w &- UInt64(capacity / 2) }
        guard w &- c >= UInt64(blockSize) else { cursor.position = c; return false }
        for i in 0..<blockSize { out[i] = buf[(Int(truncatingIfNeeded: c) &+ i) & mask] }
        cursor.position = c &+ UInt64(blockSize)
        return true
    }
}
