// Loss-adaptive FEC end to end (issue #16): real clients, the real server, real Opus,
// one listener behind the seeded impairment proxy. The publisher's protection follows
// its listeners: off on a clean path, on when a lossy listener joins, off again when
// it leaves; the lossy listener rebuilds lost frames from the FEC it is sent.
import Foundation
import Synchronization
import VoiceCatAudio
import VoiceCatClient
import VoiceCatProtocol
import VoiceCatSystem
import VoiceCatTestSupport
import XCTest

final class AdaptiveFECTests: XCTestCase {
    /// Polls `cond` every 50 ms until it holds or `timeoutMs` passes (generous: a shared machine).
    @discardableResult
    func wait(_ what: String, timeoutMs: UInt64 = 20_000, _ cond: () throws -> Bool) rethrows -> Bool {
        let deadline = MonotonicClock.milliseconds() + timeoutMs
        while MonotonicClock.milliseconds() < deadline {
            if try cond() { return true }
            usleep(50_000)
        }
        XCTFail("\(what): not within \(timeoutMs) ms")
        return false
    }

    /// Feeds speech-like audio to `client`'s stream `sid` in real time, a 20 ms frame
    /// every 20 ms, on a thread of its own until the returned function is called.
    func talk(_ client: VoiceClient, streamID sid: UInt32) -> () -> Void {
        let stop = Atomic<Bool>(false)
        let feeder = Thread {
            let voice = Signal.glidingVoice(seconds: 10)
            let start = MonotonicClock.nanoseconds()
            var k: UInt64 = 0
            while !stop.load(ordering: .relaxed) {
                let at = Int(k % UInt64(voice.count / 960)) * 960
                _ = try? voice.withUnsafeBufferPointer { try client.feed(streamID: sid, pcm: $0.baseAddress! + at, frames: 960, channels: 1) }
                k += 1
                let due = start + k * 20_000_000
                let now = MonotonicClock.nanoseconds()
                if due > now { usleep(UInt32((due - now) / 1000)) }
            }
        }
        feeder.start()
        return { stop.store(true, ordering: .relaxed); usleep(50_000) }
    }

