// epoll(7) and batched datagram I/O (recvmmsg/sendmmsg) for loops that serve many
// descriptors: the cost of a wakeup grows with the descriptors that are ready, not
// with the descriptors registered. Linux only (through the CLinux shims).
import Glibc
import CLinux

/// What a registered descriptor is watched for.
public struct EventMask: OptionSet, Sendable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    public static let readable = EventMask(rawValue: vcshim_epollin)
    public static let writable = EventMask(rawValue: vcshim_epollout)
    /// The peer shut down its writing side.
    public static let peerClosed = EventMask(rawValue: vcshim_epollrdhup)
    /// Reported only (never needs asking for).
    public static let error = EventMask(rawValue: vcshim_epollerr)
    public static let hangup = EventMask(rawValue: vcshim_epollhup)
}

/// One readiness report: the mask that fired and the cookie given at registration.
public struct PollEvent: Sendable {
    public let mask: EventMask
    public let data: UInt64
}

/// An epoll instance (level-triggered) with a preallocated event array.
public final class EventPoll {
    public let fd: Int32
    private let capacity: Int
    private let events: UnsafeMutablePointer<vcshim_epoll_event>

    /// `capacity`: most events reported by one `wait` (at most 1024).
    public init(capacity: Int = 256) throws(SystemError) {
        precondition(capacity > 0 && capacity <= 1024)
        fd = try syscallValue("epoll_create1") { vcshim_epoll_create() }
        self.capacity = capacity
        events = .allocate(capacity: capacity)
    }

    deinit {
        Glibc.close(fd)
        events.deallocate()
    }

    public func add(_ target: Int32, _ mask: EventMask, data: UInt64) throws(SystemError) {
        try syscallValue("epoll_ctl(ADD)") { vcshim_epoll_add(fd, target, mask.rawValue, data) }
    }

    public func modify(_ target: Int32, _ mask: EventMask, data: UInt64) throws(SystemError) {
        try syscallValue("epoll_ctl(MOD)") { vcshim_epoll_modify(fd, target, mask.rawValue, data) }
    }

    /// Stops watching `target` (closing a descriptor also does this).
    public func remove(_ target: Int32) {
        _ = vcshim_epoll_remove(fd, target)
    }

    /// Waits up to `timeoutMs` (-1: until something is ready); returns how many events
    /// `event(_:)` can read. An interrupted wait returns 0.
    public func wait(timeoutMs: Int32) throws(SystemError) -> Int {
        let n = vcshim_epoll_wait(fd, events, Int32(capacity), timeoutMs)
        if n < 0 {
            if errno == EINTR { return 0 }
            throw SystemError("epoll_wait", errno: errno)
        }
        return Int(n)
    }

    public func event(_ i: Int) -> PollEvent {
        PollEvent(mask: EventMask(rawValue: events[i].events), data: events[i].data)
    }
}

/// Preallocated slots for many datagrams at once: `receive` fills them with one
/// recvmmsg(2); for sending, slots are filled one by one and `send` hands them to
/// sendmmsg(2). Nothing allocates after `init`.
public final class DatagramBatch {
    public let capacity: Int
    /// Bytes per slot. A received datagram longer than this is reported truncated.
    public let slotSize: Int
    private let buffers: UnsafeMutableRawPointer
    private let names: UnsafeMutablePointer<sockaddr_storage>
    private let iovecs: UnsafeMutablePointer<iovec>
    private let headers: UnsafeMutablePointer<vcshim_mmsghdr>
    /// Ancillary data per slot for kernel receive timestamps (nil: not asked for).
    private let control: UnsafeMutableRawPointer?
    private let controlSize: Int
    /// Slots filled: received by the last `receive`, or queued for `send`.
    public private(set) var count = 0

    /// `timestamps`: keep room for each datagram's kernel receive time (the socket
    /// must have them enabled: Socket.enableReceiveTimestamps()).
    public init(capacity: Int, slotSize: Int, timestamps: Bool = false) {
        precondition(capacity > 0 && capacity <= 1024 && slotSize > 0)
        self.capacity = capacity
        self.slotSize = slotSize
        buffers = .allocate(byteCount: capacity * slotSize, alignment: 16)
        names = .allocate(capacity: capacity)
        iovecs = .allocate(capacity: capacity)
        headers = .allocate(capacity: capacity)
        controlSize = timestamps ? Int(vcshim_timestamp_control_size()) : 0
        control = timestamps ? .allocate(byteCount: capacity * controlSize, alignment: 16) : nil
        for i in 0..<capacity {
            iovecs[i] = iovec(iov_base: buffers + i * slotSize, iov_len: slotSize)
            headers[i] = vcshim_mmsghdr(msg_hdr: msghdr(), msg_len: 0)
            headers[i].msg_hdr.msg_name = UnsafeMutableRawPointer(names + i)
            headers[i].msg_hdr.msg_iov = iovecs + i
            headers[i].msg_hdr.msg_iovlen = 1
        }
    }

    deinit {
        buffers.deallocate()
        names.deallocate()
        iovecs.deallocate()
        headers.deallocate()
        control?.deallocate()
    }

