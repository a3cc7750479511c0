import Glibc
import XCTest
import VoiceCatSystem
@testable import VoiceCatClient

/// The renderer's lease on the media socket (MediaInput): while a renderer reads, the
/// lease is kept ahead of it and the network thread, which polls the lease's timerfd,
/// sleeps; when the reads stop the lease runs out within `rendererStaleNs` (50 ms)
/// and the network thread takes over the socket.
final class MediaInputTests: XCTestCase {
    private func leaseFires(_ input: MediaInput, withinMs ms: Int32) -> Bool {
        var p = pollfd(fd: input.lease.descriptor, events: Int16(POLLIN), revents: 0)
        return poll(&p, 1, ms) == 1
    }

    func testTheLeaseRunsOutOnlyWhenTheRendererStopsReading() throws {
        let receive = try ReceiveSet(capacity: 2, networkWake: try WakePipe())
        let input = receive.input
        let sock = try Socket.bindUDP(try SocketAddress(host: "127.0.0.1", port: 0))
        input.attach(socket: sock, key: nil, bindingID: 1)
        input.rendererMayRead.store(true, ordering: .relaxed)
        XCTAssertFalse(leaseFires(input, withinMs: 100), "no lease before the renderer's first read")

        // A renderer reading every 20 ms for 0.4 s: the lease never runs out.
        var lastRead: UInt64 = 0
        for _ in 0..<20 {
            receive.readForRender()
            lastRead = MonotonicClock.milliseconds()
            XCTAssertTrue(input.rendererReads(nowNs: MonotonicClock.nanoseconds()))
            XCTAssertFalse(leaseFires(input, withinMs: 20), "the lease ran out while the renderer reads")
        }

        // The reads stop: the lease runs out 25-50 ms after the last one (the renderer
        // moves it on when less than half is left), and the network thread, once it has
        // looked (leaseExpired), arms it for when the reads go stale; then they are.
        let stopped = lastRead
        XCTAssertTrue(leaseFires(input, withinMs: 500))
        var firedAfter = MonotonicClock.milliseconds() - stopped
        XCTAssertGreaterThanOrEqual(firedAfter, 20)
        XCTAssertLessThan(firedAfter, 200)
        while input.rendererReads(nowNs: MonotonicClock.nanoseconds()) {
            input.leaseExpired(nowNs: MonotonicClock.nanoseconds())
            XCTAssertTrue(leaseFires(input, withinMs: 500), "the lease is armed until the reads are stale")
            firedAfter = MonotonicClock.milliseconds() - stopped
        }
        input.leaseExpired(nowNs: MonotonicClock.nanoseconds())
        XCTAssertGreaterThanOrEqual(firedAfter, 40)
        XCTAssertLessThan(firedAfter, 250, "the network thread knows within the stale time (and a scheduling margin)")
        XCTAssertFalse(leaseFires(input, withinMs: 100), "stale: nothing more to wake for")

        // Reads resume: a new lease.
        receive.readForRender()
        XCTAssertTrue(input.rendererReads(nowNs: MonotonicClock.nanoseconds()))
        XCTAssertTrue(leaseFires(input, withinMs: 500))
        input.attach(socket: nil, key: nil, bindingID: 0)
    }
}
