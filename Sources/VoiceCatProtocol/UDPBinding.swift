// UDP_BINDING: tying a session's media to the UDP address it sends from, with a
// return-routability cookie (docs/protocol.md §3). Pure: the caller sends, receives and
// decides when to retry.
//
// Plaintext of every UDP_BINDING datagram (sealed with the epoch's `bind` key,
// nonce = binding_id | seq):
//   0 u64 session_id · 8 u32 epoch · 12 u8 kind · 13 cookie[16]                29 bytes
//   kind 0 REQUEST    client → server: cookie all zero, or the last one the server sent
//        1 CHALLENGE  server → client: the cookie for the address the request came from
//        2 BOUND      server → client: that address is now the session's media address
//
// A server binds (or moves) a session's address only when the REQUEST carries a valid
// cookie for that address: the cookie travels sealed to the address, so only a client
// that receives datagrams there can echo it. A CHALLENGE is no larger than the REQUEST
// that caused it.

/// An opaque 16-byte value the server derives from the session, epoch and address.
public struct BindingCookie: Equatable, Hashable, Sendable {
    public var high: UInt64
    public var low: UInt64
    public init(high: UInt64, low: UInt64) { self.high = high; self.low = low }
    /// No cookie yet (a first REQUEST).
    public static let none = BindingCookie(high: 0, low: 0)

    /// The first 16 bytes of `bytes` (which must hold at least 16).
    public init(bytes: [UInt8]) {
        precondition(bytes.count >= 16)
        var h: UInt64 = 0, l: UInt64 = 0
        for i in 0..<8 { h = h << 8 | UInt64(bytes[i]); l = l << 8 | UInt64(bytes[8 + i]) }
        self.init(high: h, low: l)
    }
}

public enum UDPBindingError: Error, Equatable, Sendable, CustomStringConvertible {
    case wrongSize(Int)
    case unknownKind(UInt8)

    public var description: String {
        switch self {
        case .wrongSize(let n): return "UDP_BINDING payload of \(n) bytes (expected \(UDPBindingPayload.size))"
        case .unknownKind(let k): return "UDP_BINDING payload of unknown kind \(k)"
        }
    }
}

/// The plaintext of a UDP_BINDING datagram.
public struct UDPBindingPayload: Equatable, Sendable {
    public enum Kind: UInt8, Sendable {
        case request = 0
        case challenge = 1
        case bound = 2
    }

    public static let size = 29

    public var sessionID: UInt64
    public var epoch: UInt32
    public var kind: Kind
    public var cookie: BindingCookie

    public init(sessionID: UInt64, epoch: UInt32, kind: Kind, cookie: BindingCookie = .none) {
        self.sessionID = sessionID; self.epoch = epoch; self.kind = kind; self.cookie = cookie
    }

    /// Writes the 29 bytes into the start of `out`.
    public func write(to out: UnsafeMutableRawBufferPointer) {
        precondition(out.count >= UDPBindingPayload.size)
        BigEndian.store64(out, 0, sessionID)
        BigEndian.store32(out, 8, epoch)
        out[12] = kind.rawValue
        BigEndian.store64(out, 13, cookie.high)
        BigEndian.store64(out, 21, cookie.low)
    }

    public var bytes: [UInt8] {
        var a = [UInt8](repeating: 0, count: UDPBindingPayload.size)
        a.withUnsafeMutableBytes { write(to: $0) }
        return a
    }

    public static func parse(_ p: UnsafeRawBufferPointer) throws(UDPBindingError) -> UDPBindingPayload {
        guard p.count == size else { throw .wrongSize(p.count) }
        guard let kind = Kind(rawValue: p[12]) else { throw .unknownKind(p[12]) }
        return UDPBindingPayload(sessionID: BigEndian.load64(p, 0), epoch: BigEndian.load32(p, 8), kind: kind,
                                 cookie: BindingCookie(high: BigEndian.load64(p, 13), low: BigEndian.load64(p, 21)))
    }

