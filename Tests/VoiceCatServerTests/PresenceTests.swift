// The roster (presence) and the admin requests, on the wire: what a subscriber is told,
// in which order, how changes are coalesced and lists split, kicks and admin results.
import Glibc
import VoiceCatProtocol
import VoiceCatServerCore
import VoiceCatSystem
import VoiceCatTestSupport
import XCTest

final class PresenceTests: XCTestCase {
    /// Reads PresenceUpdates into `c.roster` until `done` holds; returns how many came.
    @discardableResult
    func follow(_ c: TestClient, timeoutMs: Int = 10_000, until done: (TestClient) -> Bool) throws -> Int {
        var n = 0
        let deadline = MonotonicClock.milliseconds() + UInt64(timeoutMs)
        while !done(c) {
            let left = Int(Int64(deadline) - Int64(MonotonicClock.milliseconds()))
            guard left > 0 else { throw TestFailure("roster never reached the expected state: \(c.roster.values.map(\.username).sorted())") }
            if case .presenceUpdate(let u) = try c.receive(timeoutMs: left) {
                c.apply(u)
                n += 1
            }
        }
        return n
    }

    func testRosterAtLoginThenEveryChangeInOrder() throws {
        let ts = try TestServer()
        defer { ts.stop() }
        let b = try TestClient.login(port: ts.port, username: "bo")
        _ = try b.join("Music")
        let s1 = try b.announce(streamID: 1, kind: .screenAudio).ssrc

        // The roster at login holds everyone, the observer itself included.
        let a = try TestClient.login(port: ts.port, username: "ann", presence: true)
        XCTAssertTrue(a.hello.presence)
        let music = a.hello.channels.first { $0.name == "Music" }!.id
        XCTAssertEqual(a.roster[b.hello.userID], UserPresence(userID: b.hello.userID, username: "bo", channelID: music,
                                                              streams: [StreamPresence(streamID: 1, ssrc: s1, kind: .screenAudio)]))
        XCTAssertEqual(a.roster[a.hello.userID]?.username, "ann")
        XCTAssertEqual(a.roster.count, 2)

        // A join is told to the joiner before its reply (the lists agree with the reply).
        let lobby = a.hello.channels.first { $0.name == "Lobby" }!.id
        a.send(.joinChannel(JoinChannel(name: "Lobby", requestID: 7)))
        guard case .presenceUpdate(let own) = try a.receive() else { return XCTFail("the roster change must come first") }
        XCTAssertEqual(own.users.map(\.channelID), [lobby])
        guard case .joinChannelResult = try a.receive() else { return XCTFail("then the reply") }

        // Others' changes: a stream state, a stop, a move, a logout.
        b.send(.streamStateUpdate(StreamStateUpdate(ssrc: s1, muted: true, hold: true)))
        try follow(a) { $0.roster[b.hello.userID]?.streams.first?.muted == true }
        XCTAssertEqual(a.roster[b.hello.userID]?.streams.first?.hold, true)
        b.send(.streamStop(StreamStop(streamID: 1)))
        try follow(a) { $0.roster[b.hello.userID]?.streams.isEmpty == true }
        _ = try b.join("Lobby")
        try follow(a) { $0.roster[b.hello.userID]?.channelID == lobby }
        b.close()
        try follow(a) { $0.roster[b.hello.userID] == nil }
        XCTAssertEqual(Array(a.roster.keys), [a.hello.userID])

        // A client that did not ask gets none of it.
        let quiet = try TestClient.login(port: ts.port, username: "quiet")
        XCTAssertFalse(quiet.hello.presence)
        _ = try quiet.join("Music")
        quiet.send(.ping(Ping(timestamp: 1)))
        while true {
            let m = try quiet.receive()
            XCTAssertNotEqual(m.type, .presenceUpdate)
            XCTAssertNotEqual(m.type, .userList)
            if m.type == .pong { break }
        }
    }

