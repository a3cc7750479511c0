// Handshake and control-channel robustness against a live server.
import Glibc
import VoiceCatProtocol
import VoiceCatServerCore
import VoiceCatSystem
import VoiceCatTestSupport
import XCTest

final class HandshakeTests: XCTestCase {
    func testVersionOneClientGetsStatusOneAndAClose() throws {
        let ts = try TestServer()
        defer { ts.stop() }
        let s = try Socket.connectTCP(SocketAddress(host: "127.0.0.1", port: ts.port), timeoutMs: 2000)
        try TestClient.writeAll(s, Handshake.clientHello(version: 1, ephemeral: KxKeyPair().publicKey))
        let reply = try TestClient.readExactly(s, Handshake.serverHelloPrefixSize)
        XCTAssertEqual(reply, Array("VCAT".utf8) + [0, 2, 1])
        XCTAssertThrowsError(try Handshake.serverHelloBodySize(prefix: reply)) { e in
            XCTAssertEqual(e as? HandshakeError, .versionRefused(peerVersion: 2))
        }
        XCTAssertThrowsError(try TestClient.readExactly(s, 1), "server must close after status 1")
        ts.waitFor("mismatch counted") { $0.handshakeVersionMismatch == 1 }
    }

    func testPinnedFingerprintMismatchFailsBeforeAnyCredentialIsSent() throws {
        let ts = try TestServer()
        defer { ts.stop() }
        let wrong = String(repeating: "ab", count: 32)
        XCTAssertThrowsError(try TestClient(port: ts.port, pinned: wrong)) { e in
            guard case .fingerprintMismatch(let exp, let actual)? = e as? HandshakeError else { return XCTFail("\(e)") }
            XCTAssertEqual(exp, wrong)
            XCTAssertEqual(actual, ts.server.fingerprint)
        }
        // The matching pin works, and the failed attempt sent no control frame.
        let ok = try TestClient(port: ts.port, pinned: ts.server.fingerprint.uppercased())
        XCTAssertEqual(ok.fingerprint, ts.server.fingerprint)
        sleepMilliseconds(50)
        XCTAssertEqual(ts.counters.controlFramesIn, 0)
        XCTAssertEqual(ts.counters.sessionsOpened, 0)
    }

    func testIdentityPersistsAcrossRestartsWithMode0600() throws {
        let ts = try TestServer(freshIdentity: true)
        let path = ts.server.config.identityPath
        XCTAssertTrue(ts.server.identityCreated)
        XCTAssertEqual(try Files.mode(path), 0o600)
        var cfg = ts.server.config
        cfg.anyPort = true
        let again = try Server(config: cfg)
        XCTAssertFalse(again.identityCreated)
        XCTAssertEqual(again.fingerprint, ts.server.fingerprint)
        ts.stop()
    }

    func testAServerThatCannotStartCreatesNoIdentity() throws {
        // The port is taken: the start fails, and no identity file is left behind for
        // the next start to "load" as if it had been made and announced before.
        let ts = try TestServer()
        defer { ts.stop() }
        let path = TestEnvironment.makeDirectory() + "/identity.key"
        var cfg = ServerConfig()
        cfg.port = ts.port
        cfg.identityPath = path
        XCTAssertThrowsError(try Server(config: cfg))
        XCTAssertNil(try Files.read(path), "an identity file was created by a start that failed")
        // A broken identity file still fails the start before anything is bound.
        XCTAssertNoThrow(try Files.createExclusive(path, bytes: Array("not a key\n".utf8), mode: 0o600))
        cfg.anyPort = true
        XCTAssertThrowsError(try Server(config: cfg)) { e in XCTAssertTrue("\(e)".contains("not a VoiceCat identity file"), "\(e)") }
    }

    func testServersStartingAtOnceOnOneIdentityFileShareIt() throws {
        // Two servers started together (a unit restarted while the old one still runs,
        // two ports on one key) both found no identity; the second one's create failed
        // with EEXIST, after binding, and its start failed. Now the one that loses the
        // race takes the winner's identity, and a reader never sees a partial file.
        for round in 0..<20 {
            let dir = TestEnvironment.makeDirectory()
            let path = dir + "/identity.key"
            let results = UnsafeMutablePointer<(String, Bool)?>.allocate(capacity: 8)
            results.initialize(repeating: nil, count: 8)
            defer { results.deallocate() }
            DispatchQueue.concurrentPerform(iterations: 8) { i in
                if i % 2 == 0, let (key, created) = try? IdentityStore.create(path: path) {
                    results[i] = (hexString(key.publicKey), created)
                } else if let key = try? IdentityStore.load(path: path) ?? IdentityStore.create(path: path).key {
                    results[i] = (hexString(key.publicKey), false)
                }
            }
            let got = (0..<8).map { results[$0] }
            XCTAssertTrue(got.allSatisfy { $0 != nil }, "round \(round): a start failed: \(got)")
            XCTAssertEqual(Set(got.compactMap { $0?.0 }).count, 1, "round \(round): two identities: \(got)")
            XCTAssertLessThanOrEqual(got.filter { $0?.1 == true }.count, 1, "round \(round): created twice")
            XCTAssertEqual(try Files.mode(path), 0o600)
            let left = try FileManager.default.contentsOfDirectory(atPath: dir)
            XCTAssertEqual(left, ["identity.key"], "round \(round): temporary files left: \(left)")
        }
    }

