import Glibc
import XCTest
import VoiceCatSystem
import VoiceCatABI
import VoiceCatProtocol
@testable import VoiceCatClient

/// The renderer's lease on the media socket (MediaInput): while a renderer reads, the
/// lease is kept ahead of it and the network thread, which polls the lease's timerfd,
/// sleeps; when the reads stop the lease runs out within `rendererStaleNs` (50 ms)
/// and the network thread takes over the socket. Lower bounds are exact (a timer does
/// not expire early); upper bounds only say "it does expire" (a shared machine stalls).
final class MediaInputTests: XCTestCase {
    private func leaseFires(_ input: MediaInput, withinMs ms: Int32) -> Bool {
        var p = pollfd(fd: input.lease.fd, events: Int16(POLLIN), revents: 0)
        return poll(&p, 1, ms) == 1
    }

    func testTheLeaseRunsOutWhenTheRendererStopsReadingAndNotWhileItReads() throws {
        let receive = try ReceiveSet(capacity: 2, networkWake: try WakeEvent())
        let input = receive.input
        let sock = try Socket.bindUDP(try SocketAddress(host: "127.0.0.1", port: 0))
        input.attach(socket: sock, key: nil, bindingID: 1)
        input.rendererMayRead.store(true, ordering: .relaxed)
        XCTAssertFalse(leaseFires(input, withinMs: 100), "no lease before the renderer's first read")

        // A renderer reading every 10 ms for 0.4 s: the lease (25-50 ms ahead of each
        // read) runs out only if this thread stalls for over 15 ms between two reads.
        var lastRead: UInt64 = 0
        var expired = 0
        for _ in 0..<40 {
            receive.readForRender()
            lastRead = MonotonicClock.milliseconds()
            XCTAssertTrue(input.rendererReads(nowNs: MonotonicClock.nanoseconds()))
            if leaseFires(input, withinMs: 10) { expired += 1; input.leaseExpired() }
        }
        XCTAssertLessThanOrEqual(expired, 3, "the lease ran out while the renderer read every 10 ms")

        // The reads stop: the lease runs out at least 25 ms after the last one; the
        // network thread, once it has looked (leaseExpired), arms it for when the reads
        // go stale (50 ms after the last), and then nothing is armed.
        XCTAssertTrue(leaseFires(input, withinMs: 2000), "the lease runs out once the reads stop")
        XCTAssertGreaterThanOrEqual(MonotonicClock.milliseconds() - lastRead, 25)
        var looks = 0
        while input.rendererReads(nowNs: MonotonicClock.nanoseconds()) {
            input.leaseExpired()
            looks += 1
            XCTAssertTrue(leaseFires(input, withinMs: 2000), "the lease is armed until the reads are stale")
            if looks > 10 { break }
        }
        XCTAssertLessThanOrEqual(looks, 2)
        XCTAssertGreaterThanOrEqual(MonotonicClock.milliseconds() - lastRead, 50, "stale only after rendererStaleNs")
        input.leaseExpired()
        XCTAssertFalse(leaseFires(input, withinMs: 100), "stale: nothing more to wake for")

        // Reads resume: a new lease.
        receive.readForRender()
        XCTAssertTrue(input.rendererReads(nowNs: MonotonicClock.nanoseconds()))
        XCTAssertTrue(leaseFires(input, withinMs: 2000))
        input.attach(socket: nil, key: nil, bindingID: 0)
    }
}

/// The network thread's look at the talk state (updateTalkState) from the renderer's
/// talkspurt counts, without a server: a talkspurt that began and ended, hangover
/// included, between two looks is reported as TALK_START then TALK_STOP; one still
/// going gives TALK_START only, and its end the hangover after it.
final class TalkStateLookTests: XCTestCase {
    func testATalkspurtBegunAndEndedBetweenTwoLooksGivesBothEvents() throws {
        var config = ClientConfig()
        config.externalPlayback = true
        config.talkHangoverMs = 300
        let client = try VoiceClient(config: config)
        defer { client.shutdown() }
        let stream = RemoteStream(userID: 7, streamID: 1, ssrc: 4242, kind: .mic, audio: .speech)
        XCTAssertTrue(client.receive.add(stream, username: "kim"))
        let slot = try XCTUnwrap(client.receive.slots.first { $0.ssrc == 4242 })
        func events() -> [vc_event_type] {
            client.events.deliver()
            var out: [vc_event_type] = []
            while let e = client.pollEvent(timeoutMs: 0) { if e.ssrc == 4242 { out.append(e.type) } }
            return out
        }
        var now = MonotonicClock.milliseconds() + 1000
        client.output.lastRenderMs.store(now, ordering: .relaxed)   // the mix plays

        // Begun and ended 400 ms ago (past the hangover), never looked at.
        slot.spurtEndNs.store((now - 400) * 1_000_000, ordering: .relaxed)
        slot.spurtsStarted.store(1, ordering: .relaxed)
        slot.spurtsEnded.store(1, ordering: .relaxed)
        client.updateTalkState(now: now)
        XCTAssertEqual(events(), [.talkStart, .talkStop])
        XCTAssertFalse(slot.talking)
        XCTAssertEqual(client.nextTalkLookMs(byRenderer: true), .max, "nothing left to time")

        // A second one begins: TALK_START only.
        now += 100
        client.output.lastRenderMs.store(now, ordering: .relaxed)
        slot.spurtsStarted.store(2, ordering: .relaxed)
        XCTAssertEqual(client.nextTalkLookMs(byRenderer: true), now - 100 + VoiceClient.talkLookMs, "an edge not looked at yet")
        client.updateTalkState(now: now)
        XCTAssertEqual(events(), [.talkStart])
        XCTAssertTrue(slot.talking)
        // It ends: nothing before the hangover, then TALK_STOP; the look is timed for it.
        now += 100
        client.output.lastRenderMs.store(now, ordering: .relaxed)
        slot.spurtEndNs.store(now * 1_000_000, ordering: .relaxed)
        slot.spurtsEnded.store(2, ordering: .relaxed)
        client.updateTalkState(now: now)
        XCTAssertEqual(events(), [])
        XCTAssertEqual(client.nextTalkLookMs(byRenderer: true), now + 300, "the hangover after the last frame played")
        client.output.lastRenderMs.store(now + 290, ordering: .relaxed)   // still playing
        client.updateTalkState(now: now + 290)
        XCTAssertEqual(events(), [])
        XCTAssertEqual(client.nextTalkLookMs(byRenderer: true), now + 310, "looks stay 20 ms apart")
        client.output.lastRenderMs.store(now + 310, ordering: .relaxed)
        client.updateTalkState(now: now + 310)
        XCTAssertEqual(events(), [.talkStop])
        XCTAssertFalse(slot.talking)
    }
}
