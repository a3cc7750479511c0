// The encrypted TCP control channel of one session: handshake, sealed frames in
// both directions. Writes are serialized by a lock (any thread may send); reads
// happen on the connecting thread during connect, then on the network thread.
// Every wait of the connect phase can be cut short by the session's Canceller.
import Glibc
import VoiceCatProtocol
import VoiceCatSystem

/// Where the network thread's control handling sends its answers (the session's
/// control connection; the fuzz harness gives one that keeps nothing).
protocol ControlSender: AnyObject {
    var keys: SessionKeys { get }
    func send(_ m: ControlMessage) throws
}

/// An authenticated control frame whose message did not decode: refused by name,
/// the session goes on (the framing is intact).
struct UndecodableMessage: Error, CustomStringConvertible {
    let type: MessageType
    let detail: String
    var description: String { "refused a \(type) message from the server: it does not decode (\(detail))" }
}

final class ControlConnection: ControlSender {
    let socket: Socket
    let keys: SessionKeys
    let fingerprint: String
    private var sealer: ControlSealer
    private var opener: ControlOpener
    private let sendLock = Lock()
    private var readBuffer = [UInt8](repeating: 0, count: 65536)

    private let cancel: Canceller

    /// Connects and runs the handshake. On a fingerprint mismatch `seenFingerprint`
    /// receives the server's fingerprint before the error is thrown.
    /// `pinnedWhat` names where `pinned` came from, for the error when it does not match.
    init(address: SocketAddress, pinned: String?, pinnedWhat: String = "the pinned", deadlineMs: UInt64, cancel: Canceller,
         seenFingerprint: inout String?) throws {
        self.cancel = cancel
        do {
            socket = try Socket.connectTCP(address, deadlineMs: deadlineMs, cancel: cancel)
        } catch let e as SystemError where e.errno == ETIMEDOUT {
            throw ClientError.timeout("connecting to \(address) timed out")
        } catch is CancelledError {
            throw ClientError.state("the connect was cancelled (the client is being destroyed or disconnected)")
        } catch {
            throw ClientError.network("cannot connect to \(address): \(error)")
        }
        let hs = ClientHandshake()
        try ControlConnection.writeAll(socket, hs.helloBytes, deadlineMs: deadlineMs, cancel: cancel)
        var reply = try ControlConnection.readExactly(socket, Handshake.serverHelloPrefixSize, deadlineMs: deadlineMs, cancel: cancel)
        let body: Int
        do { body = try Handshake.serverHelloBodySize(prefix: reply) } catch .versionMismatch(let v) {
            throw ClientError.version("the server speaks protocol v\(v); this library speaks v\(ProtocolVersion.current)")
        } catch .versionRefused(let v) {
            throw ClientError.version(v == ProtocolVersion.current
                ? "the server refused this library's protocol v\(v) though it names the same version"
                : "the server speaks protocol v\(v) and refused this library's v\(ProtocolVersion.current)")
        } catch {
            throw ClientError.protocolError("bad ServerHello: \(error)")
        }
        reply += try ControlConnection.readExactly(socket, body, deadlineMs: deadlineMs, cancel: cancel)
        do {
            (keys, fingerprint) = try hs.finish(serverHello: reply, pinnedFingerprint: pinned)
        } catch HandshakeError.fingerprintMismatch(let expected, let actual) {
            seenFingerprint = actual
            throw ClientError.auth("server fingerprint \(actual) does not match \(pinnedWhat) \(expected)")
        } catch {
            throw ClientError.protocolError("handshake failed: \(error)")
        }
        seenFingerprint = fingerprint
        sealer = ControlSealer(key: keys.control.send)
        opener = ControlOpener(key: keys.control.receive)
    }

    /// Waits for `events` on `s`, false at the deadline; a cancel is a state error.
    static func wait(_ s: Socket, _ events: Int16, deadlineMs: UInt64, cancel: Canceller?) throws -> Bool {
        guard let cancel else {
            let left = Int(Int64(deadlineMs) - Int64(MonotonicClock.milliseconds()))
            return left > 0 && (try? s.waitFor(events: events, timeoutMs: left)) == true
        }
        do { return try cancel.wait(fd: s.fd, events: events, deadlineMs: deadlineMs) } catch is CancelledError {
            throw ClientError.state("cancelled: the client is being destroyed or disconnected")
        } catch {
            throw ClientError.network("\(error)")
        }
    }

    static func writeAll(_ s: Socket, _ bytes: [UInt8], deadlineMs: UInt64, cancel: Canceller?) throws {
        try bytes.withUnsafeBytes { try writeAll(s, $0, deadlineMs: deadlineMs, cancel: cancel) }
    }

    static func writeAll(_ s: Socket, _ bytes: UnsafeRawBufferPointer, deadlineMs: UInt64, cancel: Canceller?) throws {
        var off = 0
        while off < bytes.count {
            let r: Int?
            do { r = try s.write(UnsafeRawBufferPointer(rebasing: bytes[off...])) } catch {
                throw ClientError.network("control connection write failed: \(error)")
            }
            if let n = r { off += n; continue }
            guard try wait(s, Int16(POLLOUT), deadlineMs: deadlineMs, cancel: cancel) else {
                throw ClientError.timeout("control connection write timed out")
            }
        }
    }

