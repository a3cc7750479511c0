// Sockets: addresses, TCP listener/stream, UDP, poll. The only place that knows
// about file descriptors of the network.
import Glibc
import CLinux

/// An IPv4 or IPv6 socket address. Value type, comparable by family, address and port.
public struct SocketAddress: Hashable, Sendable, CustomStringConvertible {
    public private(set) var storage = sockaddr_storage()
    public private(set) var length: socklen_t = 0

    public init() {}

    /// Resolves `host` (numeric or a name such as "localhost") and `port`.
    public init(host: String, port: UInt16) throws(SystemError) {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var res: UnsafeMutablePointer<addrinfo>? = nil
        let rc = getaddrinfo(host, String(port), &hints, &res)
        guard rc == 0, let first = res else {
            // The resolver's own words ("Name or service not known"), not an errno's.
            let why = rc == EAI_SYSTEM ? String(cString: strerror(Glibc.errno)) : String(cString: gai_strerror(rc))
            throw SystemError("cannot resolve \(host)", detail: rc == 0 ? "no address" : why)
        }
        defer { freeaddrinfo(res) }
        // Prefer IPv4 when a name resolves to both (loopback servers bind 127.0.0.1 by default).
        var pick = first
        var p: UnsafeMutablePointer<addrinfo>? = first
        while let a = p { if a.pointee.ai_family == AF_INET { pick = a; break }; p = a.pointee.ai_next }
        self.init(raw: pick.pointee.ai_addr, length: pick.pointee.ai_addrlen)
    }

    public init(raw: UnsafePointer<sockaddr>, length: socklen_t) {
        withUnsafeMutableBytes(of: &storage) { dst in
            dst.copyMemory(from: UnsafeRawBufferPointer(start: raw, count: Int(length)))
        }
        self.length = length
    }

    public var family: Int32 { Int32(storage.ss_family) }

    public var port: UInt16 {
        get {
            withUnsafeBytes(of: storage) { b in
                // sin_port and sin6_port both sit at offset 2.
                UInt16(bigEndian: b.load(fromByteOffset: 2, as: UInt16.self))
            }
        }
        set {
            withUnsafeMutableBytes(of: &storage) { b in b.storeBytes(of: newValue.bigEndian, toByteOffset: 2, as: UInt16.self) }
        }
    }

    /// "1.2.3.4:5" or "[::1]:5".
    public var description: String {
        var buf = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        return withUnsafeBytes(of: storage) { b -> String in
            if family == AF_INET {
                _ = inet_ntop(AF_INET, b.baseAddress! + 4, &buf, socklen_t(buf.count))
                return "\(String(cString: buf)):\(port)"
            } else if family == AF_INET6 {
                _ = inet_ntop(AF_INET6, b.baseAddress! + 8, &buf, socklen_t(buf.count))
                return "[\(String(cString: buf))]:\(port)"
            }
            return "<family \(family)>"
        }
    }

    /// (family, port, address) packed without allocating: IPv4 uses `lo` only.
    private var key: (family: Int32, port: UInt16, hi: UInt64, lo: UInt64) {
        withUnsafeBytes(of: storage) { b in
            if family == AF_INET {
                return (AF_INET, port, 0, UInt64(b.loadUnaligned(fromByteOffset: 4, as: UInt32.self)))
            }
            if family == AF_INET6 {
                return (AF_INET6, port, b.loadUnaligned(fromByteOffset: 8, as: UInt64.self),
                        b.loadUnaligned(fromByteOffset: 16, as: UInt64.self))
            }
            return (family, 0, 0, 0)
        }
    }

    /// The same address with port 0: what per-source limits count by.
    public var host: SocketAddress {
        var a = self
        a.port = 0
        return a
    }

    public static func == (a: SocketAddress, b: SocketAddress) -> Bool { a.key == b.key }
    public func hash(into h: inout Hasher) {
        let k = key
        h.combine(k.family); h.combine(k.port); h.combine(k.hi); h.combine(k.lo)
    }

    /// The address as its raw sockaddr bytes (family, port, address).
    public func withRawBytes<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
        Swift.withUnsafeBytes(of: storage) { body(UnsafeRawBufferPointer(rebasing: $0[0..<Int(length)])) }
    }

    func withSockaddr<R>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        withUnsafeBytes(of: storage) { body($0.baseAddress!.assumingMemoryBound(to: sockaddr.self), length) }
    }
}

/// An owned socket file descriptor; closed on `close()` or deinit.
public final class Socket {
    public private(set) var fd: Int32

    init(fd: Int32) { self.fd = fd }

    deinit { if fd >= 0 { Glibc.close(fd) } }

