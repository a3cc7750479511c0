// libsodium primitives used by the protocol: X25519 key exchange (crypto_kx),
// Ed25519 signatures, BLAKE2b-256, ChaCha20-Poly1305-IETF. Pure computation; no I/O.
import CSodium

public enum CryptoError: Error, Equatable, Sendable, CustomStringConvertible {
    case sodiumUnavailable
    case authenticationFailed
    case badSignature
    case keyExchangeFailed
    case invalidKeyMaterial(String)

    public var description: String {
        switch self {
        case .sodiumUnavailable: return "libsodium failed to initialise"
        case .authenticationFailed: return "AEAD authentication failed (wrong key, tampered or replayed data)"
        case .badSignature: return "the server's handshake signature does not verify"
        case .keyExchangeFailed: return "X25519 key exchange rejected the peer's public key"
        case .invalidKeyMaterial(let why): return "invalid key material: \(why)"
        }
    }
}

public enum Sodium {
    private static let initResult: Int32 = sodium_init()

    /// Initialises libsodium once per process (safe to call from any thread, any number of times).
    @discardableResult
    public static func ensureInitialized() -> Bool { initResult >= 0 }

    /// Fills a new array with `count` random bytes.
    public static func randomBytes(_ count: Int) -> [UInt8] {
        ensureInitialized()
        var b = [UInt8](repeating: 0, count: count)
        b.withUnsafeMutableBytes { randombytes_buf($0.baseAddress!, count) }
        return b
    }

    public static func randomUInt32() -> UInt32 { ensureInitialized(); return randombytes_random() }

    /// Constant-time comparison.
    public static func equal(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        if a.isEmpty { return true }
        return a.withUnsafeBytes { pa in b.withUnsafeBytes { pb in sodium_memcmp(pa.baseAddress!, pb.baseAddress!, a.count) == 0 } }
    }
}

/// A 32-byte symmetric key. Created on the control path; using it does not allocate.
public struct SymmetricKey: Equatable, Sendable {
    public static let size = 32
    public let bytes: [UInt8]

    public init(_ bytes: [UInt8]) {
        precondition(bytes.count == SymmetricKey.size, "a symmetric key is 32 bytes")
        self.bytes = bytes
    }

    public static func random() -> SymmetricKey { SymmetricKey(Sodium.randomBytes(size)) }
}

/// BLAKE2b with a 32-byte output, optionally keyed.
public func blake2b256(_ message: [UInt8], key: [UInt8] = []) -> [UInt8] {
    Sodium.ensureInitialized()
    var out = [UInt8](repeating: 0, count: 32)
    out.withUnsafeMutableBufferPointer { o in
        message.withUnsafeBufferPointer { m in
            key.withUnsafeBufferPointer { k in
                _ = crypto_generichash(o.baseAddress!, 32, m.baseAddress!, UInt64(m.count),
                                       k.isEmpty ? nil : k.baseAddress!, k.count)
            }
        }
    }
    return out
}

/// An X25519 key pair for crypto_kx.
public struct KxKeyPair: Sendable {
    public let publicKey: [UInt8]
    let secretKey: [UInt8]

    public init() {
        Sodium.ensureInitialized()
        var pk = [UInt8](repeating: 0, count: Int(crypto_kx_PUBLICKEYBYTES))
        var sk = [UInt8](repeating: 0, count: Int(crypto_kx_SECRETKEYBYTES))
        pk.withUnsafeMutableBufferPointer { p in sk.withUnsafeMutableBufferPointer { s in _ = crypto_kx_keypair(p.baseAddress!, s.baseAddress!) } }
        publicKey = pk
        secretKey = sk
    }

    /// Client side: returns (up = client→server, down = server→client).
    func clientSessionKeys(serverPublicKey: [UInt8]) throws(CryptoError) -> (up: [UInt8], down: [UInt8]) {
        var rx = [UInt8](repeating: 0, count: 32), tx = [UInt8](repeating: 0, count: 32)
        let rc = rx.withUnsafeMutableBufferPointer { r in tx.withUnsafeMutableBufferPointer { t in
            crypto_kx_client_session_keys(r.baseAddress!, t.baseAddress!, publicKey, secretKey, serverPublicKey) } }
        guard rc == 0 else { throw .keyExchangeFailed }
        return (tx, rx)
    }

    /// Server side: returns (up = client→server, down = server→client).
    func serverSessionKeys(clientPublicKey: [UInt8]) throws(CryptoError) -> (up: [UInt8], down: [UInt8]) {
        var rx = [UInt8](repeating: 0, count: 32), tx = [UInt8](repeating: 0, count: 32)
        let rc = rx.withUnsafeMutableBufferPointer { r in tx.withUnsafeMutableBufferPointer { t in
            crypto_kx_server_session_keys(r.baseAddress!, t.baseAddress!, publicKey, secretKey, clientPublicKey) } }
        guard rc == 0 else { throw .keyExchangeFailed }
        return (rx, tx)
    }
}