    /// A sealed UDP_BINDING datagram carrying this payload.
    public func sealed(bindingID: UInt32, seq: UInt64, key: SymmetricKey) -> [UInt8] {
        MediaCrypto.seal(header: FrameHeader(type: .udpBinding, ssrc: bindingID, seq: seq, timestamp: 0), payload: bytes, key: key)
    }

    /// Seals this payload as a UDP_BINDING datagram into `out`; returns its length.
    public func seal(bindingID: UInt32, seq: UInt64, key: SymmetricKey, into out: UnsafeMutableRawBufferPointer) -> Int {
        withUnsafeTemporaryAllocation(byteCount: UDPBindingPayload.size, alignment: 8) { p in
            write(to: p)
            return MediaCrypto.seal(header: FrameHeader(type: .udpBinding, ssrc: bindingID, seq: seq, timestamp: 0),
                                    payload: UnsafeRawBufferPointer(p), key: key, into: out)
        }
    }
}

/// The client side of a binding (at connect, and again after each Rebind): builds the
/// REQUESTs and reads the server's answers.
///
///     var b = UDPBinder(...)
///     send(b.nextRequest())                 // and again every 250 ms until bound
///     on a UDP_BINDING datagram d:
///         switch b.handle(d) { case .challenged: send(b.nextRequest())   // at once
///                              case .bound: done
///                              case .ignored: keep waiting }
public struct UDPBinder: Sendable {
    public let sessionID: UInt64
    public let bindingID: UInt32
    public let epoch: UInt32
    let keys: DirectionalKeys
    /// seq of the next REQUEST.
    public private(set) var seq: UInt64 = 0
    /// The cookie the next REQUEST carries.
    public private(set) var cookie = BindingCookie.none
    public private(set) var isBound = false
    /// seq of the last answer accepted (answers must move forward: a replayed old one is ignored).
    private var lastAnswerSeq: UInt64? = nil

    public enum Answer: Equatable, Sendable {
        /// The server wants the request repeated with its cookie: send `nextRequest()` now.
        case challenged
        /// The address is bound.
        case bound
        /// Not an answer to this binding (wrong key or epoch, replayed, malformed).
        case ignored
    }

    /// `keys`: the `bind` keys of `epoch` (`SessionKeys.bind(epoch:)`).
    public init(sessionID: UInt64, bindingID: UInt32, epoch: UInt32, keys: DirectionalKeys) {
        self.sessionID = sessionID; self.bindingID = bindingID; self.epoch = epoch; self.keys = keys
    }

    /// The next REQUEST datagram (each call uses a fresh seq).
    public mutating func nextRequest() -> [UInt8] {
        let d = UDPBindingPayload(sessionID: sessionID, epoch: epoch, kind: .request, cookie: cookie)
            .sealed(bindingID: bindingID, seq: seq, key: keys.send)
        seq += 1
        return d
    }

    /// Reads a datagram that arrived on the media socket (opened in place).
    public mutating func handle(_ datagram: UnsafeMutableRawBufferPointer) -> Answer {
        guard let (h, n) = try? MediaCrypto.open(datagram, key: keys.receive), h.type == .udpBinding, h.ssrc == bindingID,
              let p = try? UDPBindingPayload.parse(UnsafeRawBufferPointer(rebasing: datagram[FrameHeader.size..<(FrameHeader.size + n)])),
              p.sessionID == sessionID, p.epoch == epoch else { return .ignored }
        if let last = lastAnswerSeq, h.seq <= last { return .ignored }
        switch p.kind {
        case .request:
            return .ignored
        case .challenge:
            lastAnswerSeq = h.seq
            cookie = p.cookie
            return .challenged
        case .bound:
            lastAnswerSeq = h.seq
            isBound = true
            return .bound
        }
    }

    /// Reads a datagram given as bytes.
    public mutating func handle(_ datagram: [UInt8]) -> Answer {
        var copy = datagram
        return copy.withUnsafeMutableBytes { handle($0) }
    }
}
