// The client against lists longer than one control frame (a 1,500-channel server, a
// 1,000-member channel) and against joins and leaves the server tells in one message.
import VoiceCatClient
import VoiceCatProtocol
import VoiceCatServerCore
import VoiceCatSystem
import VoiceCatTestSupport
import XCTest

final class SplitListTests: XCTestCase {
    static func name64(_ prefix: String, _ i: Int) -> String {
        let p = "\(prefix)-\(i)-"
        return p + String(repeating: "x", count: 64 - p.utf8.count)
    }

    func testSplitChannelAndMemberListsAndCoalescedJoinsReachTheHost() throws {
        ResourceLimits.raiseOpenFiles(to: 8192)
        let channels = (0..<1500).map { SplitListTests.name64("room", $0) }
        let big = channels[1499]
        let server = try TestServer {
            $0.channels = [ChannelConfig(name: big, audio: .speech)]
            $0.maxUsers = 1100
        }
        defer { server.stop() }
        // 1,000 members with 64-byte names in one channel: about 72 KB of member list.
        var members: [WireClient] = []
        for i in 0..<1000 { members.append(try WireClient.login(port: server.port, username: SplitListTests.name64("m", i), openUDP: false)) }
        for m in members { m.send(.joinChannel(JoinChannel(name: big, requestID: 1))) }
        XCTAssertNotNil(server.poll(timeoutMs: 60_000) { $0.controlFramesIn >= 2000 }, "joins not handled")
        // Then 1,499 more channels (the members' channel, unchanged, stays as it is): about 145 KB of channel list.
        var cfg = server.server.config
        cfg.channels = channels.map { ChannelConfig(name: $0, audio: .speech) }
        try server.server.reload(cfg)
        XCTAssertNotNil(server.poll { $0.reloads == 1 })

        var clientConfig = ClientConfig()
        clientConfig.externalPlayback = true
        let c = try VoiceClient(config: clientConfig)
        defer { c.shutdown() }
        try c.connect(host: "127.0.0.1", port: server.port, username: "host", password: nil, pinnedFingerprint: nil, timeoutMs: 10_000)
        try c.joinChannel(big, timeoutMs: 10_000)
        func next(_ t: ClientEventType) throws -> ClientEvent {
            let deadline = MonotonicClock.milliseconds() + 10_000
            while MonotonicClock.milliseconds() < deadline {
                if let e = c.pollEvent(timeoutMs: 100), e.type == t { return e }
            }
            throw ClientError.timeout("no \(t) event")
        }
        // The channel's name came from the last part of the channel list.
        XCTAssertEqual(try next(.channelJoined).text, big)
        XCTAssertGreaterThan(server.counters.listPartsSent, 2)

        // The last member's name came from the last part of the member list.
        let last = members[999]
        let ssrc = try last.announce(streamID: 1).ssrc
        let added = try next(.remoteStreamAdded)
        XCTAssertEqual(added.ssrc, ssrc)
        XCTAssertEqual(added.text, SplitListTests.name64("m", 999))

        // Twenty join at once and then leave at once: an event for each.
        var more: [WireClient] = []
        for i in 0..<20 { more.append(try WireClient.login(port: server.port, username: "late\(i)", openUDP: false)) }
        for m in more { m.send(.joinChannel(JoinChannel(name: big, requestID: 1))) }
        var joined = Set<String>()
        while joined.count < 20 { joined.insert(try next(.userJoined).text) }
        XCTAssertEqual(joined, Set((0..<20).map { "late\($0)" }))
        for m in more { m.close() }
        var left = Set<String>()
        while left.count < 20 { left.insert(try next(.userLeft).text) }
        XCTAssertEqual(left, joined)
        for m in members { m.close() }
    }
}
