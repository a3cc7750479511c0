// When a fed stream's queue runs dry, how long it waits for the host before it ends
// the talkspurt (LocalStream.deadline, on a simulated clock): the dry slack after a
// real-time host's block, none once a call of a second or more has been sent.
@testable import VoiceCatClient
import VoiceCatAudio
import VoiceCatProtocol
import VoiceCatSystem
import XCTest

/// Stream 1 of `c` as vc_stream_start builds it (a MIC fed by the host, the channel's
/// speech settings), with a connected client's send path to the discard port.
func discardingStream(on c: VoiceClient) throws -> (LocalStream, StreamSlot) {
    let slot = c.streams.slots[0]
    let s = try LocalStream(streamID: 1, ssrc: 5000, kind: .mic, externalFeed: true, inputChannels: 1, audio: .speech,
                            slot: slot, table: c.streams)
    let sock = try Socket.udp(familyOf: try SocketAddress(host: "127.0.0.1", port: 9))
    try sock.setNonBlocking()
    slot.path = SendSnapshot(key: SymmetricKey.random(), socket: sock, address: try SocketAddress(host: "127.0.0.1", port: 9),
                             serverMuted: false)
    return (s, slot)
}

final class DryQueueTests: XCTestCase {
    private let ms: UInt64 = 1_000_000
    /// The simulated clock's origin (a monotonic clock is far from 0).
    private let t0: UInt64 = 1_000_000_000_000

    private func feed(_ s: LocalStream, _ slot: StreamSlot, ms count: Int, at t: UInt64) throws {
        let pcm = [Int16](repeating: 1000, count: count * 48)
        try pcm.withUnsafeBufferPointer { p in try slot.lock.withLock { try s.feed(p.baseAddress!, frames: pcm.count, channels: 1, clock: { t }) } }
    }

    func testARealTimeHostsBlocksAreWaitedForTheSlack() throws {
        let c = try VoiceClient()
        let (s, slot) = try discardingStream(on: c)
        c.setInputMode(.continuous)
        // 40 ms blocks every 40 ms (two frames each: the second is paced 20 ms later).
        for k in 0..<5 {
            let t = t0 + UInt64(k) * 40 * ms
            try feed(s, slot, ms: 40, at: t)
            slot.lock.withLock { s.pump(now: t + 20 * ms) }
            // Dry until the next block: the talkspurt lasts a frame plus the 5 ms slack past
            // the last frame taken, so a block a little late does not cut it.
            XCTAssertEqual(slot.lock.withLock { s.deadline }, t + 45 * ms, "block \(k)")
        }
    }

    func testAWholeFileEndsOnTimeOnceSent() throws {
        let c = try VoiceClient()
        let (s, slot) = try discardingStream(on: c)
        c.setInputMode(.continuous)
        // 1.51 s in one call at 0: 75 frames paced at 0, 20, ..., 1480 ms, and 10 ms left over.
        try feed(s, slot, ms: 1510, at: t0)
        for k in 1..<75 { slot.lock.withLock { s.pump(now: t0 + UInt64(k) * 20 * ms) } }
        XCTAssertEqual(slot.lock.withLock { s.queuedFrames }, 0)
        // Nothing more can come of that call: the padded last frame is due with its slot.
        XCTAssertEqual(slot.lock.withLock { s.deadline }, t0 + 1500 * ms)
        // A short call afterwards is a real-time host's block again: the slack is back.
        try feed(s, slot, ms: 20, at: t0 + 1490 * ms)
        XCTAssertEqual(slot.lock.withLock { s.deadline }, t0 + 1500 * ms, "the next frame is due in its slot")
        slot.lock.withLock { s.pump(now: t0 + 1500 * ms) }
        XCTAssertEqual(slot.lock.withLock { s.deadline }, t0 + 1525 * ms)
    }
}
