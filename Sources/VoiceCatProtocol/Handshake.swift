// The control-channel handshake and key schedule (PROTOCOL.md §1).
//
//   ClientHello  "VCAT" | u16 proto_version | e_c[32]
//   ServerHello  "VCAT" | u16 proto_version | u8 status
//                status 0: e_s[32] | ik_s[32] | sig[64]   sig = Ed25519(ik_s, "voicecat-hs-v2" | e_c | e_s)
//                status 1: version mismatch, the server closes
//
// crypto_kx over the ephemerals gives `up` (client→server) and `down` (server→client);
// with H = BLAKE2b-256(ClientHello | ServerHello) every working key is
// BLAKE2b-256(key = up or down, message = label | H [| u32 epoch]).

public enum HandshakeError: Error, Equatable, Sendable, CustomStringConvertible {
    case badMagic
    case truncated
    /// The peer speaks another protocol version (the peer's is given).
    case versionMismatch(peerVersion: UInt16)
    /// ServerHello status 1: the server refused this side's version (it names its own,
    /// which may even be the same when the server is broken or not ours).
    case versionRefused(peerVersion: UInt16)
    case unknownStatus(UInt8)
    case badSignature
    case keyExchangeFailed
    /// The server's fingerprint is not the one the host pinned.
    case fingerprintMismatch(expected: String, actual: String)

    public var description: String {
        switch self {
        case .badMagic: return "handshake does not start with \"VCAT\""
        case .truncated: return "handshake message truncated"
        case .versionMismatch(let v): return "protocol version mismatch: peer speaks v\(v), this build speaks v\(ProtocolVersion.current)"
        case .versionRefused(let v): return "the server (v\(v)) refused protocol v\(ProtocolVersion.current)"
        case .unknownStatus(let s): return "unknown ServerHello status \(s)"
        case .badSignature: return "server's handshake signature does not verify"
        case .keyExchangeFailed: return "key exchange rejected the peer's ephemeral key"
        case .fingerprintMismatch(let e, let a): return "server fingerprint \(a) does not match the pinned \(e)"
        }
    }
}

public enum ProtocolVersion {
    public static let current: UInt16 = 2
    /// Default TCP and UDP port.
    public static let defaultPort: UInt16 = 47800
}

public enum Handshake {
    static let magic: [UInt8] = Array("VCAT".utf8)
    static let signatureContext: [UInt8] = Array("voicecat-hs-v2".utf8)
    public static let clientHelloSize = 4 + 2 + 32
    /// Bytes of every ServerHello before its status-dependent body.
    public static let serverHelloPrefixSize = 4 + 2 + 1
    /// Body size after the prefix for status 0.
    public static let serverHelloAcceptBodySize = 32 + 32 + 64

    public static func clientHello(version: UInt16 = ProtocolVersion.current, ephemeral: [UInt8]) -> [UInt8] {
        var w = ByteWriter(capacity: clientHelloSize)
        w.append(magic); w.u16(version); w.append(ephemeral)
        return w.bytes
    }

    /// Parses a ClientHello: (version, ephemeral public key).
    public static func parseClientHello(_ b: [UInt8]) throws(HandshakeError) -> (version: UInt16, ephemeral: [UInt8]) {
        guard b.count >= 6 else { throw .truncated }
        guard Array(b[0..<4]) == magic else { throw .badMagic }
        let v = UInt16(b[4]) << 8 | UInt16(b[5])
        guard b.count >= clientHelloSize else { throw .truncated }
        return (v, Array(b[6..<38]))
    }

    public static func versionMismatchReply() -> [UInt8] {
        var w = ByteWriter(capacity: serverHelloPrefixSize)
        w.append(magic); w.u16(ProtocolVersion.current); w.u8(1)
        return w.bytes
    }

    /// The body length that follows a ServerHello prefix, or an error for a bad prefix.
    public static func serverHelloBodySize(prefix: [UInt8]) throws(HandshakeError) -> Int {
        guard prefix.count >= serverHelloPrefixSize else { throw .truncated }
        guard Array(prefix[0..<4]) == magic else { throw .badMagic }
        let v = UInt16(prefix[4]) << 8 | UInt16(prefix[5])
        switch prefix[6] {
        case 0:
            guard v == ProtocolVersion.current else { throw .versionMismatch(peerVersion: v) }
            return serverHelloAcceptBodySize
        case 1: throw .versionRefused(peerVersion: v)
        default: throw .unknownStatus(prefix[6])
        }
    }

    static func signedMessage(clientEphemeral: [UInt8], serverEphemeral: [UInt8]) -> [UInt8] {
        signatureContext + clientEphemeral + serverEphemeral
    }
}

/// The client half of the handshake.
public struct ClientHandshake {
    let ephemeral = KxKeyPair()
    public let helloBytes: [UInt8]

