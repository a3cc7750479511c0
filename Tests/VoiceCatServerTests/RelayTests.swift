// End-to-end tests of voicecat-server over real loopback sockets.
import Glibc
import VoiceCatAllocCounter
import VoiceCatProtocol
import VoiceCatServerCore
import VoiceCatSystem
import VoiceCatTestSupport
import XCTest

final class RelayTests: XCTestCase {
    /// Two clients in Lobby, A with one announced MIC stream; both bound.
    func pair(_ ts: TestServer) throws -> (a: TestClient, b: TestClient, ssrc: UInt32) {
        let a = try TestClient.login(port: ts.port, username: "alex")
        let b = try TestClient.login(port: ts.port, username: "sam")
        _ = try a.join("Lobby")
        let jb = try b.join("Lobby")
        XCTAssertEqual(jb.members.map(\.username), ["alex"])
        let ann = try a.announce(streamID: 1)
        XCTAssertEqual(ann.effectiveAudio, AudioConfig.speech)
        let added = try b.expect("RemoteStreamAdded") { m -> RemoteStream? in
            if case .remoteStreamAdded(let r) = m { return r }
            return nil
        }
        XCTAssertEqual(added.ssrc, ann.ssrc)
        XCTAssertEqual(added.userID, a.hello.userID)
        try a.bind()
        try b.bind()
        return (a, b, ann.ssrc)
    }

    func randomOpus(_ n: Int) -> [UInt8] { Sodium.randomBytes(n) }

    func testRelayDeliversExactlyWhatTheTalkerSealed() throws {
        let ts = try TestServer()
        defer { ts.stop() }
        let (a, b, ssrc) = try pair(ts)
        for i in 0..<50 {
            let opus = randomOpus(20 + i)
            let flags: FrameFlags = i == 0 ? [.marker] : (i == 49 ? [.lastFrame] : [.fec])
            let sent = a.sealVoice(ssrc: ssrc, seq: UInt64(i), timestamp: UInt32(i * 960), opus: opus, flags: flags)
            a.sendDatagram(sent)
            let got = try XCTUnwrap(b.receiveVoice(), "frame \(i) not relayed")
            // The header is relayed unchanged, and so are the Opus bytes.
            XCTAssertEqual(got.header.bytes, Array(sent[0..<FrameHeader.size]))
            XCTAssertEqual(got.payload, opus)
        }
        let c = ts.waitFor("50 relayed") { $0.voiceRelayedOut == 50 }
        XCTAssertEqual(c.mediaDrops, 0)
        XCTAssertNil(a.receiveDatagram(timeoutMs: 100), "the talker must not hear itself")
    }

    func testFramesOfAStreamJustStoppedAreCountedAsEndedNotSpoofed() throws {
        let ts = try TestServer()
        defer { ts.stop() }
        let (a, b, ssrc) = try pair(ts)
        a.sendDatagram(a.sealVoice(ssrc: ssrc, seq: 0, timestamp: 0, opus: randomOpus(40)))
        XCTAssertNotNil(b.receiveVoice())
        // Alex stops the stream. On a network a frame sent just before the stop can
        // come after it; here one is sent once the server has removed the stream,
        // which the server sees the same way.
        a.send(.streamStop(StreamStop(streamID: 1)))
        _ = try b.expect("RemoteStreamRemoved") { m -> RemoteStreamRemoved? in
            if case .remoteStreamRemoved(let r) = m { return r }
            return nil
        }
        a.sendDatagram(a.sealVoice(ssrc: ssrc, seq: 1, timestamp: 960, opus: randomOpus(40)))
        ts.waitFor("ended-stream frame dropped") { $0.dropEndedStream == 1 }
        // The same ssrc under a key that is not Alex's, and another session naming it,
        // are spoofing as before.
        a.sendDatagram(a.sealVoice(ssrc: ssrc, seq: 2, timestamp: 1920, opus: randomOpus(30), key: SymmetricKey.random()))
        let mallory = try TestClient.login(port: ts.port, username: "mallory")
        _ = try mallory.join("Lobby")
        try mallory.bind()
        mallory.sendDatagram(mallory.sealVoice(ssrc: ssrc, seq: 3, timestamp: 2880, opus: randomOpus(30)))
        let c = ts.waitFor("spoofs dropped") { $0.dropSpoofedSSRC == 2 }
        XCTAssertEqual(c.dropEndedStream, 1)
        XCTAssertEqual(c.voiceRelayedIn, 1)
        XCTAssertNil(b.receiveDatagram(timeoutMs: 200), "a dropped frame was relayed")
    }

