// The server's side of "frames that fit" and of names: its datagram limit is told
// to clients, a channel that cannot fit is refused at load time, an oversize drop
// is told to its sender, and usernames are checked.
import Glibc
import VoiceCatProtocol
import VoiceCatServerCore
import VoiceCatSystem
import VoiceCatTestSupport
import XCTest

final class LimitsTests: XCTestCase {
    func hifi(_ limit: Int) -> (inout ServerConfig) -> Void {
        { c in
            var a = AudioConfig.music
            a.bitrate = 320_000
            a.frameMicros = 60_000
            c.channels = [ChannelConfig(name: "Hifi", audio: a)]
            c.maxDatagramBytes = limit
        }
    }

    func testAChannelWhoseFramesCannotFitIsRefusedAtLoadTime() throws {
        XCTAssertThrowsError(try TestServer(hifi(1400))) { e in
            let text = "\(e)"
            XCTAssertTrue(text.contains("Hifi") && text.contains("2436") && text.contains("max_datagram_bytes 1400"), text)
        }
        let s = try TestServer(hifi(2600))
        s.stop()
        var bad = ServerConfig()
        bad.channels = [ChannelConfig(name: "tab\there", audio: .speech)]
        XCTAssertNotNil(bad.validationError())
        var text = ServerConfig()
        XCTAssertThrowsError(try text.apply(configText: "[channel bell\u{07}]\n"))
    }

    func testHelloResultTellsTheLimitAndAnOversizeSenderIsTold() throws {
        let server = try TestServer { $0.maxDatagramBytes = 1200 }
        defer { server.stop() }
        let c = try TestClient.login(port: server.port, username: "big")
        XCTAssertEqual(c.hello.maxDatagramBytes, 1200)
        try c.bind()
        let big = [UInt8](repeating: 1, count: 1500)
        for _ in 0..<3 { _ = try big.withUnsafeBytes { try c.udp.sendTo($0, c.serverAddress) } }
        let m = try c.receive()
        guard case .error(let e) = m else { return XCTFail("expected Error, got \(m)") }
        XCTAssertEqual(e.code, ProtocolErrorCode.limitReached.rawValue)
        XCTAssertTrue(e.message.contains("1500") && e.message.contains("1200"), e.message)
        XCTAssertNotNil(server.poll { $0.dropOversize == 3 })
    }

    func testUsernamesWithControlCharactersAreRefused() throws {
        let server = try TestServer()
        defer { server.stop() }
        for bad in ["esc\u{1b}[2J", "del\u{7f}", "c1\u{9b}x", String(repeating: "a", count: 65)] {
            let c = try TestClient(port: server.port)
            c.send(.hello(Hello(username: bad, password: "", clientName: "t")))
            let m = try c.receive()
            guard case .error(let e) = m else { XCTFail("\(bad.debugDescription) accepted"); continue }
            XCTAssertEqual(e.code, ProtocolErrorCode.badRequest.rawValue)
        }
    }
}
