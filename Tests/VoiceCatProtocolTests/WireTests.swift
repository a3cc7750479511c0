// Pure-core tests: frame header, protobuf codec, messages, replay window.
import VoiceCatProtocol
import XCTest

final class FrameHeaderTests: XCTestCase {
    func testLayoutIsExactlyTheV2BigEndianHeader() throws {
        let h = FrameHeader(type: .voice, flags: [.marker, .fec], codec: 0, ssrc: 0x0102_0304,
                            seq: 0x1112_1314_1516_1718, timestamp: 0x2122_2324)
        XCTAssertEqual(h.bytes, [1, 0b11, 0, 0, 1, 2, 3, 4, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x21, 0x22, 0x23, 0x24])
        XCTAssertEqual(try FrameHeader.parse(h.bytes), h)
        XCTAssertEqual(FrameFlags.dtx.rawValue, 4)
        XCTAssertEqual(FrameFlags.lastFrame.rawValue, 8)
    }

    func testShortAndUnknownFramesAreRejectedWithAReason() {
        XCTAssertThrowsError(try FrameHeader.parse([UInt8](repeating: 1, count: 19))) { e in
            XCTAssertEqual(e as? FrameHeaderError, .tooShort(19))
            XCTAssertTrue("\(e)".contains("19 bytes"))
        }
        var b = FrameHeader(type: .keepalive, ssrc: 1, seq: 2, timestamp: 3).bytes
        b[0] = 9
        XCTAssertThrowsError(try FrameHeader.parse(b)) { e in XCTAssertEqual(e as? FrameHeaderError, .unknownType(9)) }
        b[0] = 0
        XCTAssertThrowsError(try FrameHeader.parse(b))
    }
}

final class ProtobufTests: XCTestCase {
    /// A nested message is encoded in place; its length prefix is the varint of the
    /// body's size at every width (1, 2 and 3 bytes) and empty bodies are kept.
    func testNestedMessagesEncodeInPlaceWithTheirLengthAtEveryWidth() throws {
        for users in [0, 1, 5, 6, 200, 3000] {
            let list = UserList(users: (0..<users).map { UserPresence(userID: UInt32($0 + 1), username: "u\($0)") }, more: true)
            let body = list.protobufBytes
            var w = ProtoWriter()
            w.uint(1, UInt32(7))
            w.message(9, list)
            w.uint(2, UInt32(8))
            var length: [UInt8] = []
            var v = body.count
            repeat { length.append(UInt8(v & 0x7F) | (v >= 0x80 ? 0x80 : 0)); v >>= 7 } while v > 0
            XCTAssertEqual(w.bytes, [0x08, 7, 9 << 3 | 2] + length + body + [0x10, 8], "\(users) users, body \(body.count) bytes")
            var decoded: UserList?
            try ProtoReader(w.bytes).forEachField { f throws(ProtobufError) in
                if f.number == 9 { decoded = try UserList.decode(ProtoReader(w.bytes).nested(f)) }
            }
            XCTAssertEqual(decoded?.users.count, users)
        }
    }

