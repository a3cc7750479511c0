// Reloading channels and limits while sessions stay: in process (Server.reload) and
// through SIGHUP to the real binary.
import Glibc
import VoiceCatProtocol
import VoiceCatServerCore
import VoiceCatSystem
import VoiceCatTestSupport
import XCTest

final class ReloadTests: XCTestCase {
    func ping(_ c: TestClient, _ t: UInt64) throws {
        c.send(.ping(Ping(timestamp: t)))
        _ = try c.expect("Pong") { m -> UInt64? in if case .pong(let p) = m, p.timestamp == t { return t }; return nil }
    }

    func testReloadChangesChannelsAndLimitsWithoutDroppingSessions() throws {
        let ts = try TestServer { $0.maxStreamsPerUser = 4 }
        defer { ts.stop() }
        let a = try TestClient.login(port: ts.port, username: "alex")
        let b = try TestClient.login(port: ts.port, username: "sam")
        let m = try TestClient.login(port: ts.port, username: "musician")
        _ = try a.join("Lobby")
        _ = try b.join("Lobby")
        _ = try m.join("Music")
        let ssrc = try a.announce(streamID: 1).ssrc
        try a.bind()
        try b.bind()

        var cfg = ts.server.config
        cfg.channels = [ChannelConfig(name: "Lobby", audio: .speech), ChannelConfig(name: "Quiet room", audio: .speech)]
        cfg.maxStreamsPerUser = 1
        // A bad configuration is refused as a whole.
        var bad = cfg
        bad.reapSeconds = -1
        XCTAssertThrowsError(try ts.server.reload(bad))
        try ts.server.reload(cfg)
        ts.waitFor("reloaded") { $0.reloads == 1 }

        // Sessions stay, and so does the relay.
        try ping(a, 1); try ping(b, 2); try ping(m, 3)
        let opus = Sodium.randomBytes(30)
        a.sendDatagram(a.sealVoice(ssrc: ssrc, seq: 0, timestamp: 0, opus: opus))
        XCTAssertEqual(b.receiveVoice()?.payload, opus)
        // The new limit applies: Alex has one stream already.
        a.send(.streamAnnounce(StreamAnnounce(streamID: 2, kind: .mic, channels: 1, requestID: 9)))
        XCTAssertEqual(try a.expectError(requestID: 9).code, ProtocolErrorCode.limitReached.rawValue)
        // A new login sees the new channel list; the removed channel cannot be joined any more,
        // but the member who was in it keeps its session.
        let c = try TestClient.login(port: ts.port, username: "newcomer")
        XCTAssertEqual(c.hello.channels.map(\.name), ["Lobby", "Quiet room"])
        XCTAssertEqual(c.hello.channels[0].id, a.hello.channels[0].id, "an unchanged channel keeps its id")
        c.send(.joinChannel(JoinChannel(name: "Music", requestID: 4)))
        XCTAssertEqual(try c.expectError(requestID: 4).code, ProtocolErrorCode.notFound.rawValue)
        XCTAssertEqual(try c.join("Quiet room").members.count, 0)
        XCTAssertEqual(try m.join("Lobby").members.map(\.username).sorted(), ["alex", "sam"])
        XCTAssertEqual(ts.counters.sessionsActive, 4)
    }

    func testSIGHUPReloadsTheConfigFile() throws {
        let binary = try XCTUnwrap(ChildProcess.siblingExecutable("voicecat-server"), "build voicecat-server first (swift build)")
        let dir = try ChildProcess.temporaryDirectory()
        let conf = dir + "/server.conf"
        defer { for f in ["server.conf", "id.key", "port", "out"] { unlink(dir + "/" + f) }; rmdir(dir) }
        func write(_ text: String) throws {
            unlink(conf)
            try Files.createExclusive(conf, bytes: Array(text.utf8), mode: 0o600)
        }
        try write("max_users = 2\n[channel Lobby]\n[channel Music]\nmode = stereo\n")
        let server = try ChildProcess(binary, ["--config", conf, "--port", "any", "--port-file", dir + "/port", "--identity", dir + "/id.key"],
                                      outputPath: dir + "/out")
        let port = try XCTUnwrap(server.waitForFile(dir + "/port", timeoutMs: 10_000).flatMap { UInt16($0) }, server.output)
        let a = try TestClient.login(port: port, username: "alex")
        let b = try TestClient.login(port: port, username: "sam")
        XCTAssertEqual(a.hello.channels.map(\.name), ["Lobby", "Music"])
        _ = try a.join("Lobby")
        _ = try b.join("Lobby")
        let ssrc = try a.announce(streamID: 1).ssrc
        try a.bind()
        try b.bind()
        let third = try TestClient(port: port)
        third.send(.hello(Hello(username: "kim")))
        XCTAssertEqual(try third.expectError().code, ProtocolErrorCode.serverFull.rawValue)

        try write("max_users = 3\n[channel Lobby]\n[channel Studio]\nbitrate = 64000\n")
        server.signal(SIGHUP)
        // The loop logs "reloaded: ..." once the new settings are in force. The main
        // thread logs "SIGHUP: configuration reloaded" once reload() has handed them to
        // the loop, in either order: each is waited for (the second was read just after
        // the first, before it was written, in one parallel run).
        XCTAssertTrue(server.waitForOutput("reloaded: 2 channels", timeoutMs: 10_000), server.output)
        XCTAssertTrue(server.waitForOutput("SIGHUP: configuration reloaded", timeoutMs: 10_000), server.output)

        // Both sessions are still there and still relayed; the new limit and channels apply.
        try ping(a, 7)
        try ping(b, 8)
        let opus = Sodium.randomBytes(40)
        a.sendDatagram(a.sealVoice(ssrc: ssrc, seq: 0, timestamp: 0, opus: opus))
        XCTAssertEqual(b.receiveVoice()?.payload, opus)
        let kim = try TestClient.login(port: port, username: "kim")
        XCTAssertEqual(kim.hello.channels.map(\.name), ["Lobby", "Studio"])
        XCTAssertEqual(kim.hello.channels[1].audio.bitrate, 64000)

        // A broken file is refused with a message; the server keeps running as it was.
        try write("max_users = 0\n")
        server.signal(SIGHUP)
        XCTAssertTrue(server.waitForOutput("configuration not reloaded: max_users", timeoutMs: 10_000), server.output)
        try ping(kim, 9)
        XCTAssertTrue(server.output.contains("added [\"Studio\"], removed [\"Music\"], replaced with new settings [])"), server.output)

        // A channel whose settings change is a new channel under the same name: the log
        // says so (it said "added [], removed []", and the operator could not tell that
        // the members were left in a retired channel).
        try write("max_users = 3\n[channel Lobby]\n[channel Studio]\nbitrate = 96000\n")
        server.signal(SIGHUP)
        XCTAssertTrue(server.waitForOutput("replaced with new settings [\"Studio\"]", timeoutMs: 10_000), server.output)

        server.signal(SIGTERM)
        XCTAssertEqual(server.wait(), 0)
    }
}
