// What a client holds in memory before anyone talks: its receive slots are
// preallocated (max_remote_streams), and a slot no stream ever used should cost
// address space, not resident memory. A bot host runs many clients in one process.
@testable import VoiceCatClient
import Foundation
import VoiceCatTestSupport
import XCTest

final class FootprintTests: XCTestCase {
    /// The process's resident memory (VmRSS), in KiB.
    private func residentKiB() throws -> Int {
        let status = try String(contentsOfFile: "/proc/self/status", encoding: .utf8)
        let line = try XCTUnwrap(status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") })
        return try XCTUnwrap(Int(line.split(separator: " ").dropFirst().first { !$0.isEmpty } ?? ""))
    }

    func testReceiveSlotsNoStreamUsedStayOutOfResidentMemory() throws {
        // ThreadSanitizer's allocator and shadow memory make every allocation resident.
        try XCTSkipIf(Sanitizers.thread, "resident memory is the normal build's to judge")
        // 1024 slots (the most a client may ask for). Each holds a ring of 64 datagrams
        // of up to 4 KiB between the network thread and the renderer, and its jitter
        // buffer as much again: zeroed at creation, the rings alone made 260 KB per slot
        // resident (a default client of 32 slots took 11 MB; this one over 300 MB).
        var cfg = ClientConfig.testing()
        cfg.maxRemoteStreams = 1024
        let before = try residentKiB()
        let c = try VoiceClient(config: cfg)
        let grew = try residentKiB() - before
        print("a client with 1024 receive slots: +\(grew) KiB resident (\(grew / 1024) KiB per slot)")
        XCTAssertEqual(c.receive.slots.count, 1024)
        XCTAssertLessThan(grew, 96 * 1024, "resident memory for slots no stream used")
        c.shutdown()
    }
}