    func testEveryMessageRoundTrips() throws {
        var a = AudioConfig.music
        a.frameMicros = 2500
        a.dred = true
        a.sampleRate = 24000
        let messages: [ControlMessage] = [
            .hello(Hello(username: "zoë", password: "pw", clientName: "c")),
            .helloResult(HelloResult(sessionID: .max, userID: 7, bindingID: 0xffff_ffff, serverName: "s",
                                     channels: [ChannelInfo(id: 1, name: "Lobby", audio: .speech), ChannelInfo(id: 2, name: "M", audio: a)])),
            .error(ErrorMessage(code: .usernameTaken, message: "taken", requestID: 3)),
            .ping(Ping(timestamp: 1 << 40)), .pong(Pong(timestamp: 0)),
            .joinChannel(JoinChannel(name: "Lobby", requestID: 9)),
            .joinChannelResult(JoinChannelResult(channelID: 1, audio: a, members: [MemberInfo(userID: 2, username: "x", muted: true)], requestID: 4)),
            .userJoined(UserJoined(member: MemberInfo(userID: 3, username: "y", deafened: true), channelID: 1)),
            .userLeft(UserLeft(userID: 3, channelID: 1)),
            .streamAnnounce(StreamAnnounce(streamID: 2, kind: .auxDevice, channels: 2, requestID: 5)),
            .streamAnnounceResult(StreamAnnounceResult(streamID: 2, ssrc: 1001, effectiveAudio: .speech, requestID: 5)),
            .remoteStreamAdded(RemoteStream(userID: 1, streamID: 2, ssrc: 1002, kind: .screenAudio, audio: a)),
            .streamStop(StreamStop(streamID: 2)),
            .remoteStreamRemoved(RemoteStreamRemoved(userID: 1, streamID: 2, ssrc: 1002)),
            .streamStateUpdate(StreamStateUpdate(ssrc: 1002, muted: true, hold: true)),
            .serverMuteState(ServerMuteState(userID: 1, muted: true, deafened: false)),
            .rebind(Rebind(epoch: 3)), .rebindResult(RebindResult(epoch: 3)),
            .setServerMute(SetServerMute(userID: 1, muted: true, deafened: true, adminPassword: "a", requestID: 8)),
            .channelList(ChannelList(channels: [ChannelInfo(id: 3, name: "C", audio: a)], more: true)),
            .memberList(MemberList(channelID: 1, members: [MemberInfo(userID: 4, username: "z", deafened: true)], requestID: 4, more: false)),
            .usersJoined(UsersJoined(channelID: 1, members: [MemberInfo(userID: 5, username: "a"), MemberInfo(userID: 6, username: "b")])),
            .usersLeft(UsersLeft(channelID: 1, userIDs: [5, 6, 0])),
            .helloResult(HelloResult(sessionID: 1, userID: 2, bindingID: 3, serverName: "", channels: [], moreChannels: true)),
            .joinChannelResult(JoinChannelResult(channelID: 1, audio: .speech, members: [], requestID: 0, moreMembers: true)),
            .hello(Hello(username: "p", presence: true)),
            .hello(Hello(username: "r", resumeToken: [1, 2, 3, 255])),
            .helloResult(HelloResult(sessionID: 7, userID: 2, bindingID: 3, serverName: "s", channels: [], resumeToken: Array(0..<16))),
            .helloResult(HelloResult(sessionID: 1, userID: 2, bindingID: 3, serverName: "", channels: [], presence: true)),
            .userList(UserList(users: [UserPresence(userID: 2, username: "me", channelID: 1, muted: true, deafened: true,
                                                    streams: [StreamPresence(streamID: 1, ssrc: 1001, kind: .screenAudio, muted: true, hold: true),
                                                              StreamPresence(streamID: 2, ssrc: 1002, kind: .mic)])],
                               more: true)),
            .presenceUpdate(PresenceUpdate(users: [UserPresence(userID: 9, username: "", gone: true), UserPresence(userID: 3, username: "n")],
                                           channels: [ChannelInfo(id: 7, name: "New", audio: a)], removedChannelIDs: [1, 0, 4])),
            .kickUser(KickUser(userID: 3, adminPassword: "a", reason: "spam", requestID: 11)),
            .adminResult(AdminResult(requestID: 11, userID: 3)),
            .receiverReport(ReceiverReport(reports: [ReceptionReport(ssrc: 1002, counts: LossCounts(expected: 250, lost: 9, isolated: 4))])),
            .lossFeedback(LossFeedback(streamID: 2, ssrc: 1001, listeners: 3, counts: LossCounts(expected: 240, lost: 1, isolated: 1))),
        ]
        XCTAssertEqual(Set(messages.map(\.type)).count, MessageType.allCases.count, "every message type is covered")
        for m in messages {
            XCTAssertEqual(try ControlMessage.decode(m.encode()), m, "\(m.type)")
        }
    }

    func testUnknownFieldsAreSkippedAndTypesChecked() throws {
        var w = ProtoWriter()
        w.string(1, "Lobby")
        w.fixed64(50, 123)       // unknown fields of every wire type
        w.fixed32(51, 9)
        w.string(52, "future")
        w.uint(53, UInt64(1) << 60)
        w.uint(2, 77 as UInt32)
        let msg = [0, UInt8(MessageType.joinChannel.rawValue)] + w.bytes
        XCTAssertEqual(try ControlMessage.decode(msg), .joinChannel(JoinChannel(name: "Lobby", requestID: 77)))

        // A known field with the wrong wire type is an error, not a silent default.
        var bad = ProtoWriter()
        bad.string(2, "not a number")
        XCTAssertThrowsError(try ControlMessage.decode([0, 6] + bad.bytes)) { e in
            XCTAssertEqual(e as? ControlDecodeError, .body(.joinChannel, .wrongWireType(field: 2, got: 2)))
        }
        XCTAssertThrowsError(try ControlMessage.decode([0x12, 0x34])) { e in XCTAssertEqual(e as? ControlDecodeError, .unknownType(0x1234)) }
        XCTAssertThrowsError(try ControlMessage.decode([0]))
    }

