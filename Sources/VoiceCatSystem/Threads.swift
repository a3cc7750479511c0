// Thread identity and lock-free hand-offs for the client's threads: which client and
// role a thread plays (so "am I inside one of my callbacks" needs no shared field),
// a callback cell whose reader takes no lock and whose setter waits for a running
// call, and small atomics read on the audio path.
import CLinux
import Glibc
import Synchronization

/// The role a thread plays for one owner (a client), kept in thread-local storage
/// for the thread's lifetime. No allocation: the owner's address and the role share
/// one pointer-sized word (objects are 16-byte aligned; roles are 1...15).
public enum ThreadIdentity {
    private static let key: pthread_key_t = {
        var k = pthread_key_t()
        precondition(pthread_key_create(&k, nil) == 0, "pthread_key_create failed")
        return k
    }()

    /// Marks the calling thread as playing `role` (1...15) for `owner`.
    public static func mark(owner: AnyObject, role: Int) {
        precondition(role >= 1 && role <= 15)
        let word = address(of: owner) | UInt(role)
        pthread_setspecific(key, UnsafeRawPointer(bitPattern: word))
    }

    private static func address(of o: AnyObject) -> UInt { UInt(bitPattern: Unmanaged.passUnretained(o).toOpaque()) }

    /// Forgets the calling thread's role.
    public static func clear() { pthread_setspecific(key, nil) }

    /// Whether the calling thread plays a role for any owner (a thread of any client).
    public static var isMarked: Bool { pthread_getspecific(key) != nil }

    /// The role the calling thread plays for `owner`, or nil (a host thread, or
    /// another client's thread).
    public static func role(for owner: AnyObject) -> Int? {
        guard let p = pthread_getspecific(key) else { return nil }
        let word = UInt(bitPattern: p)
        guard word & ~UInt(15) == address(of: owner) else { return nil }
        return Int(word & 15)
    }
}

/// Thread-local: the innermost CallbackCell call the thread is inside, as a pointer to
/// that call's `CallFrame` (on the calling thread's stack), which links to the one it
/// is nested in: a thread can be inside several cells' calls at once (a pull from the
/// event callback hands blocks to the per-speaker sink).
private let insideCallbackKey: pthread_key_t = {
    var k = pthread_key_t()
    precondition(pthread_key_create(&k, nil) == 0, "pthread_key_create failed")
    return k
}()

/// One CallbackCell call on the calling thread's stack: its cell and the frame of the
/// call it is nested in (insideCallbackKey).
private struct CallFrame {
    let cell: UnsafeRawPointer
    let outer: UnsafeMutableRawPointer?
}

/// A callback (held in an immutable box) called by one reader thread at a time
/// without locks or reference counting, and replaced by any thread with the
/// guarantee that the old box is no longer in use when `set` returns.
///
/// Calls are numbered. Reader: takes the next number, loads the box, calls, marks its
/// number ended (sequentially consistent; calls never overlap: one reader at a time).
/// Setter: swaps, reads how many calls have started, and waits until that many have
/// ended: every call that could have loaded the previous box started before the swap.
/// So it waits for the call running now at most, not for a moment when none runs (a
/// reader calling back to back starved the setter: 1.4 s under an event storm). A
/// setter running inside the call itself (the reader's own thread) cannot wait for
/// itself: the old box is released by the reader after the call returns.
public final class CallbackCell<Box: AnyObject>: @unchecked Sendable {
    private let current = Atomic<UnsafeMutableRawPointer?>(nil)
    /// Calls started and the number of the last one ended.
    private let started = Atomic<UInt64>(0)
    private let ended = Atomic<UInt64>(0)
    /// Written and read only by the reader's thread (inside the call, or after it).
    private var deferredRelease: UnsafeMutableRawPointer? = nil
    public init() {}

    deinit {
        if let p = current.exchange(nil, ordering: .sequentiallyConsistent) { Unmanaged<Box>.fromOpaque(p).release() }
        if let p = deferredRelease { Unmanaged<Box>.fromOpaque(p).release() }
    }

    /// True while a box is installed.
    public var isSet: Bool { current.load(ordering: .acquiring) != nil }

    /// True when the calling thread is inside a call made through this cell, at any
    /// depth (other cells' calls may be nested in it).
    public var callingThreadIsInside: Bool {
        let me = UnsafeRawPointer(Unmanaged.passUnretained(self).toOpaque())
        var frame: UnsafeMutableRawPointer? = pthread_getspecific(insideCallbackKey)
        while let f = frame {
            let call = f.assumingMemoryBound(to: CallFrame.self).pointee
            if call.cell == me { return true }
            frame = call.outer
        }
        return false
    }