    public init(version: UInt16 = ProtocolVersion.current) {
        helloBytes = Handshake.clientHello(version: version, ephemeral: ephemeral.publicKey)
    }

    /// Verifies a complete ServerHello (prefix and body) and derives the session keys.
    /// `pinnedFingerprint`, when given, must match or the handshake fails before
    /// anything else is sent.
    public func finish(serverHello b: [UInt8], pinnedFingerprint: String?) throws(HandshakeError) -> (keys: SessionKeys, fingerprint: String) {
        let bodySize = try Handshake.serverHelloBodySize(prefix: b)
        guard b.count == Handshake.serverHelloPrefixSize + bodySize else { throw .truncated }
        let es = Array(b[7..<39]), iks = Array(b[39..<71]), sig = Array(b[71..<135])
        guard IdentityKey.verify(signature: sig,
                                 message: Handshake.signedMessage(clientEphemeral: ephemeral.publicKey, serverEphemeral: es),
                                 publicKey: iks) else { throw .badSignature }
        let fp = IdentityKey.fingerprint(of: iks)
        if let pinned = pinnedFingerprint, pinned.lowercased() != fp {
            throw .fingerprintMismatch(expected: pinned.lowercased(), actual: fp)
        }
        let secrets: (up: [UInt8], down: [UInt8])
        do { secrets = try ephemeral.clientSessionKeys(serverPublicKey: es) } catch { throw .keyExchangeFailed }
        let h = blake2b256(helloBytes + b)
        return (SessionKeys(role: .client, up: secrets.up, down: secrets.down, transcriptHash: h), fp)
    }
}

/// The server half of the handshake.
public enum ServerHandshake {
    /// Answers a ClientHello. A version mismatch throws `.versionMismatch` with the
    /// client's version; the caller then sends `Handshake.versionMismatchReply()` and closes.
    public static func respond(clientHello: [UInt8], identity: IdentityKey) throws(HandshakeError) -> (reply: [UInt8], keys: SessionKeys) {
        let (v, ec) = try Handshake.parseClientHello(clientHello)
        guard v == ProtocolVersion.current else { throw .versionMismatch(peerVersion: v) }
        let eph = KxKeyPair()
        let sig = identity.sign(Handshake.signedMessage(clientEphemeral: ec, serverEphemeral: eph.publicKey))
        var w = ByteWriter(capacity: 135)
        w.append(Handshake.magic); w.u16(ProtocolVersion.current); w.u8(0)
        w.append(eph.publicKey); w.append(identity.publicKey); w.append(sig)
        let secrets: (up: [UInt8], down: [UInt8])
        do { secrets = try eph.serverSessionKeys(clientPublicKey: ec) } catch { throw .keyExchangeFailed }
        let h = blake2b256(Array(clientHello[0..<Handshake.clientHelloSize]) + w.bytes)
        return (w.bytes, SessionKeys(role: .server, up: secrets.up, down: secrets.down, transcriptHash: h))
    }
}

/// A key for each direction of one purpose, seen from one side.
public struct DirectionalKeys: Equatable, Sendable {
    public let send: SymmetricKey
    public let receive: SymmetricKey
}

/// The secrets of one session and the key schedule over them.
public struct SessionKeys: Sendable {
    public enum Role: Sendable { case client, server }
    public let role: Role
    let up: [UInt8]
    let down: [UInt8]
    let transcriptHash: [UInt8]

    /// Working key for one direction: BLAKE2b-256(key = secret, label | H [| u32 epoch]).
    static func derive(secret: [UInt8], label: String, h: [UInt8], epoch: UInt32?) -> SymmetricKey {
        var w = ByteWriter(capacity: 48)
        w.append(Array(label.utf8)); w.append(h)
        if let e = epoch { w.u32(e) }
        return SymmetricKey(blake2b256(w.bytes, key: secret))
    }

    private func pair(_ label: String, epoch: UInt32?) -> DirectionalKeys {
        let upKey = SessionKeys.derive(secret: up, label: label, h: transcriptHash, epoch: epoch)
        let downKey = SessionKeys.derive(secret: down, label: label, h: transcriptHash, epoch: epoch)
        return role == .client ? DirectionalKeys(send: upKey, receive: downKey) : DirectionalKeys(send: downKey, receive: upKey)
    }

    /// Keys of the encrypted control frames (no epoch: the TCP session lives once).
    public var control: DirectionalKeys { pair("control", epoch: nil) }
    /// Keys of VOICE datagrams for a media epoch (0 at first, bumped by Rebind).
    public func media(epoch: UInt32) -> DirectionalKeys { pair("media", epoch: epoch) }
    /// Keys of UDP_BINDING datagrams for a media epoch.
    public func bind(epoch: UInt32) -> DirectionalKeys { pair("bind", epoch: epoch) }
}