    func testAKeyFileOnAFileSystemWithoutHardLinksIsCreatedInPlace() throws {
        // vfat, some FUSE and CIFS mounts refuse link(2) (EPERM): the atomic create
        // would fail every start there; it creates the file in place instead.
        let noLinks: (String, String) -> Int32 = { _, _ in errno = EPERM; return -1 }
        let dir = TestEnvironment.makeDirectory()
        let path = dir + "/identity.key"
        let text = Array("voicecat-identity-v1 00\n".utf8)
        try Files.createExclusive(path, bytes: text, mode: 0o600, link: noLinks)
        XCTAssertEqual(try Files.read(path), text)
        XCTAssertEqual(try Files.mode(path), 0o600)
        XCTAssertThrowsError(try Files.createExclusive(path, bytes: [1], mode: 0o600, link: noLinks)) { e in
            XCTAssertEqual((e as? SystemError)?.errno, EEXIST, "\(e)")
        }
        XCTAssertEqual(try Files.read(path), text, "an existing file was touched")
        // Any other failure of link(2) fails the create, and leaves nothing.
        XCTAssertThrowsError(try Files.createExclusive(dir + "/other.key", bytes: [1], mode: 0o600, link: { _, _ in errno = EIO; return -1 })) { e in
            XCTAssertTrue("\(e)".contains("link("), "\(e)")
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir), ["identity.key"], "temporary files left")
    }

    func testMalformedControlInputCostsOnlyThatConnection() throws {
        let ts = try TestServer { $0.frameTimeoutSeconds = 0.5 }
        defer { ts.stop() }
        let honest = try TestClient.login(port: ts.port, username: "honest")

        // Unknown message type: answered with Error, the connection stays.
        let u = try TestClient.login(port: ts.port, username: "unknown")
        try u.sendRaw(u.sealer.seal([0x7f, 0x01, 0x08, 0x01]))
        XCTAssertEqual(try u.expectError().code, ProtocolErrorCode.unknownMessageType.rawValue)
        u.send(.ping(Ping(timestamp: 7)))
        XCTAssertEqual(try u.expect("Pong") { m -> UInt64? in if case .pong(let p) = m { return p.timestamp }; return nil }, 7)

        // Bad protobuf (a truncated varint in a Hello body): Error, then closed.
        let bad = try TestClient(port: ts.port)
        try bad.sendRaw(bad.sealer.seal([0, 1, 0x08, 0xff]))
        XCTAssertEqual(try bad.expectError().code, ProtocolErrorCode.badRequest.rawValue)
        XCTAssertTrue(bad.waitForClose(timeoutMs: 1000))

        // A length field over 64 KiB: closed at once.
        let big = try TestClient(port: ts.port)
        try big.sendRaw([0x00, 0x01, 0x00, 0x11])
        XCTAssertTrue(big.waitForClose(timeoutMs: 1000))

        // A frame that fails authentication (tampered byte): closed.
        let tamper = try TestClient(port: ts.port)
        var f = tamper.sealer.seal(ControlMessage.hello(Hello(username: "t")).encode())
        f[6] ^= 1
        try tamper.sendRaw(f)
        XCTAssertTrue(tamper.waitForClose(timeoutMs: 1000))

        // Stalls mid-frame: the loop keeps serving others, then drops the staller.
        let stall = try TestClient.login(port: ts.port, username: "staller")
        let frame = stall.sealer.seal(ControlMessage.ping(Ping(timestamp: 1)).encode())
        try stall.sendRaw(Array(frame[0..<7]))
        honest.send(.ping(Ping(timestamp: 99)))
        XCTAssertEqual(try honest.expect("Pong") { m -> UInt64? in if case .pong(let p) = m { return p.timestamp }; return nil }, 99)
        XCTAssertTrue(stall.waitForClose(timeoutMs: 2000))

        // Garbage instead of a ClientHello.
        let junk = try Socket.connectTCP(SocketAddress(host: "127.0.0.1", port: ts.port), timeoutMs: 1000)
        try TestClient.writeAll(junk, Array("GET / HTTP/1.1\r\n\r\n".utf8))
        XCTAssertThrowsError(try TestClient.readExactly(junk, 1))

        // A control message before Hello.
        let early = try TestClient(port: ts.port)
        early.send(.joinChannel(JoinChannel(name: "Lobby", requestID: 1)))
        XCTAssertEqual(try early.expectError().code, ProtocolErrorCode.wrongState.rawValue)

        honest.send(.ping(Ping(timestamp: 100)))
        XCTAssertEqual(try honest.expect("Pong") { m -> UInt64? in if case .pong(let p) = m { return p.timestamp }; return nil }, 100)
        ts.waitFor("errors counted, honest sessions kept") { $0.controlProtocolErrors >= 4 && $0.sessionsActive == 2 }
    }
}