    /// A session with more streams than the four the ended-stream record used to hold
    /// (max_streams_per_user 8) moves to another channel: the frames still in flight of
    /// every stream it had are ended-stream drops, not spoofing (they were: 4 of 8).
    func testFramesOfEveryStreamEndedByAChannelMoveAreCountedAsEnded() throws {
        let ts = try TestServer { $0.maxStreamsPerUser = 8 }
        defer { ts.stop() }
        let a = try TestClient.login(port: ts.port, username: "alex")
        _ = try a.join("Lobby")
        var ssrcs: [UInt32] = []
        for id in 1...8 { ssrcs.append(try a.announce(streamID: UInt32(id)).ssrc) }
        try a.bind()
        _ = try a.join("Music")
        for (i, ssrc) in ssrcs.enumerated() {
            a.sendDatagram(a.sealVoice(ssrc: ssrc, seq: UInt64(i), timestamp: 0, opus: randomOpus(40)))
        }
        let c = ts.waitFor("8 frames of ended streams dropped") { $0.dropEndedStream + $0.dropSpoofedSSRC == 8 }
        XCTAssertEqual(c.dropEndedStream, 8)
        XCTAssertEqual(c.dropSpoofedSSRC, 0)
    }

    func testBadMediaIsDroppedAndCountedWhileHonestClientsKeepWorking() throws {
        let ts = try TestServer()
        defer { ts.stop() }
        let (a, b, ssrc) = try pair(ts)
        let mallory = try TestClient.login(port: ts.port, username: "mallory")
        _ = try mallory.join("Lobby")
        let mSSRC = try mallory.announce(streamID: 7).ssrc
        try mallory.bind()

        // 1. Spoofed ssrc: Mallory sends as Alex's stream, with her own valid keys.
        mallory.sendDatagram(mallory.sealVoice(ssrc: ssrc, seq: 0, timestamp: 0, opus: randomOpus(40)))
        ts.waitFor("spoof dropped") { $0.dropSpoofedSSRC == 1 }

        // 2. Replay: Alex's frame captured and sent again.
        let frame = a.sealVoice(ssrc: ssrc, seq: 5, timestamp: 4800, opus: randomOpus(30))
        a.sendDatagram(frame)
        XCTAssertNotNil(b.receiveVoice())
        a.sendDatagram(frame)
        ts.waitFor("replay dropped") { $0.dropReplay == 1 }

        // 3. Wrong key.
        a.sendDatagram(a.sealVoice(ssrc: ssrc, seq: 6, timestamp: 5760, opus: randomOpus(30), key: SymmetricKey.random()))
        ts.waitFor("wrong key dropped") { $0.dropAuthFailed == 1 }

        // 4. Truncated: half a header, and a header with a cut-off tag.
        a.sendDatagram(Array(frame[0..<10]))
        a.sendDatagram(Array(a.sealVoice(ssrc: ssrc, seq: 7, timestamp: 0, opus: randomOpus(30))[0..<30]))
        ts.waitFor("truncated dropped") { $0.dropMalformed == 1 && $0.dropAuthFailed == 2 }

        // 5. From an address no session is bound to.
        let stranger = try Socket.udp(familyOf: a.serverAddress)
        _ = try frame.withUnsafeBytes { try stranger.sendTo($0, a.serverAddress) }
        ts.waitFor("unbound dropped") { $0.dropUnbound == 1 }

        // None of those reached Sam; the honest frames still flow both ways.
        let honest = randomOpus(33)
        a.sendDatagram(a.sealVoice(ssrc: ssrc, seq: 8, timestamp: 7680, opus: honest))
        let got = try XCTUnwrap(b.receiveVoice())
        XCTAssertEqual(got.header.seq, 8)
        XCTAssertEqual(got.payload, honest)
        mallory.sendDatagram(mallory.sealVoice(ssrc: mSSRC, seq: 0, timestamp: 0, opus: honest))
        XCTAssertEqual(b.receiveVoice()?.header.ssrc, mSSRC)
        XCTAssertNil(b.receiveDatagram(timeoutMs: 200), "a dropped frame was relayed")
        let c = ts.waitFor("3 honest frames in") { $0.voiceRelayedIn == 3 }
        XCTAssertEqual(c.voiceRelayedIn, 3)
        XCTAssertEqual(c.dropSpoofedSSRC, 1)
        XCTAssertEqual(c.dropReplay, 1)
    }

