// Remote streams announced while every receive slot is in use wait for one, up to a
// bound: a server announcing streams without end costs the client no more than that.
@testable import VoiceCatClient
import VoiceCatProtocol
import XCTest

final class UnheardRemoteTests: XCTestCase {
    func testStreamsBeyondTheSlotsWaitUpToABoundAndTakeUpAFreedSlotInOrder() throws {
        var cfg = ClientConfig()
        cfg.externalPlayback = true
        cfg.knownServersPath = ""
        cfg.maxRemoteStreams = 1
        let c = try VoiceClient(config: cfg)
        defer { c.shutdown() }
        c.cond.withLock { c.usernames = [5: "talker"] }
        let bound = VoiceClient.maxUnheardRemotes
        for k in 0..<(bound + 50) {
            c.addRemote(RemoteStream(userID: 5, streamID: UInt32(k + 1), ssrc: UInt32(1000 + k), kind: .mic, audio: .speech))
        }
        XCTAssertEqual(c.receive.ssrcs, [1000])
        XCTAssertEqual(c.cond.withLock { c.unheardRemotes.count }, bound, "the waiting list is bounded")
        XCTAssertTrue(c.isUnheard(ssrc: 1001))
        XCTAssertFalse(c.isUnheard(ssrc: UInt32(1000 + bound + 1)), "beyond the bound: not kept")
        XCTAssertTrue(c.forgetUnheard(ssrc: 1001))
        c.removeRemote(ssrc: 1000)
        XCTAssertTrue(c.receive.ssrcs.isEmpty, "taken up before the host was told the slot freed")
        c.takeUpWaitingRemote()       // (the handler does, after REMOTE_STREAM_REMOVED)
        XCTAssertEqual(c.receive.ssrcs, [1002], "the oldest still waiting takes the freed slot")
        XCTAssertEqual(c.cond.withLock { c.unheardRemotes.count }, bound - 2)
    }
}
