// The client drains its UDP socket in batches; each datagram's arrival time comes
// from the kernel, not from when the batch was read.
import Glibc
import VoiceCatSystem
import XCTest

final class ReceiveTimestampTests: XCTestCase {
    func testBatchedDatagramsCarryTheKernelsArrivalTime() throws {
        let receiver = try Socket.bindUDP(try SocketAddress(host: "127.0.0.1", port: 0))
        try receiver.setNonBlocking()
        try receiver.enableReceiveTimestamps()
        let to = try receiver.localAddress()
        let sender = try Socket.udp(familyOf: to)
        // Linux turns timestamping on for the whole stack from a work queue
        // (net_enable_timestamp), so datagrams that arrive in the first moments after
        // the first socket asks are stamped when read. Wait until a probe carries its
        // arrival time; a client enables stamps at bind, long before audio flows.
        var stamped = false
        for _ in 0..<50 where !stamped {
            var probe = [UInt8](repeating: 0xEE, count: 8)
            _ = try probe.withUnsafeMutableBytes { try sender.sendTo(UnsafeRawBufferPointer($0), to) }
            usleep(30_000)
            let one = DatagramBatch(capacity: 1, slotSize: 64, timestamps: true)
            guard try one.receive(from: receiver) == 1, let stamp = one.receiveTimeRealtimeNs(0) else { continue }
            var now = timespec()
            clock_gettime(CLOCK_REALTIME, &now)
            stamped = UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec) - stamp > 20_000_000
        }
        XCTAssertTrue(stamped, "the kernel never stamped a datagram on arrival")
        var sentAt: [UInt64] = []
        for k in 0..<5 {
            var realtime = timespec()
            clock_gettime(CLOCK_REALTIME, &realtime)
            sentAt.append(UInt64(realtime.tv_sec) * 1_000_000_000 + UInt64(realtime.tv_nsec))
            var b = [UInt8](repeating: UInt8(k), count: 40)
            _ = try b.withUnsafeMutableBytes { try sender.sendTo(UnsafeRawBufferPointer($0), to) }
            usleep(20_000)
        }
        usleep(100_000)   // the batch is read well after the datagrams arrived
        let batch = DatagramBatch(capacity: 8, slotSize: 2048, timestamps: true)
        XCTAssertEqual(try batch.receive(from: receiver), 5)
        var readAt = timespec()
        clock_gettime(CLOCK_REALTIME, &readAt)
        let readNs = UInt64(readAt.tv_sec) * 1_000_000_000 + UInt64(readAt.tv_nsec)
        for i in 0..<5 {
            let stamp = try XCTUnwrap(batch.receiveTimeRealtimeNs(i), "no kernel timestamp")
            XCTAssertGreaterThanOrEqual(stamp + 1_000_000, sentAt[i], "stamped before it was sent")
            XCTAssertLessThan(stamp, sentAt[i] + 10_000_000, "the stamp is not the arrival time")
            XCTAssertGreaterThan(readNs - stamp, 90_000_000, "the stamp is the read time")
        }
        let plain = DatagramBatch(capacity: 2, slotSize: 64)
        XCTAssertNil(plain.receiveTimeRealtimeNs(0))
    }
}