    func testSeventyThousandFramesRelayWithoutAuthenticationFailure() throws {
        let ts = try TestServer { $0.maxPacketsPerSecond = 1_000_000; $0.maxStreamBitrateFactor = 1_000 }
        defer { ts.stop() }
        let (a, b, ssrc) = try pair(ts)
        let total = 70_000
        let batch = 100
        var received = 0
        var lastSeq: UInt64 = 0
        let opus = randomOpus(60)
        var seq = 0
        while seq < total {
            for _ in 0..<batch {
                a.sendDatagram(a.sealVoice(ssrc: ssrc, seq: UInt64(seq), timestamp: UInt32(truncatingIfNeeded: seq * 960), opus: opus))
                seq += 1
            }
            // Drain what arrived so no socket buffer overflows.
            while received < seq, let got = b.receiveVoice(timeoutMs: 1000) {
                XCTAssertEqual(got.header.seq, UInt64(received))
                lastSeq = got.header.seq
                received += 1
            }
        }
        XCTAssertEqual(received, total)
        XCTAssertEqual(lastSeq, UInt64(total - 1))
        let c = ts.waitFor("all relayed") { $0.voiceRelayedOut == UInt64(total) }
        XCTAssertEqual(c.dropAuthFailed, 0)
        XCTAssertEqual(c.voiceRelayedOut, UInt64(total))
    }

    func testKeepaliveIsEchoed() throws {
        let ts = try TestServer()
        defer { ts.stop() }
        let a = try TestClient.login(port: ts.port, username: "alex")
        try a.bind()
        let ka = FrameHeader(type: .keepalive, ssrc: a.hello.bindingID, seq: 1, timestamp: 123456)
        a.sendDatagram(ka.bytes)
        let echo = try XCTUnwrap(a.receiveDatagram())
        XCTAssertEqual(echo, ka.bytes)
        ts.waitFor("keepalive counted") { $0.keepalivesEchoed == 1 }
        // A keepalive naming another binding id is not echoed.
        a.sendDatagram(FrameHeader(type: .keepalive, ssrc: a.hello.bindingID &+ 1, seq: 2, timestamp: 0).bytes)
        XCTAssertNil(a.receiveDatagram(timeoutMs: 200))
        ts.waitFor("stray keepalive dropped") { $0.dropUnbound == 1 }
    }

