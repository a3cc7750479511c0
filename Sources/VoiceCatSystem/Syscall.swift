// The system edge: every syscall goes through `syscall(_:blocking:_:)`, which retries
// EINTR, maps EAGAIN/EWOULDBLOCK to nil for non-blocking calls, and turns errno
// into a typed `SystemError`.
import Glibc
import CLinux

/// A failed syscall: which call and the errno it set.
public struct SystemError: Error, Equatable, Sendable, CustomStringConvertible {
    public let call: String
    public let errno: Int32
    /// What failed, when errno does not say it (a resolver's own error text).
    public let detail: String?

    public init(_ call: String, errno: Int32) { self.call = call; self.errno = errno; detail = nil }
    /// A failure errno does not describe: `description` is "call: detail".
    public init(_ call: String, detail: String) { self.call = call; errno = 0; self.detail = detail }

    public var description: String {
        if let detail { return "\(call): \(detail)" }
        return "\(call): \(String(cString: strerror(errno))) (errno \(errno))"
    }
}

/// Runs `body` until it does not fail with EINTR. A result of -1 throws
/// `SystemError`, except EAGAIN/EWOULDBLOCK when `blocking` is false, which
/// returns nil ("try again later").
@inline(__always)
public func syscall<T: FixedWidthInteger>(_ name: String, blocking: Bool = true, _ body: () -> T) throws(SystemError) -> T? {
    while true {
        let r = body()
        if r != -1 { return r }
        let e = Glibc.errno
        if e == EINTR { continue }
        if !blocking && (e == EAGAIN || e == EWOULDBLOCK) { return nil }
        throw SystemError(name, errno: e)
    }
}

/// Like `syscall` for calls that are never non-blocking: always returns a value.
@inline(__always)
@discardableResult
public func syscallValue<T: FixedWidthInteger>(_ name: String, _ body: () -> T) throws(SystemError) -> T {
    // blocking: true never returns nil.
    try syscall(name, blocking: true, body)!
}

/// Monotonic clock readings.
public enum MonotonicClock {
    public static func nanoseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }
    public static func milliseconds() -> UInt64 { nanoseconds() / 1_000_000 }
}

/// A pthread mutex. On the audio path only as a receive slot's own lock (the renderer
/// takes it per slot per block; other threads hold it for short steps that do not
/// block: configuring the slot, reading its statistics); never a process-wide one.
public final class Lock: @unchecked Sendable {
    @usableFromInline let m = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    public init() { pthread_mutex_init(m, nil) }
    deinit { pthread_mutex_destroy(m); m.deallocate() }
    // Inlinable: a call into this module would retain the lock around it.
    @inlinable public func lock() { pthread_mutex_lock(m) }
    @inlinable public func unlock() { pthread_mutex_unlock(m) }
    /// Takes the lock if it is free; false (not taken) when another thread holds it.
    public func tryLock() -> Bool { pthread_mutex_trylock(m) == 0 }
    @inline(__always)
    public func withLock<T>(_ body: () throws -> T) rethrows -> T {
        lock(); defer { unlock() }
        return try body()
    }
}

/// Sleeps the calling thread.
public func sleepMilliseconds(_ ms: Int) {
    var req = timespec(tv_sec: ms / 1000, tv_nsec: (ms % 1000) * 1_000_000)
    var rem = timespec()
    while nanosleep(&req, &rem) == -1 && errno == EINTR { req = rem }
}

/// Sleeps the calling thread until `ns` on the monotonic clock (MonotonicClock.nanoseconds).
public func sleepUntil(monotonicNs ns: UInt64) {
    var ts = timespec(tv_sec: Int(ns / 1_000_000_000), tv_nsec: Int(ns % 1_000_000_000))
    while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nil) == EINTR {}
}

/// Starts a detached-or-joinable POSIX thread running `body`.
public final class SystemThread {
    private var thread = pthread_t()
    private final class Box { let body: () -> Void; let name: String; init(_ b: @escaping () -> Void, _ n: String) { body = b; name = n } }

    public init(name: String, _ body: @escaping () -> Void) {
        let box = Unmanaged.passRetained(Box(body, name)).toOpaque()
        let rc = pthread_create(&thread, nil, { arg in
            let b = Unmanaged<Box>.fromOpaque(arg!).takeRetainedValue()
            b.name.withCString { vcshim_set_thread_name($0) }
            b.body()
            return nil
        }, box)
        precondition(rc == 0, "pthread_create failed: \(rc)")
    }

    public func join() { pthread_join(thread, nil) }
}

/// A mutex with a condition variable, for threads that wait for a state change
/// (request replies, queued events). Control paths only.
public final class Condition: @unchecked Sendable {
    private let m = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let c = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    public init() {
        pthread_mutex_init(m, nil)
        var attr = pthread_condattr_t()
        pthread_condattr_init(&attr)
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC)
        pthread_cond_init(c, &attr)
        pthread_condattr_destroy(&attr)
    }
    deinit {
        pthread_cond_destroy(c); pthread_mutex_destroy(m)
        c.deallocate(); m.deallocate()
    }

    public func lock() { pthread_mutex_lock(m) }
    public func unlock() { pthread_mutex_unlock(m) }
    public func broadcast() { pthread_cond_broadcast(c) }

    @inline(__always)
    public func withLock<T>(_ body: () throws -> T) rethrows -> T {
        lock(); defer { unlock() }
        return try body()
    }

    /// Waits (lock held) until signalled or until the monotonic deadline (ms);
    /// false when the deadline passed. A nil deadline, or one too far to express in
    /// nanoseconds (a "no limit" taken as Int.max / 2 ms), waits forever.
    @discardableResult
    public func wait(untilMs deadline: UInt64?) -> Bool {
        guard let deadline else { pthread_cond_wait(c, m); return true }
        let (ns, overflow) = deadline.multipliedReportingOverflow(by: 1_000_000)
        if overflow || ns > UInt64(Int.max) { pthread_cond_wait(c, m); return true }
        var ts = timespec(tv_sec: Int(ns / 1_000_000_000), tv_nsec: Int(ns % 1_000_000_000))
        return pthread_cond_timedwait(c, m, &ts) == 0
    }
}

/// The calling thread's id, for "am I on one of my own threads" checks.
public func currentThreadID() -> pthread_t { pthread_self() }
public func sameThread(_ a: pthread_t, _ b: pthread_t) -> Bool { pthread_equal(a, b) != 0 }
