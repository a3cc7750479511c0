// Handshake, key schedule and AEAD framing.
import VoiceCatProtocol
import XCTest

final class HandshakeUnitTests: XCTestCase {
    func testBothSidesDeriveMatchingDistinctKeys() throws {
        let id = IdentityKey()
        let client = ClientHandshake()
        let (reply, serverKeys) = try ServerHandshake.respond(clientHello: client.helloBytes, identity: id)
        XCTAssertEqual(reply.count, 135)
        let (clientKeys, fp) = try client.finish(serverHello: reply, pinnedFingerprint: nil)
        XCTAssertEqual(fp, id.fingerprint)
        XCTAssertEqual(fp.count, 64)
        XCTAssertEqual(clientKeys.control.send, serverKeys.control.receive)
        XCTAssertEqual(clientKeys.control.receive, serverKeys.control.send)
        XCTAssertEqual(clientKeys.media(epoch: 3).send, serverKeys.media(epoch: 3).receive)
        XCTAssertEqual(clientKeys.bind(epoch: 0).receive, serverKeys.bind(epoch: 0).send)
        // One key per direction, purpose and epoch.
        let all = [clientKeys.control.send, clientKeys.control.receive, clientKeys.media(epoch: 0).send,
                   clientKeys.media(epoch: 0).receive, clientKeys.media(epoch: 1).send, clientKeys.bind(epoch: 0).send,
                   clientKeys.bind(epoch: 0).receive]
        XCTAssertEqual(Set(all.map(\.bytes)).count, all.count)
        // Forward secrecy: a second handshake with the same identity gives other keys.
        let c2 = ClientHandshake()
        let (r2, _) = try ServerHandshake.respond(clientHello: c2.helloBytes, identity: id)
        XCTAssertNotEqual(try c2.finish(serverHello: r2, pinnedFingerprint: fp).keys.control.send, clientKeys.control.send)
    }

    func testForgedOrMismatchedServerIsRefused() throws {
        let id = IdentityKey()
        let client = ClientHandshake()
        var (reply, _) = try ServerHandshake.respond(clientHello: client.helloBytes, identity: id)
        XCTAssertThrowsError(try client.finish(serverHello: reply, pinnedFingerprint: IdentityKey().fingerprint)) { e in
            guard case .fingerprintMismatch? = e as? HandshakeError else { return XCTFail("\(e)") }
        }
        reply[10] ^= 0x40  // tamper with the server ephemeral
        XCTAssertThrowsError(try client.finish(serverHello: reply, pinnedFingerprint: nil)) { e in
            XCTAssertEqual(e as? HandshakeError, .badSignature)
        }
        // A ServerHello signed for another client's ephemeral does not verify either.
        let (other, _) = try ServerHandshake.respond(clientHello: ClientHandshake().helloBytes, identity: id)
        XCTAssertThrowsError(try client.finish(serverHello: other, pinnedFingerprint: nil))
        XCTAssertThrowsError(try ServerHandshake.respond(clientHello: Handshake.clientHello(version: 1, ephemeral: KxKeyPair().publicKey), identity: id)) { e in
            XCTAssertEqual(e as? HandshakeError, .versionMismatch(peerVersion: 1))
        }
        XCTAssertThrowsError(try Handshake.parseClientHello(Array("HTTP/1.1 200".utf8))) { e in XCTAssertEqual(e as? HandshakeError, .badMagic) }
    }
}

final class ControlChannelTests: XCTestCase {
    func testFramesOpenInOrderAcrossArbitraryChunking() throws {
        let key = SymmetricKey.random()
        var sealer = ControlSealer(key: key)
        var opener = ControlOpener(key: key)
        let msgs: [[UInt8]] = [[], [1], Array(repeating: 7, count: 5000), Array(repeating: 9, count: ControlFraming.maxPlaintext)]
        var stream: [UInt8] = []
        for m in msgs { stream += sealer.seal(m) }
        var out: [[UInt8]] = []
        var i = 0
        var chunk = 1
        while i < stream.count {
            let end = min(stream.count, i + chunk)
            opener.append(stream[i..<end])
            while let p = try opener.next() { out.append(p) }
            i = end
            chunk = chunk * 3 + 1
        }
        XCTAssertEqual(out, msgs)
        XCTAssertFalse(opener.hasPartialFrame)
    }