    /// Calls `body` with the installed box, if any (one reader thread at a time).
    /// Returns false when none is installed. Takes no lock and does not allocate.
    @discardableResult
    public func call(_ body: (Box) -> Void) -> Bool {
        let number = started.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue
        guard let p = current.load(ordering: .sequentiallyConsistent) else {
            ended.store(number, ordering: .sequentiallyConsistent)
            return false
        }
        // A call may run inside another cell's call on the same thread (a pull from
        // inside the event callback hands blocks to the per-speaker sink): this call's
        // frame links to the outer one, which is put back afterwards.
        let outer = pthread_getspecific(insideCallbackKey)
        var frame = CallFrame(cell: UnsafeRawPointer(Unmanaged.passUnretained(self).toOpaque()), outer: outer)
        withUnsafeMutablePointer(to: &frame) { f in
            pthread_setspecific(insideCallbackKey, UnsafeRawPointer(f))
            Unmanaged<Box>.fromOpaque(p)._withUnsafeGuaranteedRef { body($0) }
            pthread_setspecific(insideCallbackKey, outer)   // before `f` goes out of scope
        }
        ended.store(number, ordering: .sequentiallyConsistent)
        if let d = deferredRelease {
            deferredRelease = nil
            Unmanaged<Box>.fromOpaque(d).release()
        }
        return true
    }

    /// Installs `box` (nil clears). Returns once no call can still be using the
    /// previous box, except when called from inside a call (then it returns at once
    /// and the previous box is released when that call returns).
    public func set(_ box: Box?) {
        let new = box.map { Unmanaged.passRetained($0).toOpaque() }
        let old = current.exchange(new, ordering: .sequentiallyConsistent)
        guard let old else { return }
        if callingThreadIsInside {
            if let d = deferredRelease { Unmanaged<Box>.fromOpaque(d).release() }
            deferredRelease = old
            return
        }
        var spins = 0
        let target = started.load(ordering: .sequentiallyConsistent)
        while ended.load(ordering: .sequentiallyConsistent) < target {
            spins += 1
            if spins < 100 { sched_yield() } else { sleepMilliseconds(1) }
        }
        Unmanaged<Box>.fromOpaque(old).release()
    }
}

/// A per-thread depth counter (thread-local storage, no allocation): whether the calling
/// thread is inside some region, nested or not.
public final class ThreadFlag: @unchecked Sendable {
    private let key: pthread_key_t
    public init() {
        var k = pthread_key_t()
        precondition(pthread_key_create(&k, nil) == 0, "pthread_key_create failed")
        key = k
    }
    public func enter() { pthread_setspecific(key, UnsafeRawPointer(bitPattern: depth + 1)) }
    public func leave() { pthread_setspecific(key, depth > 1 ? UnsafeRawPointer(bitPattern: depth - 1) : nil) }
    public var isSet: Bool { depth > 0 }
    private var depth: Int { Int(bitPattern: pthread_getspecific(key)) }
}

/// A stop flag shared with a worker thread; read every period, so lock-free.
public final class StopFlag: Sendable {
    private let value = Atomic<Bool>(false)
    public init() {}
    public var isSet: Bool { value.load(ordering: .acquiring) }
    public func set() { value.store(true, ordering: .releasing) }
}

/// A counter read on the audio path; lock-free.
public final class AtomicCounter: Sendable {
    private let value = Atomic<Int>(0)
    public init() {}
    public func load() -> Int { value.load(ordering: .relaxed) }
    public func add(_ d: Int) { value.wrappingAdd(d, ordering: .relaxed) }
    public func store(_ v: Int) { value.store(v, ordering: .relaxed) }
}

/// A one-shot wake-up at a monotonic time that any thread can move earlier or later
/// without waking the thread that waits on it (a timerfd). One thread waits: in
/// wait(), or (a `polled` timer) by watching `fd` for POLLIN and calling consume()
/// when it is readable.
public final class DeadlineTimer: @unchecked Sendable {
    /// The timerfd, readable once the armed time has passed (until consume() or a re-arm).
    public let fd: Int32

    public init(polled: Bool = false) throws(SystemError) {
        fd = try syscallValue("timerfd_create") { vcshim_timerfd_create(polled ? 1 : 0) }
    }

    /// A polled timer: takes the expiry away, so the descriptor is not readable until
    /// the next armed time passes. Never blocks (a re-arm in between may have taken it).
    public func consume() { _ = vcshim_timerfd_wait(fd) }

    deinit { Glibc.close(fd) }

    /// Wakes the waiter at `ns` (MonotonicClock; a time already past: at once).
    public func arm(atNs ns: UInt64) { _ = vcshim_timerfd_arm_abs(fd, max(ns, 1)) }

    /// No wake-up until armed again.
    public func disarm() { _ = vcshim_timerfd_arm_abs(fd, 0) }

    /// Blocks until the armed time (for ever while disarmed). Not for a polled timer.
    public func wait() {
        while vcshim_timerfd_wait(fd) != 0 && errno == EINTR {}
    }
}