    public func close() {
        if fd >= 0 { Glibc.close(fd); fd = -1 }
    }

    /// Ends the connection both ways, keeping the descriptor (a thread polling it sees
    /// it readable, and reads its end).
    public func shutdownBothWays() {
        if fd >= 0 { _ = Glibc.shutdown(fd, Int32(SHUT_RDWR)) }
    }

    static func make(family: Int32, type: Int32) throws(SystemError) -> Socket {
        let fd = try syscallValue("socket") { socket(family, type | Int32(SOCK_CLOEXEC.rawValue), 0) }
        return Socket(fd: fd)
    }

    public func setNonBlocking(_ on: Bool = true) throws(SystemError) {
        let flags = try syscallValue("fcntl(F_GETFL)") { fcntl(fd, F_GETFL) }
        try syscallValue("fcntl(F_SETFL)") { fcntl(fd, F_SETFL, on ? flags | O_NONBLOCK : flags & ~O_NONBLOCK) }
    }

    func setOption(_ level: Int32, _ name: Int32, _ value: Int32) throws(SystemError) {
        var v = value
        try syscallValue("setsockopt(\(name))") { setsockopt(fd, level, name, &v, socklen_t(MemoryLayout<Int32>.size)) }
    }

    public func bind(_ address: SocketAddress) throws(SystemError) {
        try syscallValue("bind(\(address))") { address.withSockaddr { Glibc.bind(fd, $0, $1) } }
    }

    /// The address the socket is bound to.
    public func localAddress() throws(SystemError) -> SocketAddress {
        var ss = sockaddr_storage()
        var len = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = try withUnsafeMutablePointer(to: &ss) { (p) throws(SystemError) in
            try p.withMemoryRebound(to: sockaddr.self, capacity: 1) { (sp) throws(SystemError) in
                try syscallValue("getsockname") { getsockname(fd, sp, &len) }
            }
        }
        return withUnsafePointer(to: &ss) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { SocketAddress(raw: $0, length: len) } }
    }

    // MARK: TCP

    /// A listening TCP socket.
    public static func listenTCP(_ address: SocketAddress, backlog: Int32 = 128) throws(SystemError) -> Socket {
        let s = try make(family: address.family, type: Int32(SOCK_STREAM.rawValue))
        try s.setOption(SOL_SOCKET, SO_REUSEADDR, 1)
        try s.bind(address)
        try syscallValue("listen") { listen(s.fd, backlog) }
        return s
    }

    /// Accepts one pending connection (non-blocking listener: nil when none).
    public func accept() throws(SystemError) -> (Socket, SocketAddress)? {
        var ss = sockaddr_storage()
        var len = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let fd = try withUnsafeMutablePointer(to: &ss) { (p) throws(SystemError) -> Int32? in
            try p.withMemoryRebound(to: sockaddr.self, capacity: 1) { (sp) throws(SystemError) -> Int32? in
                try syscall("accept4", blocking: false) { vcshim_accept4(self.fd, sp, &len, Int32(SOCK_CLOEXEC.rawValue)) }
            }
        }
        guard let fd else { return nil }
        let addr = withUnsafePointer(to: &ss) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { SocketAddress(raw: $0, length: len) } }
        let s = Socket(fd: fd)
        try? s.setOption(Int32(IPPROTO_TCP), TCP_NODELAY, 1)
        return (s, addr)
    }

    /// Connects a TCP socket, waiting at most `timeoutMs`; from `local` when given.
    public static func connectTCP(_ address: SocketAddress, timeoutMs: Int, from local: SocketAddress? = nil) throws(SystemError) -> Socket {
        do {
            return try connectTCP(address, deadlineMs: MonotonicClock.milliseconds() + UInt64(max(0, timeoutMs)), cancel: nil, from: local)
        } catch {
            throw error as? SystemError ?? SystemError("connect(\(address))", errno: EIO)
        }
    }

    /// Waits until `events` are ready; false on timeout.
    public func waitFor(events: Int16, timeoutMs: Int) throws(SystemError) -> Bool {
        var p = pollfd(fd: fd, events: events, revents: 0)
        let deadline = MonotonicClock.milliseconds() + UInt64(max(0, timeoutMs))
        while true {
            let left = Int32(max(0, Int64(deadline) - Int64(MonotonicClock.milliseconds())))
            let n = Glibc.poll(&p, 1, left)
            if n > 0 { return true }
            if n == 0 { return false }
            if errno != EINTR { throw SystemError("poll", errno: errno) }
        }
    }

    /// Reads what is available (non-blocking: nil when nothing; 0 at EOF).
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws(SystemError) -> Int? {
        try syscall("read", blocking: false) { Glibc.read(fd, buffer.baseAddress, buffer.count) }
    }

    /// Writes what it can (non-blocking: nil when the socket buffer is full).
    public func write(_ bytes: UnsafeRawBufferPointer) throws(SystemError) -> Int? {
        try syscall("send", blocking: false) { Glibc.send(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL)) }
    }

    // MARK: UDP

    /// A bound UDP socket.
    public static func bindUDP(_ address: SocketAddress) throws(SystemError) -> Socket {
        let s = try make(family: address.family, type: Int32(SOCK_DGRAM.rawValue))
        try s.bind(address)
        return s
    }

    /// An unbound UDP socket of the address family of `peer`.
    public static func udp(familyOf peer: SocketAddress) throws(SystemError) -> Socket {
        try make(family: peer.family, type: Int32(SOCK_DGRAM.rawValue))
    }

    public func setReceiveBuffer(_ bytes: Int32) { try? setOption(SOL_SOCKET, SO_RCVBUF, bytes) }
    /// Asks the kernel to stamp each received datagram (DatagramBatch reads the stamps).
    public func enableReceiveTimestamps() throws(SystemError) {
        try syscallValue("setsockopt(SO_TIMESTAMPNS)") { vcshim_enable_timestampns(fd) }
    }
    public func setSendBuffer(_ bytes: Int32) { try? setOption(SOL_SOCKET, SO_SNDBUF, bytes) }

    /// TCP: bytes written that the peer has not acknowledged yet (the kernel's send
    /// queue), nil if the kernel does not say.
    public var unacknowledgedBytes: Int? {
        let n = vcshim_unacknowledged_bytes(fd)
        return n >= 0 ? Int(n) : nil
    }

    /// Sends one datagram. nil when the socket buffer is full (non-blocking).
    @discardableResult
    public func sendTo(_ bytes: UnsafeRawBufferPointer, _ address: SocketAddress) throws(SystemError) -> Int? {
        try syscall("sendto", blocking: false) {
            address.withSockaddr { Glibc.sendto(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL), $0, $1) }
        }
    }

    /// Receives one datagram into `buffer`: (length, source), nil when none is waiting.
    /// A datagram longer than the buffer is reported with its full length (MSG_TRUNC).
    public func receiveFrom(into buffer: UnsafeMutableRawBufferPointer) throws(SystemError) -> (Int, SocketAddress)? {
        var ss = sockaddr_storage()
        var len = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let n = try withUnsafeMutablePointer(to: &ss) { (p) throws(SystemError) -> Int? in
            try p.withMemoryRebound(to: sockaddr.self, capacity: 1) { (sp) throws(SystemError) -> Int? in
                try syscall("recvfrom", blocking: false) {
                    Glibc.recvfrom(fd, buffer.baseAddress, buffer.count, Int32(MSG_DONTWAIT | MSG_TRUNC), sp, &len)
                }
            }
        }
        guard let n else { return nil }
        let addr = withUnsafePointer(to: &ss) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { SocketAddress(raw: $0, length: len) } }
        return (n, addr)
    }
}