    func testSilentSessionIsReapedButAKeepaliveDefersIt() throws {
        let ts = try TestServer { $0.reapSeconds = 0.6 }
        defer { ts.stop() }
        let quiet = try TestClient.login(port: ts.port, username: "quiet")
        let lively = try TestClient.login(port: ts.port, username: "lively")
        try lively.bind()
        let start = MonotonicClock.milliseconds()
        // Lively sends only UDP keepalives: media activity defers the reaper on its own.
        while MonotonicClock.milliseconds() - start < 1500 {
            lively.sendDatagram(FrameHeader(type: .keepalive, ssrc: lively.hello.bindingID, seq: 0, timestamp: 0).bytes)
            _ = lively.receiveDatagram(timeoutMs: 200)
        }
        XCTAssertTrue(quiet.waitForClose(timeoutMs: 1000), "silent session not reaped")
        ts.waitFor("one reaped") { $0.sessionsReaped == 1 }
        lively.send(.ping(Ping(timestamp: 42)))
        XCTAssertEqual(try lively.expect("Pong") { m -> UInt64? in if case .pong(let p) = m { return p.timestamp }; return nil }, 42)
    }

    /// What the reaper says of a session whose peer stopped reading: the bytes its
    /// kernel still holds for the peer, unacknowledged (SIOCOUTQ), and none once the
    /// peer has read them.
    func testUnacknowledgedBytesAreWhatThePeerHasNotTaken() throws {
        let listener = try Socket.listenTCP(SocketAddress(host: "127.0.0.1", port: 0))
        defer { listener.close() }
        listener.setReceiveBuffer(4096)   // inherited by the accepted socket: a peer that takes little
        let writer = try Socket.connectTCP(listener.localAddress(), timeoutMs: 2000)
        defer { writer.close() }
        var accepted: (Socket, SocketAddress)?
        for _ in 0..<200 where accepted == nil { accepted = try listener.accept(); if accepted == nil { sleepMilliseconds(5) } }
        let reader = try XCTUnwrap(accepted).0
        defer { reader.close() }
        XCTAssertEqual(writer.unacknowledgedBytes, 0, "nothing written yet")
        try writer.setNonBlocking()
        let chunk = [UInt8](repeating: 7, count: 16_384)
        var written = 0
        while let n = try chunk.withUnsafeBytes({ try writer.write($0) }), n > 0, written < 64 << 20 { written += n }
        sleepMilliseconds(50)
        let held = try XCTUnwrap(writer.unacknowledgedBytes)
        XCTAssertGreaterThan(held, 0, "the peer stopped reading: \(written) bytes written")
        XCTAssertLessThanOrEqual(held, written)
        // The reader takes everything: nothing is left unacknowledged.
        try reader.setNonBlocking()
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var read = 0
        let deadline = MonotonicClock.milliseconds() + 5000
        while read < written && MonotonicClock.milliseconds() < deadline {
            if let n = try buffer.withUnsafeMutableBytes({ try reader.read(into: $0) }), n > 0 { read += n } else { sleepMilliseconds(1) }
        }
        XCTAssertEqual(read, written)
        var left = writer.unacknowledgedBytes
        for _ in 0..<100 where left != 0 { sleepMilliseconds(10); left = writer.unacknowledgedBytes }
        XCTAssertEqual(left, 0, "all acknowledged once read")
    }

    func testRebindRetiresTheOldKeys() throws {
        let ts = try TestServer()
        defer { ts.stop() }
        let (a, b, ssrc) = try pair(ts)
        let oldKey = a.media.send
        try a.rebind(to: 1)
        XCTAssertNotEqual(a.media.send, oldKey)
        a.sendDatagram(a.sealVoice(ssrc: ssrc, seq: 0, timestamp: 0, opus: randomOpus(20), key: oldKey))
        ts.waitFor("old key refused") { $0.dropAuthFailed == 1 }
        XCTAssertNil(b.receiveDatagram(timeoutMs: 200))
        let opus = randomOpus(20)
        a.sendDatagram(a.sealVoice(ssrc: ssrc, seq: 1, timestamp: 960, opus: opus))
        XCTAssertEqual(b.receiveVoice()?.payload, opus)
        // A rebind must move forward.
        a.send(.rebind(Rebind(epoch: 1)))
        XCTAssertEqual(try a.expectError().code, ProtocolErrorCode.badRequest.rawValue)
    }

