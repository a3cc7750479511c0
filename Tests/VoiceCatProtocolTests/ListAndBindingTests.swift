// Lists built from pre-encoded entries, and the UDP binding exchange with its cookie.
import VoiceCatProtocol
import XCTest

final class ListEncodingTests: XCTestCase {
    func testAListAppendedAsEncodedEntriesDecodesLikeTheStructs() throws {
        let members = (1...5).map { MemberInfo(userID: UInt32($0), username: "user\($0)", muted: $0 % 2 == 0) }
        var plain = ControlMessage.joinChannelResult(JoinChannelResult(channelID: 9, audio: .music, members: [], requestID: 3, moreMembers: true)).encode()
        for m in members { plain += m.encoded(asField: JoinChannelResult.membersField) }
        XCTAssertEqual(try ControlMessage.decode(plain),
                       .joinChannelResult(JoinChannelResult(channelID: 9, audio: .music, members: members, requestID: 3, moreMembers: true)))
        // The same entries fit MemberList and UsersJoined.
        var part = ControlMessage.memberList(MemberList(channelID: 9, members: [], requestID: 3, more: false)).encode()
        var joined = ControlMessage.usersJoined(UsersJoined(channelID: 9, members: [])).encode()
        for m in members { part += m.encoded(asField: JoinChannelResult.membersField); joined += m.encoded(asField: JoinChannelResult.membersField) }
        XCTAssertEqual(try ControlMessage.decode(part), .memberList(MemberList(channelID: 9, members: members, requestID: 3, more: false)))
        XCTAssertEqual(try ControlMessage.decode(joined), .usersJoined(UsersJoined(channelID: 9, members: members)))
        var left = ControlMessage.usersLeft(UsersLeft(channelID: 9, userIDs: [])).encode()
        for id: UInt32 in [7, 300, 70000] { left += UsersLeft.encodedEntry(id) }
        XCTAssertEqual(try ControlMessage.decode(left), .usersLeft(UsersLeft(channelID: 9, userIDs: [7, 300, 70000])))
    }

    func testUserIDsAreReadPackedToo() throws {
        // Field 3 as one length-delimited run of varints (proto3's packed form).
        let packed: [UInt8] = [0, UInt8(MessageType.usersLeft.rawValue), 0x10, 0x02, 0x1a, 0x04, 0x07, 0xac, 0x02, 0x01]
        XCTAssertEqual(try ControlMessage.decode(packed), .usersLeft(UsersLeft(channelID: 2, userIDs: [7, 300, 1])))
    }
}

final class BindingTests: XCTestCase {
    func testPayloadRoundTripsAndRejectsBadInput() throws {
        let p = UDPBindingPayload(sessionID: 0x0102030405060708, epoch: 9, kind: .challenge,
                                  cookie: BindingCookie(high: 0xdead_beef_0000_0001, low: 42))
        XCTAssertEqual(p.bytes.count, UDPBindingPayload.size)
        XCTAssertEqual(try p.bytes.withUnsafeBytes { try UDPBindingPayload.parse($0) }, p)
        XCTAssertThrowsError(try [UInt8](repeating: 0, count: 12).withUnsafeBytes { try UDPBindingPayload.parse($0) }) { e in
            XCTAssertEqual(e as? UDPBindingError, .wrongSize(12))
        }
        var bad = p.bytes
        bad[12] = 7
        XCTAssertThrowsError(try bad.withUnsafeBytes { try UDPBindingPayload.parse($0) }) { e in
            XCTAssertEqual(e as? UDPBindingError, .unknownKind(7))
        }
    }

    /// The client side against a stand-in for the server's half built from the same type.
    func testBinderAnswersAChallengeWithTheCookieAndIgnoresStrangers() throws {
        let server = SessionKeys.testPair()
        var binder = UDPBinder(sessionID: 77, bindingID: 5, epoch: 2, keys: server.client.bind(epoch: 2))
        let serverKeys = server.server.bind(epoch: 2)

        func open(_ d: [UInt8]) throws -> (FrameHeader, UDPBindingPayload) {
            let (h, payload) = try MediaCrypto.open(d, key: serverKeys.receive)
            return (h, try payload.withUnsafeBytes { try UDPBindingPayload.parse($0) })
        }
        let (h0, first) = try open(binder.nextRequest())
        XCTAssertEqual(h0.ssrc, 5)
        XCTAssertEqual(h0.seq, 0)
        XCTAssertEqual(first.kind, .request)
        XCTAssertEqual(first.cookie, .none)

        let cookie = BindingCookie(high: 1, low: 2)
        let challenge = UDPBindingPayload(sessionID: 77, epoch: 2, kind: .challenge, cookie: cookie)
        XCTAssertEqual(binder.handle(challenge.sealed(bindingID: 5, seq: 0, key: serverKeys.send)), .challenged)
        let (h1, second) = try open(binder.nextRequest())
        XCTAssertEqual(h1.seq, 1)
        XCTAssertEqual(second.cookie, cookie)

        // Replays, other epochs, other sessions and other keys are ignored.
        XCTAssertEqual(binder.handle(challenge.sealed(bindingID: 5, seq: 0, key: serverKeys.send)), .ignored)
        XCTAssertEqual(binder.handle(UDPBindingPayload(sessionID: 77, epoch: 1, kind: .bound).sealed(bindingID: 5, seq: 3, key: serverKeys.send)), .ignored)
        XCTAssertEqual(binder.handle(UDPBindingPayload(sessionID: 78, epoch: 2, kind: .bound).sealed(bindingID: 5, seq: 4, key: serverKeys.send)), .ignored)
        XCTAssertEqual(binder.handle(UDPBindingPayload(sessionID: 77, epoch: 2, kind: .bound).sealed(bindingID: 5, seq: 5, key: .random())), .ignored)
        XCTAssertFalse(binder.isBound)
        XCTAssertEqual(binder.handle(UDPBindingPayload(sessionID: 77, epoch: 2, kind: .bound, cookie: cookie)
            .sealed(bindingID: 5, seq: 6, key: serverKeys.send)), .bound)
        XCTAssertTrue(binder.isBound)
    }
}

extension SessionKeys {
    /// Both halves of one handshake, for tests of the keyed exchanges.
    static func testPair() -> (client: SessionKeys, server: SessionKeys) {
        let id = IdentityKey()
        let hs = ClientHandshake()
        let (reply, serverKeys) = try! ServerHandshake.respond(clientHello: hs.helloBytes, identity: id)
        let (clientKeys, _) = try! hs.finish(serverHello: reply, pinnedFingerprint: nil)
        return (clientKeys, serverKeys)
    }
}
