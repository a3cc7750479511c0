// A small proto3 wire-format codec (PROTOCOL.md §2): varint, length-delimited,
// fixed32 and fixed64. Enough for VoiceCat's control messages; unknown fields are
// skipped on read. Zigzag and groups are not needed and are rejected.

/// Why a protobuf body could not be decoded.
public enum ProtobufError: Error, Equatable, Sendable, CustomStringConvertible {
    case truncated
    case varintTooLong
    case unsupportedWireType(Int)
    case invalidFieldNumber
    case wrongWireType(field: Int, got: Int)
    case invalidUTF8(field: Int)
    case valueOutOfRange(field: Int)
    case nestingTooDeep

    public var description: String {
        switch self {
        case .truncated: return "protobuf body truncated"
        case .varintTooLong: return "protobuf varint longer than 10 bytes"
        case .unsupportedWireType(let t): return "protobuf wire type \(t) is not supported"
        case .invalidFieldNumber: return "protobuf field number 0"
        case .wrongWireType(let f, let t): return "protobuf field \(f) has unexpected wire type \(t)"
        case .invalidUTF8(let f): return "protobuf field \(f) is not valid UTF-8"
        case .valueOutOfRange(let f): return "protobuf field \(f) value out of range"
        case .nestingTooDeep: return "protobuf messages nested too deeply"
        }
    }
}

public enum WireType: Int, Sendable {
    case varint = 0
    case fixed64 = 1
    case lengthDelimited = 2
    case fixed32 = 5
}

/// Serializes fields in the order written. Default values (0, false, "") are omitted
/// as proto3 does.
public struct ProtoWriter {
    public private(set) var bytes: [UInt8] = []

    public init() {}

    /// Writes into `storage` (emptied, its capacity kept): a caller that hands the
    /// same array back and forth encodes without allocating once it is large enough.
    public init(reusing storage: [UInt8]) {
        bytes = storage
        bytes.removeAll(keepingCapacity: true)
    }

    mutating func key(_ field: Int, _ wt: WireType) { rawVarint(UInt64(field) << 3 | UInt64(wt.rawValue)) }

    mutating func rawVarint(_ v: UInt64) {
        var v = v
        while v >= 0x80 { bytes.append(UInt8(truncatingIfNeeded: v) | 0x80); v >>= 7 }
        bytes.append(UInt8(v))
    }

    public mutating func uint(_ field: Int, _ v: UInt64) {
        guard v != 0 else { return }
        key(field, .varint); rawVarint(v)
    }
    public mutating func uint(_ field: Int, _ v: UInt32) { uint(field, UInt64(v)) }
    public mutating func bool(_ field: Int, _ v: Bool) { uint(field, v ? UInt64(1) : 0) }
    public mutating func fixed64(_ field: Int, _ v: UInt64) {
        guard v != 0 else { return }
        key(field, .fixed64)
        for i in 0..<8 { bytes.append(UInt8(truncatingIfNeeded: v >> UInt64(8 * i))) }
    }
    public mutating func fixed32(_ field: Int, _ v: UInt32) {
        guard v != 0 else { return }
        key(field, .fixed32)
        for i in 0..<4 { bytes.append(UInt8(truncatingIfNeeded: v >> UInt32(8 * i))) }
    }
    public mutating func bytesField(_ field: Int, _ v: [UInt8]) {
        guard !v.isEmpty else { return }
        key(field, .lengthDelimited); rawVarint(UInt64(v.count)); bytes.append(contentsOf: v)
    }
    public mutating func string(_ field: Int, _ v: String) { bytesField(field, Array(v.utf8)) }
    /// A nested message; always written (even when empty) so presence is kept.
    public mutating func message(_ field: Int, _ body: [UInt8]) {
        key(field, .lengthDelimited); rawVarint(UInt64(body.count)); bytes.append(contentsOf: body)
    }
    /// Bytes outside the protobuf encoding (a control message's type prefix).
    mutating func raw(_ b: UInt8) { bytes.append(b) }
    /// A nested message field, encoded in place (no buffer of its own): one length
    /// byte is reserved, and the body is moved up in the rare case its length needs more.
    public mutating func message<M: ProtoMessage>(_ field: Int, _ m: M) {
        key(field, .lengthDelimited)
        let lengthAt = bytes.count
        raw(0)
        m.encode(into: &self)
        let length = bytes.count - lengthAt - 1
        var width = 1
        while length >> (7 * width) != 0 { width += 1 }
        if width > 1 { bytes.insert(contentsOf: repeatElement(0, count: width - 1), at: lengthAt + 1) }
        var v = length
        for i in 0..<width {
            bytes[lengthAt + i] = UInt8(truncatingIfNeeded: v & 0x7F) | (i < width - 1 ? 0x80 : 0)
            v >>= 7
        }
    }
}

