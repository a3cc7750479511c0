// Blocking waits that another thread can cut short: a Canceller is an eventfd every
// cancellable wait polls beside its own descriptor, so a destroy or disconnect
// ends a connect or a request at once instead of after its timeout.
import Glibc
import Synchronization

/// Thrown by a cancellable wait once its Canceller fired.
public struct CancelledError: Error, CustomStringConvertible {
    public init() {}
    public var description: String { "cancelled" }
}

public final class Canceller: @unchecked Sendable {
    private let event: WakeEvent
    private let fired = Atomic<Bool>(false)

    public init() throws(SystemError) { event = try WakeEvent() }

    /// Cancels every wait in progress and every later one until `reset`.
    public func cancel() {
        fired.store(true, ordering: .sequentiallyConsistent)
        event.wake()
    }

    public var isCancelled: Bool { fired.load(ordering: .sequentiallyConsistent) }

    /// Arms the canceller again (a new connect).
    public func reset() {
        fired.store(false, ordering: .sequentiallyConsistent)
        event.drain()
    }

    /// Waits until `fd` has `events`, the deadline passes (false), or a cancel
    /// (throws CancelledError).
    public func wait(fd: Int32, events: Int16, deadlineMs: UInt64) throws -> Bool {
        var fds = [pollfd(fd: fd, events: events, revents: 0), pollfd(fd: event.fd, events: Int16(POLLIN), revents: 0)]
        while true {
            if isCancelled { throw CancelledError() }
            let left = Int32(clamping: max(0, Int64(deadlineMs) - Int64(MonotonicClock.milliseconds())))
            let n = Glibc.poll(&fds, 2, left)
            if isCancelled { throw CancelledError() }
            if n > 0 && fds[0].revents != 0 { return true }
            if n == 0 { return false }
            if n < 0 && errno != EINTR { throw SystemError("poll", errno: errno) }
        }
    }

    /// Sleeps until the deadline or a cancel (throws CancelledError).
    public func sleep(untilMs deadline: UInt64) throws {
        var p = pollfd(fd: event.fd, events: Int16(POLLIN), revents: 0)
        while MonotonicClock.milliseconds() < deadline {
            if isCancelled { throw CancelledError() }
            let left = Int32(clamping: max(0, Int64(deadline) - Int64(MonotonicClock.milliseconds())))
            _ = Glibc.poll(&p, 1, left)
        }
        if isCancelled { throw CancelledError() }
    }
}

extension Socket {
    /// Connects a TCP socket, waiting until the deadline or (with a Canceller) a cancel;
    /// from the local address `local` when given (a test's many source addresses).
    public static func connectTCP(_ address: SocketAddress, deadlineMs: UInt64, cancel: Canceller?,
                                  from local: SocketAddress? = nil) throws -> Socket {
        let s = try make(family: address.family, type: Int32(SOCK_STREAM.rawValue))
        if let local { try s.bind(local) }
        try s.setNonBlocking(true)
        let rc = address.withSockaddr { Glibc.connect(s.fd, $0, $1) }
        if rc != 0 {
            guard errno == EINPROGRESS else { throw SystemError("connect(\(address))", errno: errno) }
            let left = Int(max(0, Int64(deadlineMs) - Int64(MonotonicClock.milliseconds())))
            let ready = try cancel.map { try $0.wait(fd: s.fd, events: Int16(POLLOUT), deadlineMs: deadlineMs) }
                ?? s.waitFor(events: Int16(POLLOUT), timeoutMs: left)
            guard ready else {
                throw SystemError("connect(\(address))", errno: ETIMEDOUT)
            }
            var err: Int32 = 0
            var len = socklen_t(MemoryLayout<Int32>.size)
            getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len)
            if err != 0 { throw SystemError("connect(\(address))", errno: err) }
        }
        try? s.setOption(Int32(IPPROTO_TCP), TCP_NODELAY, 1)
        return s
    }
}