    func testMembershipAndStreamEventsAreBroadcast() throws {
        let ts = try TestServer()
        defer { ts.stop() }
        let a = try TestClient.login(port: ts.port, username: "alex")
        XCTAssertEqual(a.hello.channels.map(\.name), ["Lobby", "Music"])
        XCTAssertEqual(a.hello.channels[1].audio, AudioConfig.music)
        _ = try a.join("Lobby")
        let b = try TestClient.login(port: ts.port, username: "sam")
        _ = try b.join("Lobby")
        let joined = try a.expect("UserJoined") { m -> MemberInfo? in if case .userJoined(let u) = m { return u.member }; return nil }
        XCTAssertEqual(joined.username, "sam")
        let s1 = try b.announce(streamID: 1).ssrc
        let s2 = try b.announce(streamID: 2, kind: .screenAudio).ssrc
        XCTAssertNotEqual(s1, s2)
        let kinds = try (0..<2).map { _ in
            try a.expect("RemoteStreamAdded") { m -> StreamKind? in if case .remoteStreamAdded(let r) = m { return r.kind }; return nil }
        }
        XCTAssertEqual(kinds, [.mic, .screenAudio])
        b.send(.streamStop(StreamStop(streamID: 1)))
        let removed = try a.expect("RemoteStreamRemoved") { m -> UInt32? in if case .remoteStreamRemoved(let r) = m { return r.ssrc }; return nil }
        XCTAssertEqual(removed, s1)
        b.send(.streamStateUpdate(StreamStateUpdate(ssrc: s2, muted: true, hold: false)))
        let upd = try a.expect("StreamStateUpdate") { m -> Bool? in if case .streamStateUpdate(let u) = m, u.ssrc == s2 { return u.muted }; return nil }
        XCTAssertTrue(upd)
        b.close()
        let gone = try a.expect("RemoteStreamRemoved") { m -> UInt32? in if case .remoteStreamRemoved(let r) = m { return r.ssrc }; return nil }
        XCTAssertEqual(gone, s2)
        let left = try a.expect("UserLeft") { m -> UInt32? in if case .userLeft(let u) = m { return u.userID }; return nil }
        XCTAssertEqual(left, b.hello.userID)
        // ssrcs are never reused, even after the stream is gone.
        let s3 = try a.announce(streamID: 1).ssrc
        XCTAssertFalse([s1, s2].contains(s3))
    }

