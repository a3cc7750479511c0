// The server's config file.
import Glibc
import VoiceCatProtocol
import VoiceCatServerCore
import VoiceCatTestSupport
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
            max_stream_bitrate_factor = 4.5

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
        XCTAssertEqual(c.maxStreamBitrateFactor, 4.5)
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

    /// Port 0 means the default port, 47800, as it does for clients (vc_connect_params);
    /// a free port the kernel picks is asked for with `any`.
    func testPortZeroIsTheDefaultPortAndAnyPicksAFreeOne() throws {
        var c = ServerConfig()
        XCTAssertEqual(c.listenPort, ProtocolVersion.defaultPort)
        try c.apply(configText: "port = 0\n")
        XCTAssertEqual(c.listenPort, 47800)
        try c.apply(configText: "port = any\n")
        XCTAssertTrue(c.anyPort)
        XCTAssertEqual(c.listenPort, 0, "bind asks the kernel")
        try c.apply(configText: "port = 5000\n")
        XCTAssertEqual(c.listenPort, 5000)
        XCTAssertFalse(c.anyPort)
        c.anyPort = true
        c.identityPath = TestEnvironment.sharedIdentityPath
        let s = try Server(config: c)
        XCTAssertNotEqual(s.port, 0)
        XCTAssertNotEqual(s.port, 5000)
    }

    /// A `#` inside a value is part of it; a comment starts at a `#` after whitespace;
    /// a quoted value is taken as written. Every `#` started a comment:
    /// `password = open#sesame` set the password "open", and `password = #Zq9-secret`
    /// set none at all (helper-58's trial), without a word.
    func testAHashInsideAValueIsPartOfItAndAQuotedValueIsTakenAsWritten() throws {
        var c = ServerConfig()
        try c.apply(configText: """
            password = open#sesame
            admin_password = "#Zq9 secret#"   # quoted
            name = Team#1 # the first
            max_users = 12	# tab before the comment
            [channel Lobby]  # section comment
            """)
        XCTAssertEqual(c.password, "open#sesame")
        XCTAssertEqual(c.adminPassword, "#Zq9 secret#")
        XCTAssertEqual(c.serverName, "Team#1")
        XCTAssertEqual(c.maxUsers, 12)
        XCTAssertEqual(c.channels.map(\.name), ["Lobby"])
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
            ("[channel A]\nbogus = 1\n", 2, "unknown channel setting bogus"),
            ("[channel A]\nmax_users = 5\n", 2, "max_users is a server setting, not a channel one: server settings go before the first [channel]"),
            ("[channel A]\nmax_users = lots\n", 2, "server settings go before the first [channel]"),
            ("[channel A]\nframe_ms = 30\n", 2, "frame duration"),
            ("[channel A]\n[channel A]\n", 2, "defined twice"),
            ("max_users = -3\n", 1, "non-negative"),
            ("[room X]\n", 1, "unknown section"),
            ("just words\n", 1, "key = value"),
            ("[channel A]\nmode = surround\n", 2, "mono or stereo"),
            ("name = a\npassword = #Zq9-secret\n", 2, "password is empty"),
            ("admin_password =\n", 1, "admin_password is empty"),
            ("password = \"abc\n", 1, "unterminated quote"),
            ("password = \"abc\" def\n", 1, "after the quoted value"),
            ("max_users = 5\nmax_users = 6\n", 2, "max_users is given twice (first on line 1)"),
            ("[channel A]\nbitrate = 24000\nbitrate_bps = 32000\n", 3, "given twice (first on line 2 of this channel)"),
            ("[channel Room #1\n", 1, "unterminated section header"),
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

/// What helper-66 found an operator's editor can do to a config file.
final class ConfigFileTextTests: XCTestCase {
    func testCRLFLineEndsAndAByteOrderMarkAreRead() throws {
        // A CRLF file read as one line: the server started with a password nobody knew
        // ("secret\r\nmax_users = 5..."), the default channels, and no error.
        let text = "\u{FEFF}password = secret\r\nmax_users = 5\r\nname = CRLF server\r\n[channel A]\r\nbitrate = 24000\r\n"
        for (what, apply) in [("text", { (c: inout ServerConfig) in try c.apply(configText: text) }),
                              ("bytes", { (c: inout ServerConfig) in try c.apply(configBytes: Array(text.utf8)) })] {
            var c = ServerConfig()
            try apply(&c)
            XCTAssertEqual(c.password, "secret", what)
            XCTAssertEqual(c.maxUsers, 5, what)
            XCTAssertEqual(c.serverName, "CRLF server", what)
            XCTAssertEqual(c.channels.map(\.name), ["A"], what)
            XCTAssertEqual(c.channels.first?.audio.bitrate, 24000, what)
        }
    }

    func testALineThatIsNotUTF8IsRefusedNotReplaced() {
        // Decoded with replacement, every Latin-1 letter of a password read as U+FFFD.
        var bytes = Array("name = x\npassword = p".utf8)
        bytes += [0xE4] + Array("ss\n".utf8)
        var c = ServerConfig()
        XCTAssertThrowsError(try c.apply(configBytes: bytes)) { e in
            guard let pe = e as? ServerConfig.ParseError else { return XCTFail("\(e)") }
            XCTAssertEqual(pe.line, 2)
            XCTAssertTrue(pe.description.contains("not valid UTF-8"), pe.description)
        }
    }

    func testAChannelNameMayHoldAHashAndBeQuoted() throws {
        var c = ServerConfig()
        try c.apply(configText: "[channel Room #1]\nbitrate = 24000\n[channel \"  Spaced  \"]   # a comment\n[channel Plain] # note\n")
        XCTAssertEqual(c.channels.map(\.name), ["Room #1", "  Spaced  ", "Plain"])
    }
}

final class ConfigRangeTests: XCTestCase {
    func testValuesOutOfRangeAreRefusedWithAClearError() throws {
        let bad: [(String, (inout ServerConfig) -> Void, String)] = [
            ("reap_seconds", { $0.reapSeconds = 1e30 }, "reap_seconds: must be between 0.1 and 86400.0, got 1e+30"),
            ("reap_seconds", { $0.reapSeconds = .nan }, "reap_seconds: must be between"),
            ("frame_timeout_seconds", { $0.frameTimeoutSeconds = 0 }, "frame_timeout_seconds: must be between 0.1"),
            ("max_users", { $0.maxUsers = 0 }, "max_users: must be between 1 and 1000000, got 0"),
            ("max_datagram_bytes", { $0.maxDatagramBytes = 70_000 }, "max_datagram_bytes: must be between 64 and 8192"),
            ("max_packets_per_second", { $0.maxPacketsPerSecond = 0 }, "max_packets_per_second"),
            ("max_stream_bitrate_factor", { $0.maxStreamBitrateFactor = 1.2 }, "max_stream_bitrate_factor: must be between 1.5 and 1000.0, got 1.2"),
            ("control_messages_per_second", { $0.controlMessagesPerSecond = .infinity }, "control_messages_per_second"),
            ("auth_backoff_max_seconds", { $0.authBackoffBaseSeconds = 10; $0.authBackoffMaxSeconds = 1 }, "auth_backoff_max_seconds"),
            ("max_auth_failures", { $0.maxAuthFailures = 0 }, "max_auth_failures"),
            ("channels", { $0.channels = [] }, "number of channels"),
            ("channel name", { $0.channels = [ChannelConfig(name: String(repeating: "n", count: 65), audio: .speech)] }, "at most 64"),
            // Fewer packets than a stream's frames: honest audio dropped (helper-87: 10 per
            // second on 20 ms frames, 299 of 387 dropped, no word at start).
            ("max_packets_per_second", { $0.maxPacketsPerSecond = 10 },
             "channel Lobby: its 20.0 ms frames are 50 packets per second per stream, more than max_packets_per_second (10) lets through"),
            ("max_packets_per_second", { var a = AudioConfig.speech; a.frameMicros = 2500; $0.maxPacketsPerSecond = 399
                                          $0.channels = [ChannelConfig(name: "Fast", audio: a)] }, "400 packets per second"),
        ]
        for (what, tweak, words) in bad {
            var c = ServerConfig()
            c.anyPort = true
            tweak(&c)
            XCTAssertThrowsError(try c.validate(), what) { e in
                XCTAssertTrue("\(e)".contains(words), "\(what): \(e)")
            }
            // The server refuses to start with it (before touching the identity file or a port).
            XCTAssertThrowsError(try Server(config: c), what)
        }
        XCTAssertNoThrow(try ServerConfig().validate())
        var fast = AudioConfig.speech
        fast.frameMicros = 2500
        var exact = ServerConfig()
        exact.maxPacketsPerSecond = 400
        exact.channels = [ChannelConfig(name: "Fast", audio: fast)]
        XCTAssertNoThrow(try exact.validate())
    }

    /// `--password ""` (an unset shell variable) started an open server without a word,
    /// where `password =` in the config file is refused (helper-87).
    func testAnEmptyPasswordOnTheCommandLineIsRefused() throws {
        let binary = try XCTUnwrap(ChildProcess.siblingExecutable("voicecat-server"), "build voicecat-server first (swift build)")
        let dir = try ChildProcess.temporaryDirectory()
        defer { unlink(dir + "/out"); rmdir(dir) }
        for option in ["--password", "--admin-password"] {
            let p = try ChildProcess(binary, ["--port", "any", "--identity", dir + "/id.key", option, ""], outputPath: dir + "/out")
            XCTAssertEqual(p.wait(), 2, option)
            XCTAssertTrue(p.output.contains("\(option) is empty (leave the option out for none)"), p.output)
            XCTAssertEqual(access(dir + "/id.key", F_OK), -1, "nothing created before the check")
        }
    }

    func testConfigFileNumbersOutOfRangeAreParseErrorsNotCrashes() {
        for text in ["[channel A]\nbitrate = 99999999999\n", "[channel A]\nframe_ms = 1e300\n", "[channel A]\nframe_ms = nan\n"] {
            var c = ServerConfig()
            XCTAssertThrowsError(try c.apply(configText: text), text)
        }
    }

    func testTheBinaryExitsWithAClearMessageOnABadValue() throws {
        let binary = try XCTUnwrap(ChildProcess.siblingExecutable("voicecat-server"), "build voicecat-server first (swift build)")
        let dir = try ChildProcess.temporaryDirectory()
        defer { unlink(dir + "/out"); rmdir(dir) }
        let p = try ChildProcess(binary, ["--port", "any", "--identity", dir + "/id.key", "--reap-seconds", "1e30"], outputPath: dir + "/out")
        XCTAssertEqual(p.wait(), 2)
        XCTAssertTrue(p.output.contains("invalid setting reap_seconds: must be between 0.1 and 86400.0, got 1e+30"), p.output)
        XCTAssertEqual(access(dir + "/id.key", F_OK), -1, "nothing created before the check")
    }

    /// A port file that cannot be written stops the server with the reason (it was
    /// skipped without a word: with `--port any` the server ran on a port nobody
    /// could learn, and a script waiting for the file waited forever).
    func testAPortFileThatCannotBeWrittenIsAnError() throws {
        let binary = try XCTUnwrap(ChildProcess.siblingExecutable("voicecat-server"), "build voicecat-server first (swift build)")
        let dir = try ChildProcess.temporaryDirectory()
        defer { unlink(dir + "/out"); unlink(dir + "/id.key"); rmdir(dir) }
        let p = try ChildProcess(binary, ["--port", "any", "--identity", dir + "/id.key", "--port-file", dir + "/no/such/dir/port"],
                                 outputPath: dir + "/out")
        XCTAssertEqual(p.wait(), 2)
        XCTAssertTrue(p.output.contains("cannot write the port file \(dir)/no/such/dir/port: No such file or directory"), p.output)
        // Found before the identity file was created or the port taken (helper-66: the
        // identity was left behind).
        XCTAssertEqual(access(dir + "/id.key", F_OK), -1, "nothing created before the check")
        XCTAssertFalse(p.output.contains("created identity"), p.output)
    }
}