/// The server's long-term Ed25519 identity.
public struct IdentityKey: Sendable {
    public static let seedSize = 32
    public let publicKey: [UInt8]
    let secretKey: [UInt8]
    /// The 32-byte seed the key pair is derived from (what the key file stores).
    public let seed: [UInt8]

    /// A fresh random identity.
    public init() { self.init(seedUnchecked: Sodium.randomBytes(IdentityKey.seedSize)) }

    /// The identity derived from a stored seed.
    public init(seed: [UInt8]) throws(CryptoError) {
        guard seed.count == IdentityKey.seedSize else { throw .invalidKeyMaterial("identity seed must be 32 bytes, got \(seed.count)") }
        self.init(seedUnchecked: seed)
    }

    private init(seedUnchecked seed: [UInt8]) {
        Sodium.ensureInitialized()
        var pk = [UInt8](repeating: 0, count: Int(crypto_sign_PUBLICKEYBYTES))
        var sk = [UInt8](repeating: 0, count: Int(crypto_sign_SECRETKEYBYTES))
        pk.withUnsafeMutableBufferPointer { p in sk.withUnsafeMutableBufferPointer { s in
            _ = crypto_sign_seed_keypair(p.baseAddress!, s.baseAddress!, seed) } }
        publicKey = pk
        secretKey = sk
        self.seed = seed
    }

    /// Lowercase hex of BLAKE2b-256(public key) (PROTOCOL.md §1).
    public var fingerprint: String { IdentityKey.fingerprint(of: publicKey) }

    public static func fingerprint(of publicKey: [UInt8]) -> String { hexString(blake2b256(publicKey)) }

    public func sign(_ message: [UInt8]) -> [UInt8] {
        var sig = [UInt8](repeating: 0, count: Int(crypto_sign_BYTES))
        sig.withUnsafeMutableBufferPointer { s in
            _ = crypto_sign_detached(s.baseAddress!, nil, message, UInt64(message.count), secretKey)
        }
        return sig
    }

    public static func verify(signature: [UInt8], message: [UInt8], publicKey: [UInt8]) -> Bool {
        Sodium.ensureInitialized()
        guard signature.count == Int(crypto_sign_BYTES), publicKey.count == Int(crypto_sign_PUBLICKEYBYTES) else { return false }
        return crypto_sign_verify_detached(signature, message, UInt64(message.count), publicKey) == 0
    }
}

/// ChaCha20-Poly1305-IETF over raw buffers (12-byte nonce, 16-byte tag).
public enum AEAD {
    public static let tagSize = 16
    public static let nonceSize = 12

    /// Encrypts `message` into `out` (which needs message.count + 16 bytes; it may be
    /// the same memory as `message`). Returns the ciphertext length.
    @inlinable
    public static func seal(key: SymmetricKey, nonce: UnsafeRawPointer, aad: UnsafeRawBufferPointer,
                            message: UnsafeRawBufferPointer, out: UnsafeMutableRawPointer) -> Int {
        var clen: UInt64 = 0
        key.bytes.withUnsafeBytes { k in
            _ = crypto_aead_chacha20poly1305_ietf_encrypt(
                out.assumingMemoryBound(to: UInt8.self), &clen,
                message.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt64(message.count),
                aad.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt64(aad.count),
                nil, nonce.assumingMemoryBound(to: UInt8.self), k.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
        return Int(clen)
    }

    /// Decrypts and authenticates `ciphertext` (with tag) into `out` (may alias).
    /// Returns the plaintext length, or nil when authentication fails.
    @inlinable
    public static func open(key: SymmetricKey, nonce: UnsafeRawPointer, aad: UnsafeRawBufferPointer,
                            ciphertext: UnsafeRawBufferPointer, out: UnsafeMutableRawPointer) -> Int? {
        guard ciphertext.count >= tagSize else { return nil }
        var mlen: UInt64 = 0
        let rc = key.bytes.withUnsafeBytes { k in
            crypto_aead_chacha20poly1305_ietf_decrypt(
                out.assumingMemoryBound(to: UInt8.self), &mlen, nil,
                ciphertext.baseAddress!.assumingMemoryBound(to: UInt8.self), UInt64(ciphertext.count),
                aad.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt64(aad.count),
                nonce.assumingMemoryBound(to: UInt8.self), k.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
        return rc == 0 ? Int(mlen) : nil
    }
}