    func testALossyListenerRaisesThePublishersProtectionAndItFallsBackWhenItLeaves() throws {
        let server = try TestServer()
        defer { server.stop() }
        var lossy = Impairment()
        lossy.baseDelayMs = 5
        lossy.lossGood = 0.05          // 5 % of datagrams to the listener lost, nearly all alone
        let proxy = try ImpairmentProxy(targetPort: server.port, downstream: lossy, seed: 16)
        defer { proxy.stop() }
        var cfg = ClientConfig()
        cfg.externalPlayback = true
        let alex = try VoiceClient(config: cfg), sam = try VoiceClient(config: cfg), kim = try VoiceClient(config: cfg)
        defer { alex.shutdown(); sam.shutdown(); kim.shutdown() }
        let pin: String? = nil   // the tests' known-servers file (their own XDG_CONFIG_HOME)
        try alex.connect(host: "127.0.0.1", port: server.port, username: "alex", password: nil, pinnedFingerprint: pin, timeoutMs: 3000)
        try sam.connect(host: "127.0.0.1", port: server.port, username: "sam", password: nil, pinnedFingerprint: pin, timeoutMs: 3000)
        try alex.joinChannel("Lobby")
        try sam.joinChannel("Lobby")
        XCTAssertEqual(alex.currentChannelAudio?.fec, true)
        XCTAssertEqual(alex.currentChannelAudio?.expectedPacketLoss, 10)

        let changes = NSMutableArray()
        try alex.setEventHandler { e in
            if e.type == .protectionChanged { changes.add("\(e.streamID) \(e.text)") }
        }
        alex.setInputMode(.continuous)
        let sid = try alex.startStream(kind: .mic, externalFeed: true, channels: 1)
        let ssrc = try XCTUnwrap(alex.ssrc(ofStream: sid))
        var st = try alex.sendStats(streamID: sid)
        XCTAssertEqual(st.protection, FECPolicy.Protection(fec: true, lossPercent: 10), "a stream starts at the channel's setting")
        XCTAssertEqual(st.ceiling, st.protection)

        // Alex talks in real time for the whole test; both listeners render what they get.
        let stopFeeding = talk(alex, streamID: sid)
        defer { stopFeeding() }
        try sam.waitForRemote(ssrc: ssrc)
        try sam.setSink { _, _ in }

        // 1. One clean listener: FEC goes off within a few reports.
        wait("FEC off with a clean listener") { (try? alex.sendStats(streamID: sid))?.protection.fec == false }
        st = try alex.sendStats(streamID: sid)
        print("clean listener: \(st.protection), \(st.feedbacks) feedbacks, last from \(st.listeners) listener(s): \(st.reported)")
        XCTAssertEqual(st.listeners, 1)
        XCTAssertEqual(st.reported.lost, 0)
        // The frame encoded when FEC was switched off still carries the redundancy of the
        // one before it (SILK writes a frame's LBRR into the next packet), and a frame may
        // be in flight between the encoder and the stats: count from a little later.
        usleep(100_000)
        let fecBefore = try alex.sendStats(streamID: sid).fecPackets
        usleep(500_000)
        XCTAssertEqual(try alex.sendStats(streamID: sid).fecPackets, fecBefore, "with FEC off no packet is flagged FEC")

        // 2. A second listener behind 5 % loss: the 0.75 quantile of two is the lossy one.
        try kim.connect(host: "127.0.0.1", port: proxy.port, username: "kim", password: nil, pinnedFingerprint: pin, timeoutMs: 3000)
        try kim.joinChannel("Lobby")
        try kim.waitForRemote(ssrc: ssrc)
        try kim.setSink { _, _ in }
        wait("FEC on for the lossy listener") { (try? alex.sendStats(streamID: sid))?.protection.fec == true }
        st = try alex.sendStats(streamID: sid)
        print("lossy listener joined: \(st.protection), last feedback from \(st.listeners) listeners: \(st.reported)")
        XCTAssertEqual(st.listeners, 2)
        XCTAssertGreaterThan(st.reported.isolated, 0)
        XCTAssertGreaterThanOrEqual(st.protection.lossPercent, 1)
        XCTAssertLessThanOrEqual(st.protection.lossPercent, 10)
        // The packets now carry FEC, and the lossy listener rebuilds lost frames from it.
        wait("kim rebuilds lost frames from FEC") { (try? kim.streamStats(ssrc: ssrc))?.jitter.fecRecovered ?? 0 >= 5 }
        let k = try kim.streamStats(ssrc: ssrc).jitter
        print("kim: received \(k.packetsReceived), lost \(k.packetsLost), rebuilt from FEC \(k.fecRecovered), concealed \(k.plcFrames)")
        XCTAssertGreaterThan(try alex.sendStats(streamID: sid).fecPackets, fecBefore)
        XCTAssertEqual(try sam.streamStats(ssrc: ssrc).jitter.packetsLost, 0, "the clean listener loses nothing")

        // 3. The lossy listener leaves: protection falls back.
        try kim.disconnect()
        wait("FEC off again once the lossy listener left") { (try? alex.sendStats(streamID: sid))?.protection.fec == false }
        st = try alex.sendStats(streamID: sid)
        print("lossy listener left: \(st.protection), last feedback from \(st.listeners) listener(s); changes: \(changes)")
        XCTAssertEqual(st.listeners, 1)
        XCTAssertGreaterThanOrEqual(st.changes, 3)
        // Each change was told to the host.
        wait("events delivered") { changes.count >= 3 }
        let texts = changes.compactMap { $0 as? String }
        XCTAssertTrue(texts.first?.hasPrefix("\(sid) FEC off") == true, "\(texts)")
        XCTAssertTrue(texts.contains { $0.hasPrefix("\(sid) FEC on") }, "\(texts)")
        XCTAssertTrue(texts.last?.hasPrefix("\(sid) FEC off") == true, "\(texts)")
    }
    /// A listener's media path cut for 3 s (the trial's UDP outage) loses every frame of
    /// the cut, but no protection rebuilds an outage: the publisher's encoder must not
    /// be told "listeners lose 88 %" once the path is back (before: PROTECTION_CHANGED
    /// to the ceiling for the few seconds the reports' window held the outage).
    func testAnOutageOfTheListenersPathDoesNotRaiseThePublishersProtection() throws {
        let server = try TestServer()
        defer { server.stop() }
        var clean = Impairment()
        clean.baseDelayMs = 5
        let proxy = try ImpairmentProxy(targetPort: server.port, downstream: clean, seed: 17)
        defer { proxy.stop() }
        var cfg = ClientConfig()
        cfg.externalPlayback = true
        let alex = try VoiceClient(config: cfg), kim = try VoiceClient(config: cfg)
        defer { alex.shutdown(); kim.shutdown() }
        try alex.connect(host: "127.0.0.1", port: server.port, username: "alex", password: nil, pinnedFingerprint: nil, timeoutMs: 3000)
        try kim.connect(host: "127.0.0.1", port: proxy.port, username: "kim", password: nil, pinnedFingerprint: nil, timeoutMs: 3000)
        try alex.joinChannel("Lobby")
        try kim.joinChannel("Lobby")
        let changes = NSMutableArray()
        try alex.setEventHandler { e in
            if e.type == .protectionChanged { changes.add("\(MonotonicClock.milliseconds()) \(e.text)") }
        }
        alex.setInputMode(.continuous)
        let sid = try alex.startStream(kind: .mic, externalFeed: true, channels: 1)
        let ssrc = try XCTUnwrap(alex.ssrc(ofStream: sid))
        let stopFeeding = talk(alex, streamID: sid)
        defer { stopFeeding() }
        try kim.waitForRemote(ssrc: ssrc)
        try kim.setSink { _, _ in }
        wait("FEC off with a clean listener") { (try? alex.sendStats(streamID: sid))?.protection == FECPolicy.Protection(fec: false, lossPercent: 0) }
        let before = try alex.sendStats(streamID: sid)

        var cut = Impairment()
        cut.lossGood = 1
        proxy.setImpairment(upstream: cut, downstream: cut)
        usleep(3_000_000)
        let cutEndMs = MonotonicClock.milliseconds()
        proxy.setImpairment(upstream: clean, downstream: clean)
        let receivedAtCutEnd = try kim.streamStats(ssrc: ssrc).jitter.packetsReceived
        wait("kim hears alex again") { ((try? kim.streamStats(ssrc: ssrc))?.jitter.packetsReceived ?? 0) > receivedAtCutEnd + 50 }
        // Six more seconds: longer than the reports' window (5 intervals of 1 s).
        usleep(6_000_000)
        let after = try alex.sendStats(streamID: sid)
        let k = try kim.streamStats(ssrc: ssrc).jitter
        print("outage of 3 s: kim lost \(k.packetsLost) of \(k.packetsReceived + k.packetsLost); alex's protection \(after.protection), "
              + "last report \(after.reported) from \(after.listeners) listener(s); changes since \(cutEndMs): \(changes)")
        XCTAssertGreaterThan(k.packetsLost, 100, "the cut lost the frames sent during it")
        XCTAssertEqual(after.protection, before.protection, "an outage is not loss protection can rebuild")
        XCTAssertEqual(after.changes, before.changes, "no PROTECTION_CHANGED for an outage: \(changes)")
        XCTAssertEqual(after.reported.lost, 0, "the reports leave the outage out")
        XCTAssertGreaterThan(after.feedbacks, before.feedbacks, "kim kept reporting")
    }
}