    func testLimitsAndRequestErrors() throws {
        let ts = try TestServer {
            $0.maxStreamsPerUser = 2; $0.maxUsers = 2; $0.maxDatagramBytes = 200
            $0.channels = [ChannelConfig(name: "Lobby", audio: .speech)]   // 116-byte frames fit 200
        }
        defer { ts.stop() }
        let a = try TestClient.login(port: ts.port, username: "alex")
        a.send(.streamAnnounce(StreamAnnounce(streamID: 1, kind: .mic, channels: 1, requestID: 99)))
        XCTAssertEqual(try a.expectError(requestID: 99).code, ProtocolErrorCode.wrongState.rawValue)
        a.send(.joinChannel(JoinChannel(name: "Nowhere", requestID: 5)))
        XCTAssertEqual(try a.expectError(requestID: 5).code, ProtocolErrorCode.notFound.rawValue)
        // A name no channel can have is refused without being echoed: a 65,500-byte one
        // made the "no channel named …" answer too large for a frame, and none came.
        for (rid, name) in [(50, String(repeating: "x", count: 65_500)), (51, ""), (52, "bell\u{7}")] as [(UInt32, String)] {
            a.send(.joinChannel(JoinChannel(name: name, requestID: rid)))
            let e = try a.expectError(requestID: rid)
            XCTAssertEqual(e.code, ProtocolErrorCode.badRequest.rawValue, e.message)
            XCTAssertLessThan(e.message.utf8.count, 200, e.message)
        }
        XCTAssertEqual(ts.counters.controlOversize, 0)
        _ = try a.join("Lobby")
        _ = try a.announce(streamID: 1)
        a.send(.streamAnnounce(StreamAnnounce(streamID: 1, kind: .mic, channels: 1, requestID: 6)))
        XCTAssertEqual(try a.expectError(requestID: 6).code, ProtocolErrorCode.badRequest.rawValue)
        a.send(.streamAnnounce(StreamAnnounce(streamID: 2, kind: .mic, channels: 3, requestID: 7)))
        XCTAssertEqual(try a.expectError(requestID: 7).code, ProtocolErrorCode.badRequest.rawValue)
        _ = try a.announce(streamID: 2)
        a.send(.streamAnnounce(StreamAnnounce(streamID: 3, kind: .mic, channels: 1, requestID: 8)))
        XCTAssertEqual(try a.expectError(requestID: 8).code, ProtocolErrorCode.limitReached.rawValue)

        // Usernames are unique; the server holds at most maxUsers.
        let dup = try TestClient(port: ts.port)
        dup.send(.hello(Hello(username: "alex")))
        XCTAssertEqual(try dup.expectError().code, ProtocolErrorCode.usernameTaken.rawValue)
        let sam = try TestClient.login(port: ts.port, username: "sam")
        defer { sam.close() }
        let third = try TestClient(port: ts.port)
        third.send(.hello(Hello(username: "kim")))
        XCTAssertEqual(try third.expectError().code, ProtocolErrorCode.serverFull.rawValue)

        // Oversized datagrams are dropped before any parsing.
        try a.bind()
        a.sendDatagram([UInt8](repeating: 1, count: 201))
        ts.waitFor("oversize dropped") { $0.dropOversize == 1 }
    }

    /// A client whose connection died without the server noticing logs in again under
    /// its name with the old session's resume token: the old session ends at once (its
    /// channel sees it leave) and the new one is made. A wrong token, a token of another
    /// session or none is refused the name, and the session holding it goes on.
    func testAReconnectNamingItsResumeTokenReplacesItsOldSession() throws {
        let ts = try TestServer()
        defer { ts.stop() }
        let alex = try TestClient.login(port: ts.port, username: "alex")
        defer { alex.close() }
        let sam = try TestClient.login(port: ts.port, username: "sam")
        defer { sam.close() }
        _ = try alex.join("Lobby")
        _ = try sam.join("Lobby")
        XCTAssertEqual(alex.hello.resumeToken.count, 16)
        XCTAssertNotEqual(alex.hello.resumeToken, sam.hello.resumeToken)
        var wrong = alex.hello.resumeToken
        wrong[0] ^= 1
        for (what, token) in [("none", [UInt8]()), ("a wrong one", wrong), ("sam's", sam.hello.resumeToken),
                              ("a prefix of alex's", Array(alex.hello.resumeToken.prefix(8)))] {
            let c = try TestClient(port: ts.port)
            c.send(.hello(Hello(username: "alex", resumeToken: token)))
            XCTAssertEqual(try c.expectError().code, ProtocolErrorCode.usernameTaken.rawValue, "token: \(what)")
            c.close()
        }
        XCTAssertEqual(ts.counters.sessionsResumed, 0)
        let again = try TestClient.login(port: ts.port, username: "alex", resumeToken: alex.hello.resumeToken)
        defer { again.close() }
        XCTAssertNotEqual(again.hello.userID, alex.hello.userID, "a new session")
        XCTAssertNotEqual(again.hello.resumeToken, alex.hello.resumeToken)
        XCTAssertTrue(alex.waitForClose(timeoutMs: 3000), "the old session's connection is closed")
        let left = try sam.expect("alex's old session leaving") { m -> UInt32? in
            if case .userLeft(let u) = m { return u.userID }
            if case .usersLeft(let u) = m, let id = u.userIDs.first { return id }
            return nil
        }
        XCTAssertEqual(left, alex.hello.userID)
        // (The counters are published at the end of the server's turn, after what it
        // sent in it: waited for, not read at once.)
        ts.waitFor("the resume counted, two sessions") { $0.sessionsResumed == 1 && $0.sessionsActive == 2 }
        _ = try again.join("Lobby")
    }