/// One decoded field.
public struct ProtoField {
    public let number: Int
    public let wireType: WireType
    /// varint, fixed32 or fixed64 value.
    public let scalar: UInt64
    /// Range of a length-delimited payload within the reader's bytes.
    public let range: Range<Int>
}

/// Iterates the fields of one message body.
public struct ProtoReader {
    let bytes: [UInt8]
    var pos: Int
    let end: Int

    public init(_ bytes: [UInt8]) { self.init(bytes, 0..<bytes.count) }
    public init(_ bytes: [UInt8], _ range: Range<Int>) {
        self.bytes = bytes
        self.pos = range.lowerBound
        self.end = range.upperBound
    }

    mutating func varint() throws(ProtobufError) -> UInt64 {
        var result: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            guard pos < end else { throw .truncated }
            let b = bytes[pos]; pos += 1
            if shift == 63 && b > 1 { throw .varintTooLong }
            result |= UInt64(b & 0x7f) << shift
            if b & 0x80 == 0 { return result }
            shift += 7
            if shift > 63 { throw .varintTooLong }
        }
    }

    /// The next field, or nil at the end of the body.
    public mutating func next() throws(ProtobufError) -> ProtoField? {
        guard pos < end else { return nil }
        let k = try varint()
        let number = k >> 3
        guard number != 0 else { throw .invalidFieldNumber }
        guard number <= 0x1fff_ffff else { throw .invalidFieldNumber }
        guard let wt = WireType(rawValue: Int(k & 7)) else { throw .unsupportedWireType(Int(k & 7)) }
        switch wt {
        case .varint:
            return ProtoField(number: Int(number), wireType: wt, scalar: try varint(), range: pos..<pos)
        case .fixed64:
            guard end - pos >= 8 else { throw .truncated }
            var v: UInt64 = 0
            for i in 0..<8 { v |= UInt64(bytes[pos + i]) << UInt64(8 * i) }
            pos += 8
            return ProtoField(number: Int(number), wireType: wt, scalar: v, range: pos..<pos)
        case .fixed32:
            guard end - pos >= 4 else { throw .truncated }
            var v: UInt64 = 0
            for i in 0..<4 { v |= UInt64(bytes[pos + i]) << UInt64(8 * i) }
            pos += 4
            return ProtoField(number: Int(number), wireType: wt, scalar: v, range: pos..<pos)
        case .lengthDelimited:
            let len = try varint()
            guard len <= UInt64(end - pos) else { throw .truncated }
            let r = pos..<(pos + Int(len))
            pos += Int(len)
            return ProtoField(number: Int(number), wireType: wt, scalar: len, range: r)
        }
    }

    // Typed accessors: each checks the wire type of the field it is given.

    public func uint32(_ f: ProtoField) throws(ProtobufError) -> UInt32 {
        let v = try uint64(f)
        guard v <= UInt64(UInt32.max) else { throw .valueOutOfRange(field: f.number) }
        return UInt32(v)
    }
    public func uint64(_ f: ProtoField) throws(ProtobufError) -> UInt64 {
        guard f.wireType == .varint else { throw .wrongWireType(field: f.number, got: f.wireType.rawValue) }
        return f.scalar
    }
    public func bool(_ f: ProtoField) throws(ProtobufError) -> Bool { try uint64(f) != 0 }
    public func fixed64(_ f: ProtoField) throws(ProtobufError) -> UInt64 {
        guard f.wireType == .fixed64 else { throw .wrongWireType(field: f.number, got: f.wireType.rawValue) }
        return f.scalar
    }
    public func bytesValue(_ f: ProtoField) throws(ProtobufError) -> [UInt8] {
        guard f.wireType == .lengthDelimited else { throw .wrongWireType(field: f.number, got: f.wireType.rawValue) }
        return Array(bytes[f.range])
    }
    public func string(_ f: ProtoField) throws(ProtobufError) -> String {
        let b = try bytesValue(f)
        guard let s = String(validating: b, as: UTF8.self) else { throw .invalidUTF8(field: f.number) }
        return s
    }
    /// A reader over a nested message field.
    public func nested(_ f: ProtoField) throws(ProtobufError) -> ProtoReader {
        guard f.wireType == .lengthDelimited else { throw .wrongWireType(field: f.number, got: f.wireType.rawValue) }
        return ProtoReader(bytes, f.range)
    }
}