    func testMalformedBodiesAreRejected() {
        let cases: [([UInt8], ProtobufError)] = [
            ([0x08], .truncated),                                   // key without value
            ([0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01], .varintTooLong),
            ([0x12, 0x05, 0x41], .truncated),                       // length past the end
            ([0x0b], .unsupportedWireType(3)),                      // groups
            ([0x00, 0x01], .invalidFieldNumber),
            ([0x12, 0x02, 0xc3, 0x28], .invalidUTF8(field: 2)),
            ([0x08, 0x80, 0x80, 0x80, 0x80, 0x10], .valueOutOfRange(field: 1)),  // 2^32 in a u32
        ]
        for (body, err) in cases {
            XCTAssertThrowsError(try ControlMessage.decode([0, 1] + body), "\(body)") { e in
                XCTAssertEqual(e as? ControlDecodeError, .body(.hello, err))
            }
        }
        // An enum value we do not know.
        var w = ProtoWriter()
        w.uint(2, 9 as UInt32)
        XCTAssertThrowsError(try ControlMessage.decode([0, 10] + w.bytes))
    }

    func testAudioConfigCarriesFractionalFramesAndValidates() throws {
        var a = AudioConfig()
        a.frameMicros = 2500
        XCTAssertEqual(a.frameSamples, 120)
        XCTAssertNil(a.validationError())
        a.frameMicros = 30000
        XCTAssertNotNil(a.validationError())
        XCTAssertEqual(AudioConfig.speech.frameSamples, 960)
        XCTAssertEqual(AudioConfig.music.channels, 2)
        // A peer that only sends frame_ms (no frame_us) still decodes.
        var w = ProtoWriter()
        w.uint(5, 40 as UInt32)
        var jw = ProtoWriter()
        jw.message(3, w.bytes)
        let m = try ControlMessage.decode([0, 11] + jw.bytes)
        guard case .streamAnnounceResult(let r) = m else { return XCTFail() }
        XCTAssertEqual(r.effectiveAudio.frameMicros, 40000)
    }
}

final class ReplayWindowTests: XCTestCase {
    func testInOrderReorderedDuplicateAndTooOld() {
        var w = ReplayWindow()
        XCTAssertEqual(w.accept(10), .fresh)
        XCTAssertEqual(w.accept(12), .fresh)
        XCTAssertEqual(w.accept(11), .fresh)    // reordered inside the window
        XCTAssertEqual(w.accept(11), .duplicate)
        XCTAssertEqual(w.accept(12), .duplicate)
        XCTAssertEqual(w.accept(2000), .fresh)
        XCTAssertEqual(w.accept(2000 - 1023), .fresh)    // oldest inside the window
        XCTAssertEqual(w.accept(2000 - 1024), .tooOld)
        XCTAssertEqual(w.accept(12), .tooOld)
        XCTAssertEqual(w.highestSeen, 2000)
    }

    func testSlotsAreClearedWhenTheWindowSlides() {
        var w = ReplayWindow()
        for s in UInt64(0)..<3000 { XCTAssertEqual(w.accept(s), .fresh) }
        // seq 3000+1024k shares a bit slot with seq 3000; it must be fresh.
        XCTAssertEqual(w.accept(4024), .fresh)
        XCTAssertEqual(w.accept(3001), .fresh, "slot of a skipped seq was not cleared")
        XCTAssertEqual(w.accept(3001), .duplicate)
    }

    func testSeqBeyond32BitsAndBeyond16Bits() {
        var w = ReplayWindow()
        let base: UInt64 = (1 << 32) - 2
        for s in base..<(base + 5) { XCTAssertEqual(w.accept(s), .fresh) }
        XCTAssertEqual(w.accept(base + 1), .duplicate)
        var w16 = ReplayWindow()
        for s in UInt64(65530)..<65540 { XCTAssertEqual(w16.accept(s), .fresh) }
        XCTAssertEqual(w16.accept(65535), .duplicate)
        XCTAssertEqual(w16.accept(UInt64.max - 1), .fresh)
        XCTAssertEqual(w16.accept(UInt64.max), .fresh)
    }
}
