// Big-endian byte helpers for the fixed binary layouts (frame header, handshake).

/// Appends big-endian integers to a growable byte array. Used on the control path only.
@usableFromInline
struct ByteWriter {
    @usableFromInline var bytes: [UInt8]

    @inlinable init(capacity: Int = 64) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    @inlinable mutating func u8(_ v: UInt8) { bytes.append(v) }
    @inlinable mutating func u16(_ v: UInt16) {
        bytes.append(UInt8(v >> 8)); bytes.append(UInt8(truncatingIfNeeded: v))
    }
    @inlinable mutating func u32(_ v: UInt32) {
        for shift in stride(from: 24, through: 0, by: -8) { bytes.append(UInt8(truncatingIfNeeded: v >> UInt32(shift))) }
    }
    @inlinable mutating func u64(_ v: UInt64) {
        for shift in stride(from: 56, through: 0, by: -8) { bytes.append(UInt8(truncatingIfNeeded: v >> UInt64(shift))) }
    }
    @inlinable mutating func append<C: Collection>(_ c: C) where C.Element == UInt8 { bytes.append(contentsOf: c) }
}

/// Raw big-endian loads and stores on unsafe buffers (no bounds checks beyond the
/// caller's; every caller checks the length first).
@usableFromInline
enum BigEndian {
    @inlinable static func load16(_ p: UnsafeRawBufferPointer, _ o: Int) -> UInt16 {
        UInt16(p[o]) << 8 | UInt16(p[o + 1])
    }
    @inlinable static func load32(_ p: UnsafeRawBufferPointer, _ o: Int) -> UInt32 {
        UInt32(p[o]) << 24 | UInt32(p[o + 1]) << 16 | UInt32(p[o + 2]) << 8 | UInt32(p[o + 3])
    }
    @inlinable static func load64(_ p: UnsafeRawBufferPointer, _ o: Int) -> UInt64 {
        UInt64(load32(p, o)) << 32 | UInt64(load32(p, o + 4))
    }
    @inlinable static func store16(_ p: UnsafeMutableRawBufferPointer, _ o: Int, _ v: UInt16) {
        p[o] = UInt8(v >> 8); p[o + 1] = UInt8(truncatingIfNeeded: v)
    }
    @inlinable static func store32(_ p: UnsafeMutableRawBufferPointer, _ o: Int, _ v: UInt32) {
        p[o] = UInt8(truncatingIfNeeded: v >> 24); p[o + 1] = UInt8(truncatingIfNeeded: v >> 16)
        p[o + 2] = UInt8(truncatingIfNeeded: v >> 8); p[o + 3] = UInt8(truncatingIfNeeded: v)
    }
    @inlinable static func store64(_ p: UnsafeMutableRawBufferPointer, _ o: Int, _ v: UInt64) {
        store32(p, o, UInt32(truncatingIfNeeded: v >> 32)); store32(p, o + 4, UInt32(truncatingIfNeeded: v))
    }
}

/// Lowercase hex of bytes (fingerprints, logs).
public func hexString<C: Collection>(_ bytes: C) -> String where C.Element == UInt8 {
    let digits: [UInt8] = Array("0123456789abcdef".utf8)
    var out = [UInt8]()
    out.reserveCapacity(bytes.count * 2)
    for b in bytes { out.append(digits[Int(b >> 4)]); out.append(digits[Int(b & 0x0f)]) }
    return String(decoding: out, as: UTF8.self)
}

/// Parses lowercase or uppercase hex; nil on odd length or a non-hex character.
public func bytesFromHex(_ s: String) -> [UInt8]? {
    let u = Array(s.utf8)
    guard u.count % 2 == 0 else { return nil }
    func nib(_ c: UInt8) -> UInt8? {
        switch c {
        case 48...57: return c - 48
        case 97...102: return c - 87
        case 65...70: return c - 55
        default: return nil
        }
    }
    var out = [UInt8]()
    out.reserveCapacity(u.count / 2)
    var i = 0
    while i < u.count {
        guard let h = nib(u[i]), let l = nib(u[i + 1]) else { return nil }
        out.append(h << 4 | l)
        i += 2
    }
    return out
}