    static func readExactly(_ s: Socket, _ count: Int, deadlineMs: UInt64, cancel: Canceller) throws -> [UInt8] {
        var out = [UInt8]()
        var buf = [UInt8](repeating: 0, count: count)
        while out.count < count {
            guard try wait(s, Int16(POLLIN), deadlineMs: deadlineMs, cancel: cancel) else {
                throw ClientError.timeout("the server did not answer the handshake in time")
            }
            let want = count - out.count
            let r: Int?
            do { r = try buf.withUnsafeMutableBytes { try s.read(into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<want])) } } catch {
                throw ClientError.network("control connection read failed: \(error)")
            }
            guard let n = r else { continue }
            if n == 0 { throw ClientError.network("the server closed the connection during the handshake") }
            out += buf[0..<n]
        }
        return out
    }

    /// Why the connection cannot be written to any more (nil while it can): a frame
    /// was not taken in full. Its nonce is spent and the server would take the next
    /// frame for a forged one, so the connection is ended (shutdownBothWays: the network
    /// thread reads its end and reports this) and every later send fails at once.
    var brokenReason: String? { brokenLock.withLock { broken } }
    private var broken: String?
    private let brokenLock = Lock()

    /// Seals and sends one message (any thread). Waits at most 2 s for socket space;
    /// then, or on a write error, the connection is broken (brokenReason).
    /// The plaintext and the frame are built in buffers kept for the connection, so
    /// the steady control traffic (pings) allocates nothing.
    func send(_ m: ControlMessage) throws {
        try sendLock.withLock {
            if let why = brokenReason { throw ClientError.network("the control connection is lost: \(why)") }
            // Closed under this lock (close(): vc_disconnect, the session's end): said as
            // such, not as the write's EBADF (helper-95, a join racing a disconnect).
            guard socket.fd >= 0 else { throw ClientError.network("the connection ended before the request was sent (it was closed)") }
            m.encode(into: &plainOut)
            let need = plainOut.count + ControlFraming.overhead
            if frameOut.count < need { frameOut = [UInt8](repeating: 0, count: need) }
            let n = plainOut.withUnsafeBytes { p in frameOut.withUnsafeMutableBytes { sealer.seal(p, into: $0) } }
            do {
                try frameOut.withUnsafeBytes { f in
                    try ControlConnection.writeAll(socket, UnsafeRawBufferPointer(rebasing: f[0..<n]),
                                                   deadlineMs: MonotonicClock.milliseconds() + 2000, cancel: cancel)
                }
            } catch let e as ClientError {
                if case .state = e { throw e }   // a cancel: the client is going anyway
                var why = e.description
                if case .timeout = e { why = "the server took no control message for 2 s (it stopped reading, or the path is stuck)" }
                brokenLock.withLock { broken = why }
                socket.shutdownBothWays()
                throw ClientError.network("the control connection is lost: \(why)")
            }
        }
    }
    // Sized for the steady control traffic (pings, loss reports of up to a few hundred
    // streams) so it does not grow them; a larger message grows them once.
    private static let steadyBytes = 4096
    private var plainOut: [UInt8] = { var a = [UInt8](); a.reserveCapacity(ControlConnection.steadyBytes); return a }()
    private var frameOut = [UInt8](repeating: 0, count: ControlConnection.steadyBytes + ControlFraming.overhead)
    private var plainIn: [UInt8] = []

    /// Next message, blocking until the deadline (connect phase only). Past the deadline
    /// it times out even while messages keep coming: a server sending endless list
    /// parts held a connect with a 2 s limit for as long as it kept sending.
    func receive(deadlineMs: UInt64) throws -> ControlMessage {
        while true {
            guard MonotonicClock.milliseconds() < deadlineMs else { throw ClientError.timeout("the server did not answer in time") }
            if let m = try nextBuffered() { return m }
            guard try ControlConnection.wait(socket, Int16(POLLIN), deadlineMs: deadlineMs, cancel: cancel) else {
                throw ClientError.timeout("the server did not answer in time")
            }
            if try !readAvailable() {
                // The server may have said why before closing.
                if let m = try nextBuffered() { return m }
                throw ClientError.network("the server closed the control connection")
            }
        }
    }

    /// `receive`, with an undecodable message a protocol error (connect phase).
    func receiveDecoded(deadlineMs: UInt64) throws -> ControlMessage {
        do { return try receive(deadlineMs: deadlineMs) } catch let u as UndecodableMessage {
            throw ClientError.protocolError(u.description)
        }
    }

    /// Reads what the socket has (non-blocking). False at EOF.
    func readAvailable() throws -> Bool {
        while true {
            let r: Int?
            do { r = try readBuffer.withUnsafeMutableBytes { try socket.read(into: $0) } } catch {
                throw ClientError.network("control connection read failed: \(error)")
            }
            guard let n = r else { return true }
            if n == 0 { return false }
            opener.append(readBuffer[0..<n])
        }
    }

    /// The next complete message already read, if any. Throws UndecodableMessage for
    /// an authenticated frame whose body does not decode (the next call goes on).
    func nextBuffered() throws -> ControlMessage? {
        let got: Bool
        do { got = try opener.next(into: &plainIn) } catch { throw ClientError.protocolError("control frame rejected: \(error)") }
        guard got else { return nil }
        do { return try ControlMessage.decode(plainIn) } catch ControlDecodeError.unknownType {
            return nil  // a newer server's message: ignore it
        } catch ControlDecodeError.body(let t, let e) {
            throw UndecodableMessage(type: t, detail: "\(e)")
        } catch {
            throw ClientError.protocolError("bad control message from the server: \(error)")
        }
    }

    /// Closes the socket once no send is writing to it: a sender on another thread
    /// (a request during teardown) must not write to a descriptor closed under it,
    /// which the process may already have reused. A send waits at most 2 s.
    func close() { sendLock.withLock { socket.close() } }
}
