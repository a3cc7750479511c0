// Encrypted control frames (PROTOCOL.md §2):
//   u32 length (big-endian, of what follows) | ChaCha20-Poly1305-IETF ciphertext+tag
//   nonce = 4 zero bytes | u64 frame counter (big-endian, per direction, from 0)
//   AAD = the 4 length bytes

public enum ControlFrameError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The declared length exceeds `ControlFraming.maxFrameLength`.
    case tooLong(Int)
    /// Shorter than the AEAD tag.
    case tooShort(Int)
    /// Wrong key, tampering, or a frame out of order.
    case authenticationFailed

    public var description: String {
        switch self {
        case .tooLong(let n): return "control frame of \(n) bytes exceeds the \(ControlFraming.maxFrameLength)-byte limit"
        case .tooShort(let n): return "control frame of \(n) bytes is shorter than its tag"
        case .authenticationFailed: return "control frame failed authentication (wrong key, tampered or out of order)"
        }
    }
}

public enum ControlFraming {
    /// Largest accepted value of the length field (ciphertext + tag): 64 KiB.
    public static let maxFrameLength = 64 * 1024
    /// Largest plaintext that fits in one frame.
    public static let maxPlaintext = maxFrameLength - AEAD.tagSize
    /// Bytes a frame adds to its plaintext: the length prefix and the tag.
    public static let overhead = 4 + AEAD.tagSize

    /// True when a plaintext of `count` bytes fits in one frame.
    @inline(__always)
    public static func fits(_ count: Int) -> Bool { count <= maxPlaintext }

    @inline(__always)
    static func withNonce<R>(_ counter: UInt64, _ body: (UnsafeRawPointer) -> R) -> R {
        withUnsafeTemporaryAllocation(byteCount: AEAD.nonceSize, alignment: 8) { n in
            n.initializeMemory(as: UInt8.self, repeating: 0)
            BigEndian.store64(n, 4, counter)
            return body(UnsafeRawPointer(n.baseAddress!))
        }
    }
}

/// Seals outgoing control frames with a per-direction counter.
public struct ControlSealer {
    let key: SymmetricKey
    public private(set) var counter: UInt64 = 0

    public init(key: SymmetricKey) { self.key = key }

    /// The complete frame (length prefix included) carrying `plaintext`.
    /// A plaintext over `ControlFraming.maxPlaintext` is a programming error: check with
    /// `ControlFraming.fits` (or split the message) first.
    public mutating func seal(_ plaintext: [UInt8]) -> [UInt8] {
        let size = plaintext.count + ControlFraming.overhead
        return [UInt8](unsafeUninitializedCapacity: size) { buf, n in
            n = plaintext.withUnsafeBytes { seal($0, into: UnsafeMutableRawBufferPointer(buf)) }
        }
    }

    /// Seals `plaintext` as one frame into the start of `out`, which needs
    /// `plaintext.count + ControlFraming.overhead` bytes; returns the frame's length.
    /// Same limit as `seal(_:)`.
    public mutating func seal(_ plaintext: UnsafeRawBufferPointer, into out: UnsafeMutableRawBufferPointer) -> Int {
        precondition(ControlFraming.fits(plaintext.count), "control message too large")
        let clen = plaintext.count + AEAD.tagSize
        precondition(out.count >= 4 + clen, "control frame buffer too small")
        let c = counter
        BigEndian.store32(out, 0, UInt32(clen))
        ControlFraming.withNonce(c) { nonce in
            _ = AEAD.seal(key: key, nonce: nonce, aad: UnsafeRawBufferPointer(rebasing: out[0..<4]),
                          message: plaintext, out: out.baseAddress! + 4)
        }
        counter &+= 1
        return 4 + clen
    }
}

/// Reassembles and opens incoming control frames from a byte stream.
public struct ControlOpener {
    let key: SymmetricKey
    public private(set) var counter: UInt64 = 0
    var buffer: [UInt8] = []
    var start = 0

    public init(key: SymmetricKey) { self.key = key }

    /// Adds bytes read from the connection.
    public mutating func append<C: Collection>(_ bytes: C) where C.Element == UInt8 {
        if start > 0 && start == buffer.count { buffer.removeAll(keepingCapacity: true); start = 0 }
        buffer.append(contentsOf: bytes)
    }

    /// True while part of a frame is buffered (used to time out stalled peers).
    public var hasPartialFrame: Bool { buffer.count > start }

    /// The next complete frame's plaintext, nil when more bytes are needed.
    /// Any error is fatal for the connection.
    public mutating func next() throws(ControlFrameError) -> [UInt8]? {
        var plain: [UInt8] = []
        return try next(into: &plain) ? plain : nil
    }

    /// The next complete frame's plaintext into `plain` (replaced; its capacity
    /// reused, so a steady stream of small frames allocates nothing); false when
    /// more bytes are needed. Any error is fatal for the connection.
    public mutating func next(into plain: inout [UInt8]) throws(ControlFrameError) -> Bool {
        let avail = buffer.count - start
        guard avail >= 4 else { return false }
        let len = Int(buffer.withUnsafeBytes { BigEndian.load32($0, start) })
        guard len <= ControlFraming.maxFrameLength else { throw .tooLong(len) }
        guard len >= AEAD.tagSize else { throw .tooShort(len) }
        guard avail >= 4 + len else { return false }
        plain.removeAll(keepingCapacity: true)
        plain.append(contentsOf: repeatElement(0, count: len - AEAD.tagSize))
        let c = counter
        let s = start
        let ok: Int? = buffer.withUnsafeBytes { b in
            plain.withUnsafeMutableBytes { p in
                ControlFraming.withNonce(c) { nonce in
                    AEAD.open(key: key, nonce: nonce, aad: UnsafeRawBufferPointer(rebasing: b[s..<(s + 4)]),
                              ciphertext: UnsafeRawBufferPointer(rebasing: b[(s + 4)..<(s + 4 + len)]),
                              out: p.baseAddress ?? UnsafeMutableRawPointer(bitPattern: 1)!)
                }
            }
        }
        guard ok != nil else { throw .authenticationFailed }
        start += 4 + len
        if start > 65536 { buffer.removeFirst(start); start = 0 }
        counter &+= 1
        return true
    }
}
