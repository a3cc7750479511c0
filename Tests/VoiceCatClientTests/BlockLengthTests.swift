// A receive slot rendered in blocks of another length than its frames
// (vc_set_mixed_output_block_ms, 40/60 ms frames, a host's pulls): what the slot's
// FIFO keeps of a decoded frame across a change of block length.
import VoiceCatAudio
@testable import VoiceCatClient
import VoiceCatProtocol
import XCTest

final class BlockLengthTests: XCTestCase {
    /// One slot of a never-connected client, for a stream of `frameMicros` frames.
    func slot(frameMicros: UInt32 = 20_000) throws -> (VoiceClient, RemoteSlot) {
        var audio = AudioConfig.speech
        audio.frameMicros = frameMicros
        let c = try VoiceClient()
        XCTAssertTrue(c.receive.add(RemoteStream(userID: 1, streamID: 1, ssrc: 1001, kind: .mic, audio: audio), username: "a"))
        return (c, c.receive.slots[0])
    }

    /// Renders `blocks` (frames each) at 48 kHz from `clockMs` on, inserting each of
    /// `packets` (20 ms frames) when it arrives (frame k at 20 k + 2 ms, the last one
    /// with the last-frame flag). Returns the left channel played.
    func render(_ s: RemoteSlot, _ blocks: [Int], packets: [[UInt8]], clockMs: inout Double, next: inout Int,
                fixedBlock: Bool) -> [Int16] {
        let bus = MixBus(capacityFrames: 960)
        let scratch = RemoteSlot.Scratch()
        defer { scratch.deallocate() }
        var pcm = [Int16](repeating: 0, count: 1920)
        var left: [Int16] = []
        for n in blocks {
            while next < packets.count && Double(next) * 20 + 2 <= clockMs {
                let flags: FrameFlags = next == 0 ? .marker : next == packets.count - 1 ? .lastFrame : []
                let f = next
                packets[f].withUnsafeBytes { _ = s.jitter.insert(seq: UInt64(f), timestamp: UInt32(f * 960), flags: flags, payload: $0,
                                                                   arrivalMs: Double(f) * 20 + 2) }
                next += 1
            }
            bus.clear(frames: n)
            s.lock.withLock { s.render(into: bus, frames: n, nowMs: clockMs, scratch: scratch, fixedBlock: fixedBlock) }
            pcm.withUnsafeMutableBufferPointer { bus.render(into: $0.baseAddress!, frames: n) }
            left += stride(from: 0, to: 2 * n, by: 2).map { pcm[$0] }
            clockMs += Double(n) / 48
        }
        return left
    }

    /// 20 ms frames: 20 ms blocks, an odd number of 10 ms blocks while a talkspurt
    /// plays, 20 ms blocks again. Half a frame is left in the FIFO: it is played (no
    /// speech is dropped) while the stream talks, and dropped once it is silence, so
    /// the stream plays at the block's start again. A host's pulls keep it.
    func testHalfAFrameLeftByAShorterBlockIsDroppedOnceTheStreamFallsSilent() throws {
        let packets = try ProcessingPathTests.packets(Signal.glidingVoice(seconds: 0.6, amplitude: 0.3))
        for fixedBlock in [true, false] {
            let (_, s) = try slot()
            var clock = 0.0, next = 0
            var out = render(s, Array(repeating: 960, count: 6), packets: packets, clockMs: &clock, next: &next, fixedBlock: fixedBlock)
            out += render(s, Array(repeating: 480, count: 3), packets: packets, clockMs: &clock, next: &next, fixedBlock: fixedBlock)
            let talking = s.lock.withLock { s.depthMs }
            out += render(s, Array(repeating: 960, count: 40), packets: packets, clockMs: &clock, next: &next, fixedBlock: fixedBlock)
            let after = s.lock.withLock { s.depthMs }
            let heard = out.filter { abs(Int($0)) > 300 }.count
            print("fixed blocks \(fixedBlock): depth \(talking) ms while talking, \(after) ms after; \(heard) loud samples of "
                  + "\(packets.count * 960) fed; concealed \(s.jitter.stats.plcFrames)")
            XCTAssertGreaterThanOrEqual(talking, 10, "half a frame is in the FIFO while the talkspurt plays")
            XCTAssertEqual(s.jitter.stats.plcFrames, 0)
            XCTAssertGreaterThan(heard, packets.count * 960 * 8 / 10, "the talkspurt was played whole")
            XCTAssertEqual(after, fixedBlock ? 0 : 10, fixedBlock ? "the silent leftover is dropped" : "a pull's leftover stays")
        }
    }

    /// 40 ms frames in 20 ms blocks keep the second half of each frame for the next
    /// block, talking or silent: nothing there is a leftover to drop (the slot's clock
    /// keeps one frame per two blocks).
    func testFramesLongerThanTheBlockKeepTheirSecondHalfInSilence() throws {
        let (_, s) = try slot(frameMicros: 40_000)
        var clock = 0.0, next = 0
        for blocks in 1...7 {
            _ = render(s, [960], packets: [], clockMs: &clock, next: &next, fixedBlock: true)
            XCTAssertEqual(s.lock.withLock { s.depthMs }, blocks % 2 == 1 ? 20 : 0, "after \(blocks) blocks")
        }
    }
}
