// The 20-byte v2 media frame header (PROTOCOL.md §3, seed §2). Big-endian:
//   0 type u8 · 1 flags u8 · 2 codec u16 · 4 ssrc u32 · 8 seq u64 · 16 timestamp u32 · 20 payload

/// Kind of a media datagram.
public enum MediaType: UInt8, Sendable {
    case voice = 1
    case keepalive = 2
    case udpBinding = 3
}

/// Header flag bits.
public struct FrameFlags: OptionSet, Sendable, Hashable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    /// First frame of a talkspurt (after a gap in transmission).
    public static let marker = FrameFlags(rawValue: 1 << 0)
    /// The Opus packet carries in-band FEC for the previous frame.
    public static let fec = FrameFlags(rawValue: 1 << 1)
    /// DTX / comfort-noise frame.
    public static let dtx = FrameFlags(rawValue: 1 << 2)
    /// Last frame before the stream stops or the input gate closes.
    public static let lastFrame = FrameFlags(rawValue: 1 << 3)
}

/// Why a header could not be parsed.
public enum FrameHeaderError: Error, Equatable, Sendable, CustomStringConvertible {
    /// Fewer than 20 bytes.
    case tooShort(Int)
    /// A type byte that is not VOICE, KEEPALIVE or UDP_BINDING.
    case unknownType(UInt8)

    public var description: String {
        switch self {
        case .tooShort(let n): return "media frame too short: \(n) bytes, the v2 header needs \(FrameHeader.size)"
        case .unknownType(let t): return "unknown media frame type \(t)"
        }
    }
}

/// Codec ids carried in the header.
public enum CodecID {
    public static let opus: UInt16 = 0
}

/// A parsed v2 media header. A value type; encoding and parsing never allocate.
public struct FrameHeader: Equatable, Sendable {
    public static let size = 20

    public var type: MediaType
    public var flags: FrameFlags
    public var codec: UInt16
    public var ssrc: UInt32
    public var seq: UInt64
    public var timestamp: UInt32

    public init(type: MediaType, flags: FrameFlags = [], codec: UInt16 = CodecID.opus,
                ssrc: UInt32, seq: UInt64, timestamp: UInt32) {
        self.type = type
        self.flags = flags
        self.codec = codec
        self.ssrc = ssrc
        self.seq = seq
        self.timestamp = timestamp
    }

    /// Parses the first 20 bytes of `bytes`.
    @inlinable
    public static func parse(_ bytes: UnsafeRawBufferPointer) throws(FrameHeaderError) -> FrameHeader {
        guard bytes.count >= size else { throw .tooShort(bytes.count) }
        guard let t = MediaType(rawValue: bytes[0]) else { throw .unknownType(bytes[0]) }
        return FrameHeader(type: t, flags: FrameFlags(rawValue: bytes[1]),
                           codec: BigEndian.load16(bytes, 2),
                           ssrc: BigEndian.load32(bytes, 4),
                           seq: BigEndian.load64(bytes, 8),
                           timestamp: BigEndian.load32(bytes, 16))
    }

    /// Parses a header at the start of a byte array.
    public static func parse(_ bytes: [UInt8]) throws(FrameHeaderError) -> FrameHeader {
        let r: Result<FrameHeader, FrameHeaderError> = bytes.withUnsafeBytes { p in
            do throws(FrameHeaderError) { return .success(try parse(p)) } catch { return .failure(error) }
        }
        return try r.get()
    }

    /// Writes the 20 bytes into the start of `out` (which must hold at least 20 bytes).
    @inlinable
    public func write(to out: UnsafeMutableRawBufferPointer) {
        precondition(out.count >= FrameHeader.size)
        out[0] = type.rawValue
        out[1] = flags.rawValue
        BigEndian.store16(out, 2, codec)
        BigEndian.store32(out, 4, ssrc)
        BigEndian.store64(out, 8, seq)
        BigEndian.store32(out, 16, timestamp)
    }

    /// The 20 header bytes as an array (control path and tests).
    public var bytes: [UInt8] {
        var a = [UInt8](repeating: 0, count: FrameHeader.size)
        a.withUnsafeMutableBytes { write(to: $0) }
        return a
    }
}