    func testPacketRateIsLimitedPerSSRC() throws {
        let ts = try TestServer { $0.maxPacketsPerSecond = 50 }
        defer { ts.stop() }
        let (a, _, ssrc) = try pair(ts)
        for i in 0..<200 { a.sendDatagram(a.sealVoice(ssrc: ssrc, seq: UInt64(i), timestamp: 0, opus: [1, 2, 3])) }
        let c = ts.waitFor("rate drops") { $0.voiceRelayedIn + $0.dropRateLimited == 200 }
        // One second of burst (50) plus what refilled while sending.
        XCTAssertLessThan(c.voiceRelayedIn, 120)
        XCTAssertGreaterThan(c.dropRateLimited, 80)
    }

    /// A sender cannot flood the channel's listeners with large frames within the packet
    /// rate: Lobby is 32 kbit/s at 20 ms, a nominal 5800 B/s with the headers; three times
    /// that with two seconds of burst lets about 34.8 KB through at once, 33 datagrams of
    /// 1036 bytes, where the packet rate alone (500/s) would pass all 200.
    func testByteRateIsLimitedPerSSRCAgainstTheChannelBitrate() throws {
        let ts = try TestServer { $0.maxStreamBitrateFactor = 3 }
        defer { ts.stop() }
        let (a, b, ssrc) = try pair(ts)
        // Frames of an honest size first: 100 of them at once pass whole.
        for i in 0..<100 { a.sendDatagram(a.sealVoice(ssrc: ssrc, seq: UInt64(i), timestamp: UInt32(i * 960), opus: randomOpus(120))) }
        var c = ts.waitFor("honest frames in") { $0.voiceRelayedIn + $0.dropBitrate == 100 }
        XCTAssertEqual(c.voiceRelayedIn, 100)
        XCTAssertEqual(c.dropBitrate, 0)
        for _ in 0..<100 { XCTAssertNotNil(b.receiveVoice()) }
        // Then the budget is spent: wait for it to refill (2 s), then flood.
        Thread.sleep(forTimeInterval: 2.1)
        let big = randomOpus(1000)
        for i in 100..<300 { a.sendDatagram(a.sealVoice(ssrc: ssrc, seq: UInt64(i), timestamp: UInt32(i * 960), opus: big)) }
        c = ts.waitFor("flood counted") { $0.voiceRelayedIn + $0.dropBitrate == 300 }
        XCTAssertEqual(c.dropRateLimited, 0)
        XCTAssertGreaterThanOrEqual(c.voiceRelayedIn - 100, 30)
        XCTAssertLessThan(c.voiceRelayedIn - 100, 45, "the byte budget let a flood through")
        XCTAssertGreaterThan(c.dropBitrate, 150)
        XCTAssertTrue(c.summary.contains("drop_bitrate=\(c.dropBitrate)"))
    }