    func testOutOfOrderTamperedAndOversizedFramesFail() throws {
        let key = SymmetricKey.random()
        var sealer = ControlSealer(key: key)
        let f0 = sealer.seal([1, 2, 3])
        let f1 = sealer.seal([4, 5, 6])
        var o = ControlOpener(key: key)
        o.append(f1)
        XCTAssertThrowsError(try o.next()) { e in XCTAssertEqual(e as? ControlFrameError, .authenticationFailed) }
        var t = ControlOpener(key: key)
        var bad = f0
        bad[3] ^= 1  // the length is authenticated too (AAD)
        t.append(bad)
        XCTAssertThrowsError(try t.next())
        var big = ControlOpener(key: key)
        big.append([0, 1, 0, 1])
        XCTAssertThrowsError(try big.next()) { e in XCTAssertEqual(e as? ControlFrameError, .tooLong(65537)) }
        var wrongKey = ControlOpener(key: SymmetricKey.random())
        wrongKey.append(f0)
        XCTAssertThrowsError(try wrongKey.next())
    }
}

final class MediaCryptoTests: XCTestCase {
    func testSealOpenUsesSsrcAndFullSeqAsNonce() throws {
        let key = SymmetricKey.random()
        let opus: [UInt8] = Array(0..<100)
        // Past 2^16 and past 2^32: the full seq is on the wire and in the nonce.
        for seq: UInt64 in [0, 65535, 65536, 70000, 1 << 32, (1 << 32) + 1, .max] {
            let h = FrameHeader(type: .voice, flags: .marker, ssrc: 42, seq: seq, timestamp: 7)
            let d = MediaCrypto.seal(header: h, payload: opus, key: key)
            XCTAssertEqual(d.count, opus.count + MediaCrypto.overhead)
            let (oh, p) = try MediaCrypto.open(d, key: key)
            XCTAssertEqual(oh, h)
            XCTAssertEqual(p, opus)
        }
        // Nonces differ for seqs that share their low 16 bits.
        let a = MediaCrypto.seal(header: FrameHeader(type: .voice, ssrc: 1, seq: 5, timestamp: 0), payload: opus, key: key)
        let b = MediaCrypto.seal(header: FrameHeader(type: .voice, ssrc: 1, seq: 5 + 65536, timestamp: 0), payload: opus, key: key)
        XCTAssertNotEqual(Array(a[20...]), Array(b[20...]))
    }

    func testHeaderIsAuthenticated() throws {
        let key = SymmetricKey.random()
        let d = MediaCrypto.seal(header: FrameHeader(type: .voice, ssrc: 9, seq: 1, timestamp: 0), payload: [1, 2, 3], key: key)
        for i in [1, 4, 8, 15, 16, 19, 21] {
            var t = d
            t[i] ^= 0x01
            XCTAssertThrowsError(try MediaCrypto.open(t, key: key), "byte \(i)")
        }
        XCTAssertThrowsError(try MediaCrypto.open(Array(d[0..<30]), key: key)) { e in XCTAssertEqual(e as? MediaOpenError, .noTag(30)) }
        XCTAssertThrowsError(try MediaCrypto.open(Array(d[0..<5]), key: key)) { e in XCTAssertEqual(e as? MediaOpenError, .header(.tooShort(5))) }
        XCTAssertThrowsError(try MediaCrypto.open(d, key: SymmetricKey.random())) { e in XCTAssertEqual(e as? MediaOpenError, .authenticationFailed) }
    }
}
