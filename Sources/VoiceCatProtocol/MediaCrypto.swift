// Sealing and opening media datagrams (PROTOCOL.md §3): ChaCha20-Poly1305-IETF with
// the 20-byte header as AAD and nonce = ssrc (u32 BE) | seq (u64 BE). Used on the
// audio path: nothing here allocates.

public enum MediaOpenError: Error, Equatable, Sendable, CustomStringConvertible {
    case header(FrameHeaderError)
    case noTag(Int)
    case authenticationFailed

    public var description: String {
        switch self {
        case .header(let e): return e.description
        case .noTag(let n): return "media frame of \(n) bytes has no room for the AEAD tag"
        case .authenticationFailed: return "media frame failed authentication"
        }
    }
}

public enum MediaCrypto {
    /// Bytes a sealed datagram adds to its payload: header + tag.
    public static let overhead = FrameHeader.size + AEAD.tagSize

    @inline(__always)
    static func withNonce<R>(ssrc: UInt32, seq: UInt64, _ body: (UnsafeRawPointer) -> R) -> R {
        withUnsafeTemporaryAllocation(byteCount: AEAD.nonceSize, alignment: 8) { n in
            BigEndian.store32(n, 0, ssrc)
            BigEndian.store64(n, 4, seq)
            return body(UnsafeRawPointer(n.baseAddress!))
        }
    }

    /// Writes header + sealed payload into `out` (needs payload.count + `overhead`
    /// bytes) and returns the datagram length.

    public static func seal(header: FrameHeader, payload: UnsafeRawBufferPointer, key: SymmetricKey,
                            into out: UnsafeMutableRawBufferPointer) -> Int {
        precondition(out.count >= payload.count + overhead)
        header.write(to: out)
        let clen = withNonce(ssrc: header.ssrc, seq: header.seq) { nonce in
            AEAD.seal(key: key, nonce: nonce, aad: UnsafeRawBufferPointer(rebasing: out[0..<FrameHeader.size]),
                      message: payload, out: out.baseAddress! + FrameHeader.size)
        }
        return FrameHeader.size + clen
    }

    /// Opens a datagram in place: on success the plaintext payload occupies
    /// `datagram[20 ..< 20 + length]`.

    public static func open(_ datagram: UnsafeMutableRawBufferPointer, key: SymmetricKey) throws(MediaOpenError) -> (header: FrameHeader, length: Int) {
        let header: FrameHeader
        do { header = try FrameHeader.parse(UnsafeRawBufferPointer(datagram)) } catch { throw .header(error) }
        guard datagram.count >= overhead else { throw .noTag(datagram.count) }
        let n = withNonce(ssrc: header.ssrc, seq: header.seq) { nonce in
            AEAD.open(key: key, nonce: nonce, aad: UnsafeRawBufferPointer(rebasing: datagram[0..<FrameHeader.size]),
                      ciphertext: UnsafeRawBufferPointer(rebasing: datagram[FrameHeader.size...]),
                      out: datagram.baseAddress! + FrameHeader.size)
        }
        guard let len = n else { throw .authenticationFailed }
        return (header, len)
    }

    /// Convenience for the control path and tests: a sealed datagram as an array.
    public static func seal(header: FrameHeader, payload: [UInt8], key: SymmetricKey) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: payload.count + overhead)
        let n = payload.withUnsafeBytes { p in out.withUnsafeMutableBytes { o in seal(header: header, payload: p, key: key, into: o) } }
        out.removeLast(out.count - n)
        return out
    }

    /// Convenience: opens a copy of `datagram`; returns the header and payload.
    public static func open(_ datagram: [UInt8], key: SymmetricKey) throws(MediaOpenError) -> (header: FrameHeader, payload: [UInt8]) {
        var copy = datagram
        let r: Result<(FrameHeader, Int), MediaOpenError> = copy.withUnsafeMutableBytes { d in
            do throws(MediaOpenError) { return .success(try open(d, key: key)) } catch { return .failure(error) }
        }
        let (h, n) = try r.get()
        return (h, Array(copy[FrameHeader.size..<(FrameHeader.size + n)]))
    }
}
