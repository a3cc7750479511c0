// The server's side of loss feedback (issue #16): listeners' reports summed up per
// stream and told to its publisher, over real loopback sockets.
import VoiceCatProtocol
import VoiceCatServerCore
import VoiceCatTestSupport
import XCTest

final class LossFeedbackServerTests: XCTestCase {
    /// The next LossFeedback from `listeners` listeners (earlier ones are passed over:
    /// a slow turn may let one more through before the situation changes).
    func feedback(_ c: TestClient, listeners: UInt32, timeoutMs: Int = 3000) throws -> LossFeedback {
        try c.expect(timeoutMs: timeoutMs, "LossFeedback from \(listeners) listeners") { m -> LossFeedback? in
            if case .lossFeedback(let f) = m, f.listeners == listeners { return f }
            return nil
        }
    }

    /// Three sessions (alex, sam, kim) in the channels named, each with its media address
    /// bound (a listener without one receives nothing, and its reports are ignored).
    func members(_ ts: TestServer, _ a: String, _ b: String, _ c: String) throws -> (TestClient, TestClient, TestClient) {
        let clients = try zip(["alex", "sam", "kim"], [a, b, c]).map { name, channel in
            let cl = try TestClient.login(port: ts.port, username: name)
            _ = try cl.join(channel)
            try cl.bind()
            return cl
        }
        return (clients[0], clients[1], clients[2])
    }

    func report(_ c: TestClient, _ ssrc: UInt32, expected: UInt32, lost: UInt32, isolated: UInt32) {
        c.send(.receiverReport(ReceiverReport(reports: [ReceptionReport(ssrc: ssrc, counts: LossCounts(expected: expected, lost: lost,
                                                                                                        isolated: isolated))])))
    }

    func testThePublisherHearsTheWorseOfTwoListenersAndTheCleanOneOnceTheOtherLeaves() throws {
        let ts = try TestServer()
        defer { ts.stop() }
        let (pub, clean, lossy) = try members(ts, "Lobby", "Lobby", "Lobby")
        let ann = try pub.announce(streamID: 3)

        // The clean listener alone: the publisher is told what it loses (nothing).
        report(clean, ann.ssrc, expected: 250, lost: 0, isolated: 0)
        var f = try feedback(pub, listeners: 1)
        XCTAssertEqual(f.streamID, 3)
        XCTAssertEqual(f.ssrc, ann.ssrc)
        XCTAssertEqual(f.listeners, 1)
        XCTAssertEqual(f.counts, LossCounts(expected: 250, lost: 0, isolated: 0))

        // Two listeners, one losing 4 %: the 0.75 quantile of two is the worse.
        report(lossy, ann.ssrc, expected: 250, lost: 10, isolated: 8)
        usleep(1_100_000)   // feedback for a stream at most once a second
        report(clean, ann.ssrc, expected: 250, lost: 0, isolated: 0)
        f = try feedback(pub, listeners: 2)
        XCTAssertEqual(f.counts, LossCounts(expected: 250, lost: 10, isolated: 8))

        // The lossy listener leaves: its report no longer counts.
        lossy.close()
        ts.waitFor("kim gone") { $0.sessionsActive == 2 }
        usleep(1_100_000)
        report(clean, ann.ssrc, expected: 250, lost: 0, isolated: 0)
        f = try feedback(pub, listeners: 1)
        XCTAssertEqual(f.counts.lost, 0)
        let c = ts.waitFor("reports counted") { $0.lossReports == 4 }
        XCTAssertGreaterThanOrEqual(c.lossFeedbackSent, 3)
        XCTAssertEqual(c.lossReportsIgnored, 0)
    }

    func testReportsOnStreamsTheListenerDoesNotReceiveOrWithImpossibleCountsAreIgnored() throws {
        let ts = try TestServer()
        defer { ts.stop() }
        let (pub, other, stranger) = try members(ts, "Lobby", "Lobby", "Music")
        let ann = try pub.announce(streamID: 1)
        report(pub, ann.ssrc, expected: 250, lost: 50, isolated: 50)        // its own stream
        report(stranger, ann.ssrc, expected: 250, lost: 50, isolated: 50)   // another channel's
        report(other, 999_999, expected: 250, lost: 50, isolated: 50)       // no such ssrc
        report(other, ann.ssrc, expected: 10, lost: 11, isolated: 0)        // more lost than expected
        report(other, ann.ssrc, expected: 100, lost: 2, isolated: 3)        // more isolated than lost
        let c = ts.waitFor("all ignored") { $0.lossReportsIgnored == 5 }
        XCTAssertEqual(c.lossReports, 0)
        XCTAssertEqual(c.lossFeedbackSent, 0)
        // A report over too few frames is kept but says too little to tell the publisher.
        report(other, ann.ssrc, expected: 20, lost: 2, isolated: 2)
        ts.waitFor("taken") { $0.lossReports == 1 }
        XCTAssertEqual(ts.counters.lossFeedbackSent, 0)
        // The sessions go on.
        pub.send(.ping(Ping(timestamp: 5)))
        _ = try pub.expect("Pong") { m -> Bool? in if case .pong = m { return true }; return nil }
    }

    /// helper-66: a member that never bound a media address (nothing is relayed to it)
    /// had its made-up loss forwarded, turning the publisher's FEC on; and a report naming
    /// one stream 3,000 times counted 3,000 reports.
    func testReportsOfAListenerThatReceivesNothingAreIgnoredAndAStreamCountsOncePerReport() throws {
        let ts = try TestServer()
        defer { ts.stop() }
        let (pub, listener, _) = try members(ts, "Lobby", "Lobby", "Music")
        let ann = try pub.announce(streamID: 1)
        let unbound = try TestClient.login(port: ts.port, username: "ghost")
        _ = try unbound.join("Lobby")
        report(unbound, ann.ssrc, expected: 250, lost: 50, isolated: 50)
        ts.waitFor("ignored") { $0.lossReportsIgnored == 1 }
        XCTAssertEqual(ts.counters.lossReports, 0)

        let counts = LossCounts(expected: 250, lost: 5, isolated: 5)
        listener.send(.receiverReport(ReceiverReport(reports: Array(repeating: ReceptionReport(ssrc: ann.ssrc, counts: counts), count: 50))))
        let f = try feedback(pub, listeners: 1)
        XCTAssertEqual(f.counts, counts)
        let c = ts.waitFor("one taken, the repeats ignored") { $0.lossReports == 1 && $0.lossReportsIgnored == 50 }
        XCTAssertEqual(c.lossFeedbackSent, 1)
    }
}
