import XCTest
import VoiceCatAudio
import VoiceCatProtocol
import VoiceCatSystem
@testable import VoiceCatClient

/// A stream's first frames enter a jitter buffer seeded with the lateness the streams
/// already received from the server have seen (ReceiveSet.render), so its first
/// talkspurt starts with a cushion instead of none. Simulated arrival and render
/// times; no sockets (the payloads are not Opus: their periods are concealed, which
/// does not change what the jitter buffer decides).
final class LatenessPriorTests: XCTestCase {
    private var receive: ReceiveSet!
    private let bus = MixBus(capacityFrames: 960)
    private var now = 100_000.0

    override func setUpWithError() throws {
        receive = try ReceiveSet(capacity: 4, networkWake: try WakeEvent())
    }

    private func render() {
        receive.render(into: bus, frames: 960, nowMs: now)
        now += 20
    }

    private func slot(_ ssrc: UInt32) -> RemoteSlot { receive.slots[receive.slotIndex(ssrc: ssrc)!] }

    private func add(_ ssrc: UInt32) {
        XCTAssertTrue(receive.add(RemoteStream(userID: ssrc, streamID: 1, ssrc: ssrc, kind: .mic, audio: .speech), username: "u\(ssrc)"))
    }

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

    /// Whether stream `ssrc`'s first frame (a marker, arriving 12 ms after a render)
    /// starts its talkspurt at the next render, 8 ms later, or is held for a cushion.
    private func playsFirstFrameAtOnce(_ ssrc: UInt32) -> Bool {
        render()
        _ = [UInt8(1)].withUnsafeBytes {
            slot(ssrc).inbox.push(seq: 0, timestamp: 0, flags: [.marker], arrivalMs: now - 20 + 12, payload: $0)
        }
        render()
        let atOnce = slot(ssrc).lock.withLock { slot(ssrc).jitter.stats.talkspurts } == 1
        render()
        XCTAssertEqual(slot(ssrc).lock.withLock { slot(ssrc).jitter.stats.talkspurts }, 1, "started by the render after")
        return atOnce
    }

    func testAStreamStartsWithTheCushionOfTheStreamsAlreadyReceived() throws {
        add(100)
        XCTAssertTrue(playsFirstFrameAtOnce(100), "nothing known yet: the first frame plays at once")

        // Stream 100 has seen a path where one frame in five comes half a period late.
        let a = slot(100)
        a.lock.withLock {
            a.jitter.reset(frameSamples: 960)
            feedJitteryPath(a.jitter, frames: 300)
        }
        render()    // picks it as the one that has seen the most
        render()    // copies its lateness
        add(200)
        XCTAssertFalse(playsFirstFrameAtOnce(200), "seeded from stream 100 (half a period of cushion needed): 0.4 of one is not enough")

        // Its lateness is still lent after it ended...
        receive.remove(ssrc: 100)
        receive.remove(ssrc: 200)
        add(300)
        XCTAssertFalse(playsFirstFrameAtOnce(300), "seeded from the ended stream 100")

        // ...but not once it is priorFreshMs old: the path may have changed.
        receive.remove(ssrc: 300)
        now += ReceiveSet.priorFreshMs
        add(400)
        XCTAssertTrue(playsFirstFrameAtOnce(400), "a stale prior is not taken")
    }
}
