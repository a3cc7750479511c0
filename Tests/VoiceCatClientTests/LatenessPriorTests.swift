import XCTest
import VoiceCatAudio
import VoiceCatProtocol
import VoiceCatSystem
@testable import VoiceCatClient

/// A new remote stream starts with the lateness the streams already received from the
/// server have seen (ReceiveSet.add seeds its jitter buffer), so its first talkspurt
/// starts with a cushion instead of none. Simulated arrival times; no sockets.
final class LatenessPriorTests: XCTestCase {
    /// Feeds `frames` 20 ms frames into `jb` as one talkspurt: frame f arrives 12 ms
    /// into its slot, one in five 22 ms (half a period later); ticks every 20 ms.
    private func feedJitteryPath(_ jb: JitterBuffer, frames: Int) {
        var tick = 0
        for f in 0..<frames {
            let arrival = Double(f) * 20 + (f % 5 == 4 ? 22 : 12)
            while Double(tick) * 20 < arrival {
                if case .packet(let s) = jb.next(atMs: Double(tick) * 20) { jb.release(s) }
                tick += 1
            }
            let flags: FrameFlags = f == 0 ? [.marker] : []
            _ = [UInt8(1)].withUnsafeBytes {
                jb.insert(seq: UInt64(f), timestamp: UInt32(f * 960), flags: flags, payload: $0, arrivalMs: arrival)
            }
        }
    }

    /// Whether stream `ssrc`'s first frame (a marker, arriving 12 ms into its slot) is
    /// played at the tick 8 ms after it arrived, or held for a cushion.
    private func playsFirstFrameAtOnce(_ receive: ReceiveSet, ssrc: UInt32) -> Bool {
        let s = receive.slots[receive.slotIndex(ssrc: ssrc)!]
        return s.lock.withLock {
            _ = s.jitter.next(atMs: 10_000)
            _ = [UInt8(1)].withUnsafeBytes {
                s.jitter.insert(seq: 0, timestamp: 0, flags: [.marker], payload: $0, arrivalMs: 10_012)
            }
            if case .packet = s.jitter.next(atMs: 10_020) { return true }
            return false
        }
    }

    private func stream(_ ssrc: UInt32) -> RemoteStream {
        RemoteStream(userID: ssrc, streamID: 1, ssrc: ssrc, kind: .mic, audio: .speech)
    }

    func testANewStreamStartsWithTheCushionOfTheStreamsAlreadyReceived() throws {
        let receive = try ReceiveSet(capacity: 4, networkWake: try WakeEvent())
        XCTAssertTrue(receive.add(stream(100), username: "a"))
        XCTAssertTrue(playsFirstFrameAtOnce(receive, ssrc: 100), "nothing known yet: the first frame plays at once")

        let a = receive.slots[receive.slotIndex(ssrc: 100)!]
        a.lock.withLock {
            a.jitter.reset(frameSamples: 960)
            feedJitteryPath(a.jitter, frames: 300)
        }
        a.lastPacketMs.store(MonotonicClock.milliseconds(), ordering: .relaxed)
        XCTAssertTrue(receive.add(stream(200), username: "b"))
        XCTAssertFalse(playsFirstFrameAtOnce(receive, ssrc: 200),
                       "seeded from stream 100 (half a period of cushion needed): 0.4 of one is not enough")

        // A stream that ended recently still lends its lateness (its slot keeps the buffer).
        receive.remove(ssrc: 100)
        receive.remove(ssrc: 200)
        XCTAssertTrue(receive.add(stream(300), username: "c"))
        XCTAssertFalse(playsFirstFrameAtOnce(receive, ssrc: 300), "seeded from the ended stream 100")

        // One whose last frame came more than priorFreshMs ago does not: the path may have changed.
        receive.remove(ssrc: 300)
        for s in receive.slots {
            s.lastPacketMs.store(MonotonicClock.milliseconds() - ReceiveSet.priorFreshMs - 1, ordering: .relaxed)
        }
        XCTAssertTrue(receive.add(stream(400), username: "d"))
        XCTAssertTrue(playsFirstFrameAtOnce(receive, ssrc: 400), "a stale prior is not taken")
    }
}