    func testABurstOfChangesIsCoalesced() throws {
        let ts = try TestServer { $0.maxUsers = 200 }
        defer { ts.stop() }
        let watcher = try TestClient.login(port: ts.port, username: "watcher", openUDP: false, presence: true)
        // 80 logins and 80 joins, as fast as the test sends them: 160 changes.
        var users: [TestClient] = []
        for i in 0..<80 { users.append(try TestClient.login(port: ts.port, username: "u\(i)", openUDP: false)) }
        for u in users { u.send(.joinChannel(JoinChannel(name: "Lobby", requestID: 1))) }
        let lobby = watcher.hello.channels[0].id
        let messages = try follow(watcher) { w in
            w.roster.count == 81 && users.allSatisfy { w.roster[$0.hello.userID]?.channelID == lobby }
        }
        // Each message carries several changes (one per 0.1 s at most, or a full frame):
        // far fewer messages than changes.
        XCTAssertLessThan(messages, 80, "160 changes came in \(messages) messages")
        XCTAssertEqual(ts.poll { $0.presenceUpdatesSent >= UInt64(messages) }?.presenceUpdatesSent, UInt64(messages))
        for u in users { u.close() }
    }

    /// With a budget of one byte a turn, a pass tells one subscriber per turn: a pass spans
    /// many turns, changes keep coming during it, and still every subscriber ends up with
    /// every change exactly as the server has it.
    func testAPassOverManySubscribersSpreadOverTurnsLosesNothing() throws {
        let ts = try TestServer { $0.maxUsers = 100; $0.presenceBytesPerTurn = 1 }
        defer { ts.stop() }
        var watchers: [TestClient] = []
        for i in 0..<30 { watchers.append(try TestClient.login(port: ts.port, username: "w\(i)", openUDP: false, presence: true)) }
        let mover = try TestClient.login(port: ts.port, username: "mover", openUDP: false)
        let channels = watchers[0].hello.channels.map(\.id)
        for k in 0..<20 {
            mover.send(.joinChannel(JoinChannel(name: k % 2 == 0 ? "Lobby" : "Music", requestID: UInt32(k + 1))))
        }
        for k in 0..<20 {
            _ = try mover.expect("JoinChannelResult \(k + 1)") { m -> Bool? in
                if case .joinChannelResult(let r) = m, r.requestID == UInt32(k + 1) { return true }
                return nil
            }
        }
        let ssrc = try mover.announce(streamID: 1).ssrc   // the last change: only reached at the end
        let last = mover.hello.userID
        for w in watchers {
            try follow(w) { $0.roster[last]?.streams.map(\.ssrc) == [ssrc] }
            XCTAssertEqual(w.roster[last]?.channelID, channels[1])
            XCTAssertEqual(w.roster.count, 31)
        }
        // Later changes still reach everyone (nothing is stuck behind an unfinished pass).
        mover.close()
        for w in watchers { try follow(w) { $0.roster[last] == nil } }
        for w in watchers { w.close() }
    }

    func testALongRosterIsSplitAtTheFrameLimit() throws {
        ResourceLimits.raiseOpenFiles(to: 8192)
        let total = 1200
        let ts = try TestServer { $0.maxUsers = total + 10 }
        defer { ts.stop() }
        // 64-byte names: 1,200 records of ~70 bytes do not fit one 64 KiB frame.
        let names = (0..<total).map { i -> String in
            let p = "member-\(i)-"
            return p + String(repeating: "x", count: 64 - p.utf8.count)
        }
        var users: [TestClient] = []
        for n in names { users.append(try TestClient.login(port: ts.port, username: n, openUDP: false)) }
        let a = try TestClient.login(port: ts.port, username: "observer", timeoutMs: 20_000, openUDP: false, presence: true)
        XCTAssertGreaterThan(a.rosterParts, 1)
        XCTAssertEqual(a.roster.count, total + 1)
        XCTAssertEqual(Set(a.roster.values.map(\.username)), Set(names + ["observer"]))
        XCTAssertEqual(ts.counters.controlOversize, 0)
        for u in users { u.close() }
    }