    // MARK: receiving

    /// Receives up to `capacity` waiting datagrams without blocking; returns how many (0: none waiting).
    public func receive(from socket: Socket) throws(SystemError) -> Int {
        for i in 0..<capacity {
            headers[i].msg_hdr.msg_namelen = socklen_t(MemoryLayout<sockaddr_storage>.size)
            headers[i].msg_hdr.msg_flags = 0
            iovecs[i].iov_len = slotSize
            if let control {
                headers[i].msg_hdr.msg_control = control + i * controlSize
                headers[i].msg_hdr.msg_controllen = controlSize
            }
        }
        let n = try syscall("recvmmsg", blocking: false) {
            vcshim_recvmmsg(socket.fd, headers, UInt32(capacity), Int32(MSG_DONTWAIT))
        }
        count = Int(n ?? 0)
        return count
    }

    /// The bytes of received datagram `i` (writable: opened in place).
    public func datagram(_ i: Int) -> UnsafeMutableRawBufferPointer {
        UnsafeMutableRawBufferPointer(start: buffers + i * slotSize, count: Int(headers[i].msg_len))
    }

    /// When the kernel received datagram `i` (CLOCK_REALTIME, ns), or nil when the
    /// batch or the socket keeps no timestamps.
    public func receiveTimeRealtimeNs(_ i: Int) -> UInt64? {
        guard control != nil else { return nil }
        let t = withUnsafePointer(to: &headers[i].msg_hdr) { vcshim_timestampns($0) }
        return t == 0 ? nil : t
    }

    /// True when datagram `i` was longer than a slot (its bytes are cut off).
    public func wasTruncated(_ i: Int) -> Bool { headers[i].msg_hdr.msg_flags & Int32(MSG_TRUNC) != 0 }

    /// The address datagram `i` came from.
    public func source(_ i: Int) -> SocketAddress {
        UnsafeRawPointer(names + i).withMemoryRebound(to: sockaddr.self, capacity: 1) {
            SocketAddress(raw: $0, length: headers[i].msg_hdr.msg_namelen)
        }
    }

    // MARK: sending

    public var isFull: Bool { count == capacity }
    public var isEmpty: Bool { count == 0 }

    /// The whole buffer of the next free slot; fill it, then `commit`.
    public func nextSlot() -> UnsafeMutableRawBufferPointer {
        precondition(count < capacity, "DatagramBatch full: send first")
        return UnsafeMutableRawBufferPointer(start: buffers + count * slotSize, count: slotSize)
    }

    /// Queues the first `length` bytes of the next slot for `destination`.
    public func commit(length: Int, to destination: SocketAddress) {
        precondition(count < capacity && length <= slotSize)
        let i = count
        iovecs[i].iov_len = length
        destination.withSockaddr { sa, len in
            UnsafeMutableRawPointer(names + i).copyMemory(from: sa, byteCount: Int(len))
            headers[i].msg_hdr.msg_namelen = len
        }
        count += 1
    }

    /// Sends every queued datagram (as few sendmmsg calls as the kernel allows) and
    /// empties the batch. Returns how many were sent and how many could not be
    /// (socket buffer full, or a destination the kernel refused).
    @discardableResult
    public func send(on socket: Socket) -> (sent: Int, failed: Int) {
        var done = 0, failed = 0
        while done < count {
            let r = vcshim_sendmmsg(socket.fd, headers + done, UInt32(count - done), Int32(MSG_NOSIGNAL | MSG_DONTWAIT))
            if r > 0 {
                done += Int(r)
                continue
            }
            let e = errno
            if r < 0 && e == EINTR { continue }
            if r < 0 && (e == EAGAIN || e == EWOULDBLOCK) {
                // The socket buffer is full: what is left is dropped rather than queued.
                failed += count - done
                break
            }
            // The first remaining datagram was refused (e.g. an unreachable address): skip it.
            failed += 1
            done += 1
        }
        let sent = count - failed
        count = 0
        return (sent, failed)
    }
}

/// Process resource limits.
public enum ResourceLimits {
    /// Raises the soft limit of open descriptors to `wanted` (and the hard limit too when
    /// permitted); returns the soft limit in force afterwards.
    @discardableResult
    public static func raiseOpenFiles(to wanted: Int) -> Int {
        var rl = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &rl) == 0 else { return 0 }
        let want = rlim_t(wanted)
        if rl.rlim_cur >= want { return Int(clamping: rl.rlim_cur) }
        if rl.rlim_max < want {
            var bigger = rl
            bigger.rlim_max = want
            bigger.rlim_cur = want
            if setrlimit(Int32(RLIMIT_NOFILE.rawValue), &bigger) == 0 { return wanted }
        }
        rl.rlim_cur = min(want, rl.rlim_max)
        _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &rl)
        _ = getrlimit(Int32(RLIMIT_NOFILE.rawValue), &rl)
        return Int(clamping: rl.rlim_cur)
    }

    /// The current soft limit of open descriptors.
    public static var openFiles: Int {
        var rl = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &rl) == 0 else { return 0 }
        return Int(clamping: rl.rlim_cur)
    }
}
