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

    /// Stream `ssrc` (already added) has seen a path where one frame in five comes
    /// half a period late: 300 frames fed into its buffer from `now` on, as one
    /// talkspurt (frame f arrives 12 ms into its slot, one in five 22 ms), ticked every
    /// 20 ms; then two renders, which pick it as the stream that has seen the most and
    /// copy its lateness.
    private func hearJitteryPath(_ ssrc: UInt32) {
        let jb = slot(ssrc).jitter
        let t0 = now
        slot(ssrc).lock.withLock {
            jb.reset(frameSamples: 960)
            var tick = 0
            for f in 0..<300 {
                let arrival = t0 + Double(f) * 20 + (f % 5 == 4 ? 22 : 12)
                while t0 + Double(tick) * 20 < arrival {
                    if case .packet(let s) = jb.next(atMs: t0 + Double(tick) * 20) { jb.release(s) }
                    tick += 1
                }
                let flags: FrameFlags = f == 0 ? [.marker] : []
                _ = [UInt8(1)].withUnsafeBytes {
                    jb.insert(seq: UInt64(f), timestamp: UInt32(f * 960), flags: flags, payload: $0, arrivalMs: arrival)
                }
            }
        }
        now = t0 + 300 * 20 + 20
        render()
        render()
    }

    /// Whether stream `ssrc`'s first frame (a marker, arriving 12 ms after a render)
    /// starts its talkspurt at the next render, 8 ms later, or is held for a cushion.
    /// `statsFirst`: a host reads the stream's statistics before that render (it takes
    /// the waiting frame into the buffer).
    private func playsFirstFrameAtOnce(_ ssrc: UInt32, statsFirst: Bool = false) throws -> Bool {
        render()
        _ = [UInt8(1)].withUnsafeBytes {
            slot(ssrc).inbox.push(seq: 0, timestamp: 0, flags: [.marker], arrivalMs: now - 20 + 12, payload: $0)
        }
        if statsFirst { XCTAssertEqual(try receive.stats(ssrc: ssrc, nowMs: now - 20 + 15).jitter.packetsReceived, 1) }
        render()
        let atOnce = slot(ssrc).lock.withLock { slot(ssrc).jitter.stats.talkspurts } == 1
        render()
        XCTAssertEqual(slot(ssrc).lock.withLock { slot(ssrc).jitter.stats.talkspurts }, 1, "started by the render after")
        return atOnce
    }

    func testAStreamStartsWithTheCushionOfTheStreamsAlreadyReceived() throws {
        add(100)
        XCTAssertTrue(try playsFirstFrameAtOnce(100), "nothing known yet: the first frame plays at once")
        hearJitteryPath(100)
        add(200)
        XCTAssertFalse(try playsFirstFrameAtOnce(200), "seeded from stream 100 (half a period of cushion needed): 0.4 of one is not enough")
        add(300)
        XCTAssertFalse(try playsFirstFrameAtOnce(300, statsFirst: true), "seeded also when a host's statistics took the first frame in")

        // A stream that ended a moment ago still lends its path's lateness.
        receive.remove(ssrc: 100)
        receive.remove(ssrc: 200)
        receive.remove(ssrc: 300)
        add(400)
        XCTAssertFalse(try playsFirstFrameAtOnce(400), "seeded from the ended stream 100")
    }

    func testNoLatenessIsLentFromFramesHeardLongAgoOrFromAnotherSession() throws {
        add(100)
        hearJitteryPath(100)
        // Stream 100 stays, silent: 30 s after its last frame its path is not lent.
        for _ in 0..<(Int(SessionLateness.freshMs) / 20) { render() }
        add(200)
        XCTAssertTrue(try playsFirstFrameAtOnce(200), "stream 100 was last heard 30 s ago")

        // Heard again, then the session ends (or is re-established): nothing is lent
        // to the next session's streams.
        hearJitteryPath(100)
        add(300)
        XCTAssertFalse(try playsFirstFrameAtOnce(300), "heard again: lent")
        receive.removeAll()
        receive.forgetLateness()
        add(400)
        XCTAssertTrue(try playsFirstFrameAtOnce(400), "a new session starts with nothing lent")
    }
}
