import Glibc
import XCTest
import VoiceCatSystem
@testable import VoiceCatClient

/// The renderer's lease on the media socket (MediaInput): while a renderer reads, the
/// lease is kept ahead of it and the network thread, which polls the lease's timerfd,
/// sleeps; when the reads stop the lease runs out within `rendererStaleNs` (50 ms)
/// and the network thread takes over the socket. Lower bounds are exact (a timer does
/// not expire early); upper bounds only say "it does expire" (a shared machine stalls).
final class MediaInputTests: XCTestCase {
    private func leaseFires(_ input: MediaInput, withinMs ms: Int32) -> Bool {
        var p = pollfd(fd: input.lease.descriptor, events: Int16(POLLIN), revents: 0)
        return poll(&p, 1, ms) == 1
    }

    func testTheLeaseRunsOutOnlyWhenTheRendererStopsReading() throws {
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