    func testKickClosesTheSessionAndTellsEveryone() throws {
        let ts = try TestServer { $0.adminPassword = "hunter2" }
        defer { ts.stop() }
        let admin = try TestClient.login(port: ts.port, username: "admin", presence: true)
        let target = try TestClient.login(port: ts.port, username: "troll")
        let peer = try TestClient.login(port: ts.port, username: "peer")
        _ = try target.join("Lobby")
        _ = try peer.join("Lobby")
        try follow(admin) { $0.roster.count == 3 }

        admin.send(.kickUser(KickUser(userID: target.hello.userID, adminPassword: "nope", requestID: 4)))
        XCTAssertEqual(try admin.expectError(requestID: 4).code, ProtocolErrorCode.forbidden.rawValue)
        admin.send(.kickUser(KickUser(userID: admin.hello.userID, adminPassword: "hunter2", requestID: 5)))
        XCTAssertEqual(try admin.expectError(requestID: 5, timeoutMs: 5000).code, ProtocolErrorCode.badRequest.rawValue)
        admin.send(.kickUser(KickUser(userID: 999, adminPassword: "hunter2", requestID: 6)))
        XCTAssertEqual(try admin.expectError(requestID: 6).code, ProtocolErrorCode.notFound.rawValue)

        admin.send(.kickUser(KickUser(userID: target.hello.userID, adminPassword: "hunter2", reason: "spam", requestID: 8)))
        let told = try target.expectError()
        XCTAssertEqual(told.code, ProtocolErrorCode.kicked.rawValue)
        XCTAssertEqual(told.message, "kicked by admin: spam")
        XCTAssertTrue(target.waitForClose(timeoutMs: 3000))
        // The admin hears of the departure before the result.
        var gone = false
        while true {
            let m = try admin.receive()
            if case .presenceUpdate(let u) = m { admin.apply(u); gone = gone || u.users.contains { $0.gone && $0.userID == target.hello.userID } }
            if case .adminResult(let r) = m {
                XCTAssertEqual(r, AdminResult(requestID: 8, userID: target.hello.userID))
                break
            }
        }
        XCTAssertTrue(gone)
        let left = try peer.expect("UserLeft") { m -> UInt32? in if case .userLeft(let u) = m { return u.userID }; return nil }
        XCTAssertEqual(left, target.hello.userID)
        // The counters are published at the end of the server's loop turn.
        XCTAssertEqual(ts.poll { $0.kicks >= 1 }?.kicks, 1)
    }

    func testServerMuteIsAnsweredAndInTheRoster() throws {
        let ts = try TestServer { $0.adminPassword = "hunter2" }
        defer { ts.stop() }
        let admin = try TestClient.login(port: ts.port, username: "admin", presence: true)
        let other = try TestClient.login(port: ts.port, username: "other")
        _ = try other.join("Music")
        admin.send(.setServerMute(SetServerMute(userID: other.hello.userID, muted: true, deafened: true, adminPassword: "hunter2",
                                                requestID: 3)))
        var result: AdminResult? = nil
        while result == nil {
            switch try admin.receive() {
            case .presenceUpdate(let u): admin.apply(u)
            case .adminResult(let r): result = r
            default: break
            }
        }
        XCTAssertEqual(result, AdminResult(requestID: 3, userID: other.hello.userID))
        XCTAssertEqual(admin.roster[other.hello.userID]?.muted, true, "the roster change precedes the result")
        XCTAssertEqual(admin.roster[other.hello.userID]?.deafened, true)
    }

    func testStreamStateIsToldToLaterJoiners() throws {
        let ts = try TestServer()
        defer { ts.stop() }
        let a = try TestClient.login(port: ts.port, username: "a")
        _ = try a.join("Lobby")
        let ssrc = try a.announce(streamID: 1).ssrc
        a.send(.streamStateUpdate(StreamStateUpdate(ssrc: ssrc, muted: false, hold: true)))
        a.send(.ping(Ping(timestamp: 1)))
        _ = try a.expect("Pong") { m -> Bool? in m.type == .pong ? true : nil }
        let b = try TestClient.login(port: ts.port, username: "b")
        _ = try b.join("Lobby")
        XCTAssertEqual(try b.receive().type, .remoteStreamAdded)
        guard case .streamStateUpdate(let u) = try b.receive() else { return XCTFail("the stream's state follows its announcement") }
        XCTAssertEqual(u, StreamStateUpdate(ssrc: ssrc, muted: false, hold: true))
    }

    func testReloadTellsTheChannelChanges() throws {
        let ts = try TestServer()
        defer { ts.stop() }
        let a = try TestClient.login(port: ts.port, username: "a", presence: true)
        let lobby = a.hello.channels[0].id, music = a.hello.channels[1].id
        var cfg = ts.server.config
        cfg.channels = [ChannelConfig(name: "Lobby", audio: .speech), ChannelConfig(name: "Quiet", audio: .speech)]
        try ts.server.reload(cfg)
        let u = try a.expect(timeoutMs: 5000, "PresenceUpdate") { m -> PresenceUpdate? in
            if case .presenceUpdate(let u) = m, !u.channels.isEmpty { return u }
            return nil
        }
        XCTAssertEqual(u.channels.map(\.name), ["Quiet"])
        XCTAssertFalse([lobby, music].contains(u.channels[0].id))
        XCTAssertEqual(u.removedChannelIDs, [music])
    }
}