    func testServerMuteIsEnforcedAndSignaled() throws {
        let ts = try TestServer { $0.adminPassword = "hunter2" }
        defer { ts.stop() }
        let (a, b, ssrc) = try pair(ts)
        b.send(.setServerMute(SetServerMute(userID: a.hello.userID, muted: true, deafened: false, adminPassword: "wrong", requestID: 3)))
        XCTAssertEqual(try b.expectError(requestID: 3).code, ProtocolErrorCode.forbidden.rawValue)
        b.send(.setServerMute(SetServerMute(userID: a.hello.userID, muted: true, deafened: false, adminPassword: "hunter2")))
        for c in [a, b] {
            let st = try c.expect("ServerMuteState") { m -> ServerMuteState? in if case .serverMuteState(let s) = m { return s }; return nil }
            XCTAssertEqual(st, ServerMuteState(userID: a.hello.userID, muted: true, deafened: false))
        }
        a.sendDatagram(a.sealVoice(ssrc: ssrc, seq: 0, timestamp: 0, opus: [9, 9]))
        ts.waitFor("muted frame dropped") { $0.dropServerMuted == 1 }
        XCTAssertNil(b.receiveDatagram(timeoutMs: 200))
        // Deafen Sam: Alex (unmuted) is no longer relayed to Sam.
        b.send(.setServerMute(SetServerMute(userID: a.hello.userID, muted: false, deafened: false, adminPassword: "hunter2")))
        b.send(.setServerMute(SetServerMute(userID: b.hello.userID, muted: false, deafened: true, adminPassword: "hunter2")))
        _ = try b.expect("deafened") { m -> Bool? in if case .serverMuteState(let s) = m, s.deafened { return true }; return nil }
        a.sendDatagram(a.sealVoice(ssrc: ssrc, seq: 1, timestamp: 960, opus: [9, 9]))
        ts.waitFor("relayed in") { $0.voiceRelayedIn == 1 }
        XCTAssertNil(b.receiveDatagram(timeoutMs: 200))
        XCTAssertEqual(ts.counters.voiceRelayedOut, 0)
    }
}

final class RelayAllocationTests: XCTestCase {
    /// The relay path (recvmmsg, open, replay window, a reseal per listener, sendmmsg)
    /// allocates nothing per packet: counted with the test binary's own malloc.
    func testRelayDoesNotAllocatePerPacket() throws {
        try XCTSkipIf(vc_alloc_counter_active() == 0, "the allocation counter is off under sanitizers")
        let ts = try TestServer { $0.maxPacketsPerSecond = 1_000_000; $0.maxStreamBitrateFactor = 1_000 }
        defer { ts.stop() }
        let talker = try TestClient.login(port: ts.port, username: "talker")
        _ = try talker.join("Lobby")
        let ssrc = try talker.announce(streamID: 1).ssrc
        try talker.bind()
        var listeners: [TestClient] = []
        for i in 0..<20 {
            let l = try TestClient.login(port: ts.port, username: "listener\(i)")
            _ = try l.join("Lobby")
            try l.bind()
            listeners.append(l)
        }
        // All frames sealed beforehand; sending them from this thread allocates nothing.
        let total = 10200
        let frames = (0..<total).map { talker.sealVoice(ssrc: ssrc, seq: UInt64($0), timestamp: UInt32($0 * 960), opus: Sodium.randomBytes(60)) }
        let flat = UnsafeMutableRawBufferPointer.allocate(byteCount: total * 256, alignment: 16)
        defer { flat.deallocate() }
        for (i, f) in frames.enumerated() { f.withUnsafeBytes { (flat.baseAddress! + i * 256).copyMemory(from: $0.baseAddress!, byteCount: f.count) } }
        let size = frames[0].count
        // Index loops only: in a debug build a for-in allocates an iterator frame.
        var i = 0
        var before: UInt64 = 0
        while i < total {
            if i == 200 { before = vc_alloc_count() }  // the first 200 warm up first-use runtime caches
            let end = i + 100
            while i < end {
                _ = try? talker.udp.sendTo(UnsafeRawBufferPointer(rebasing: flat[(i * 256)..<(i * 256 + size)]), talker.serverAddress)
                i += 1
            }
            while ts.server.countersSnapshot().voiceRelayedIn < UInt64(end) { sleepMilliseconds(1) }
        }
        let allocations = vc_alloc_count() - before
        let c = ts.counters
        XCTAssertEqual(c.voiceRelayedIn, UInt64(total))
        XCTAssertEqual(c.voiceRelayedOut, UInt64(total * 20))
        XCTAssertLessThan(allocations, 10, "\(allocations) allocations for \((total - 200) * 20) relayed datagrams")
    }
}
