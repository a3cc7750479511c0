// The server's config file.
import VoiceCatProtocol
import VoiceCatServerCore
import XCTest

final class ConfigTests: XCTestCase {
    func testSettingsAndChannelsAreRead() throws {
        var c = ServerConfig()
        try c.apply(configText: """
            # comment
            name = Team server
            password = opensesame   # trailing comment
            admin_password = s3cret
            max_users = 10
            reap_seconds = 12.5

            [channel Lobby]

            [channel Low latency]
            frame_ms = 2.5
            application = lowdelay
            sample_rate = 16000
            mode = stereo
            dtx = off
            dred = yes
            """)
        XCTAssertEqual(c.serverName, "Team server")
        XCTAssertEqual(c.password, "opensesame")
        XCTAssertEqual(c.adminPassword, "s3cret")
        XCTAssertEqual(c.maxUsers, 10)
        XCTAssertEqual(c.reapSeconds, 12.5)
        XCTAssertEqual(c.channels.map(\.name), ["Lobby", "Low latency"])
        XCTAssertEqual(c.channels[0].audio, .speech)
        let low = c.channels[1].audio
        XCTAssertEqual(low.frameMicros, 2500)
        XCTAssertEqual(low.application, .lowDelay)
        XCTAssertEqual(low.sampleRate, 16000)
        XCTAssertEqual(low.mode, .stereo)
        XCTAssertFalse(low.dtx)
        XCTAssertTrue(low.dred)
    }

    func testAFileWithoutChannelsKeepsTheDefaults() throws {
        var c = ServerConfig()
        try c.apply(configText: "name = x\n")
        XCTAssertEqual(c.channels, ServerConfig.defaultChannels)
        XCTAssertEqual(c.channels.map(\.name), ["Lobby", "Music"])
    }

    func testErrorsNameTheLine() {
        let bad: [(String, Int, String)] = [
            ("name = a\nbogus = 1\n", 2, "unknown setting"),
            ("[channel A]\nframe_ms = 30\n", 2, "frame duration"),
            ("[channel A]\n[channel A]\n", 2, "defined twice"),
            ("max_users = -3\n", 1, "non-negative"),
            ("[room X]\n", 1, "unknown section"),
            ("just words\n", 1, "key = value"),
            ("[channel A]\nmode = surround\n", 2, "mono or stereo"),
        ]
        for (text, line, words) in bad {
            var c = ServerConfig()
            XCTAssertThrowsError(try c.apply(configText: text), text) { e in
                guard let pe = e as? ServerConfig.ParseError else { return XCTFail("\(e)") }
                XCTAssertEqual(pe.line, line, text)
                XCTAssertTrue(pe.description.contains(words), "\(pe)")
            }
        }
    }
}