/// A set of descriptors to wait on with poll(2).
public struct PollSet {
    public var fds: [pollfd] = []
    public init() {}

    public mutating func removeAll() { fds.removeAll(keepingCapacity: true) }
    public mutating func add(_ fd: Int32, events: Int16) { fds.append(pollfd(fd: fd, events: events, revents: 0)) }

    /// Waits up to `timeoutMs` (-1 forever); returns the number of ready descriptors.
    @discardableResult
    public mutating func wait(timeoutMs: Int32) throws(SystemError) -> Int {
        let n = fds.count
        return Int(try syscallValue("poll") { fds.withUnsafeMutableBufferPointer { Glibc.poll($0.baseAddress, nfds_t(n), timeoutMs) } })
    }
}

/// Wakes a poll loop from another thread: an eventfd (readable while woken). A wake is
/// one write of a counter that takes a spinlock in the kernel, never a sleeping lock (a
/// pipe's write takes the pipe's mutex), so the audio path may wake a loop.
public final class WakeEvent {
    /// Watch it for POLLIN.
    public let fd: Int32

    public init() throws(SystemError) {
        fd = try syscallValue("eventfd") { vcshim_eventfd() }
    }
    deinit { close(fd) }

    public func wake() { var one: UInt64 = 1; _ = Glibc.write(fd, &one, 8) }
    /// Takes the wake-ups away (one read of the counter).
    public func drain() { var count: UInt64 = 0; _ = Glibc.read(fd, &count, 8) }
}
