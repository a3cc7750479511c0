// Pure audio core: reframer, jitter buffer ordering and accounting, limiter, Opus.
import VoiceCatAudio
import VoiceCatProtocol
import XCTest

final class ReframerTests: XCTestCase {
    func testAnyBlockSizeBecomesWholeFramesInOrder() {
        let r = Reframer(frameSamples: 120, channels: 1)
        var out: [Int16] = []
        let input = (0..<1000).map { Int16($0) }
        var i = 0
        var block = 1
        while i < input.count {
            let n = min(block, input.count - i)
            input[i..<(i + n)].withUnsafeBufferPointer { p in
                r.push(p.baseAddress!, frames: n, inChannels: 1) { f in out.append(contentsOf: UnsafeBufferPointer(start: f, count: 120)) }
            }
            i += n
            block = block * 2 + 3
        }
        XCTAssertEqual(out, Array(input[0..<960]))
        XCTAssertEqual(r.pending, 40)
    }

    func testChannelConversion() {
        let up = Reframer(frameSamples: 2, channels: 2)
        var got: [Int16] = []
        [Int16(5), 7].withUnsafeBufferPointer { p in up.push(p.baseAddress!, frames: 2, inChannels: 1) { got = Array(UnsafeBufferPointer(start: $0, count: 4)) } }
        XCTAssertEqual(got, [5, 5, 7, 7])
        let down = Reframer(frameSamples: 2, channels: 1)
        [Int16(10), 20, -4, -8].withUnsafeBufferPointer { p in down.push(p.baseAddress!, frames: 2, inChannels: 2) { got = Array(UnsafeBufferPointer(start: $0, count: 2)) } }
        XCTAssertEqual(got, [15, -6])
    }
}

final class JitterBufferTests: XCTestCase {
    func insert(_ jb: JitterBuffer, _ seq: UInt64, ts: UInt32, flags: UInt8 = 0) -> JitterBuffer.InsertResult {
        let payload: [UInt8] = [UInt8(truncatingIfNeeded: seq)]
        return payload.withUnsafeBytes { jb.insert(seq: seq, timestamp: ts, flags: flags, payload: $0) }
    }

    /// Plays `n` ticks; returns the first payload byte of each played packet, -1 for FEC, -2 for PLC, nil for silence.
    func play(_ jb: JitterBuffer, _ n: Int) -> [Int?] {
        (0..<n).map { _ in
            switch jb.next() {
            case .packet(let s): let v = Int(jb.payload(s)[0]); jb.release(s); return v
            case .fec: return -1
            case .conceal: return -2
            case .silence: return nil
            }
        }
    }

    func testReorderedFramesPlayInOrderAndLossesAreCounted() {
        let jb = JitterBuffer(frameSamples: 960, targetFrames: 2)
        for s: UInt64 in [0, 2, 1, 3, 5, 6] { XCTAssertEqual(insert(jb, s, ts: UInt32(s) * 960), .accepted) }
        XCTAssertEqual(insert(jb, 2, ts: 2 * 960), .duplicate)
        XCTAssertEqual(play(jb, 7), [0, 1, 2, 3, -1, 5, 6])   // 4 is lost; 5 carries its FEC
        XCTAssertEqual(jb.stats.packetsLost, 1)
        XCTAssertEqual(jb.stats.duplicates, 1)
        XCTAssertEqual(jb.stats.fecRecovered, 1)
        XCTAssertEqual(insert(jb, 4, ts: 4 * 960), .late)
        XCTAssertEqual(jb.stats.packetsLost, 0, "a straggler fills its gap in the loss count")
    }

    func testTimestampsCrossing32BitsPlayThrough() {
        let jb = JitterBuffer(frameSamples: 960, targetFrames: 1)
        var ts = UInt32.max - 960 * 2 + 1
        var played: [Int?] = []
        for s in UInt64(0)..<6 {
            _ = insert(jb, s, ts: ts)
            ts &+= 960
            played += play(jb, 1)
        }
        XCTAssertEqual(played, [0, 1, 2, 3, 4, 5])
        XCTAssertEqual(jb.stats.plcFrames, 0)
    }

    func testDtxGapIsSilenceNotLossAndMarkerReseeds() {
        let jb = JitterBuffer(frameSamples: 960, targetFrames: 1)
        _ = insert(jb, 0, ts: 0)
        _ = insert(jb, 1, ts: 960, flags: 0x08)            // last frame of a talkspurt
        XCTAssertEqual(play(jb, 3), [0, 1, nil])
        _ = insert(jb, 2, ts: 960 * 50, flags: 0x01)       // next talkspurt, contiguous seq
        XCTAssertEqual(play(jb, 1), [2])
        XCTAssertEqual(jb.stats.packetsLost, 0)
        XCTAssertEqual(jb.stats.plcFrames, 0)
        XCTAssertEqual(jb.stats.underruns, 0)
    }
}

final class MixerTests: XCTestCase {
    func testLimiterKeepsManyLoudStreamsInsideInt16WithoutWrap() {
        let bus = MixBus(capacityFrames: 480)
        bus.clear(frames: 480)
        var loud = [Int16](repeating: 0, count: 960)
        for i in 0..<480 { let v = Int16(i % 2 == 0 ? 30000 : -30000); loud[2 * i] = v; loud[2 * i + 1] = v }
        for _ in 0..<16 { loud.withUnsafeBufferPointer { bus.add($0.baseAddress!, frames: 480, gain: 1) } }
        var out = [Int16](repeating: 0, count: 960)
        out.withUnsafeMutableBufferPointer { bus.render(into: $0.baseAddress!, frames: 480) }
        for i in 0..<960 {
            XCTAssertEqual(out[i].signum(), loud[i].signum(), "sign flipped (wrap-around) at \(i)")
            XCTAssertGreaterThan(abs(Int(out[i])), 30000)
        }
        // Quiet signals pass through unchanged.
        XCTAssertEqual(softLimit(0.25), 0.25)
        XCTAssertLessThanOrEqual(softLimit(100), 1)
        XCTAssertGreaterThanOrEqual(softLimit(-100), -1)
        XCTAssertLessThan(softLimit(0.9), 0.9, "above the knee the curve bends")
    }
}

final class OpusTests: XCTestCase {
    func testEveryFrameSizeEncodesAndDecodes() throws {
        for us: UInt32 in [2500, 5000, 10000, 20000, 40000, 60000] {
            var cfg = AudioConfig.speech
            cfg.frameMicros = us
            let enc = try OpusEncoderBox(config: cfg)
            let dec = try OpusDecoderBox()
            let n = cfg.frameSamples
            let pcm = (0..<n).map { Int16(8000 * sin(Double($0) * 2 * .pi * 440 / 48000)) }
            var packet = [UInt8](repeating: 0, count: 1500)
            let len = try pcm.withUnsafeBufferPointer { p in try packet.withUnsafeMutableBytes { try enc.encode(p.baseAddress!, into: $0) } }
            XCTAssertGreaterThan(len, 2)
            var out = [Int16](repeating: 0, count: n * 2)
            let got = try packet[0..<len].withUnsafeBytes { p in try out.withUnsafeMutableBufferPointer { try dec.decode(p, frames: n, into: $0.baseAddress!) } }
            XCTAssertEqual(got, n, "frame \(us) us")
        }
    }

    func testBadConfigurationIsACodecError() {
        var cfg = AudioConfig.speech
        cfg.frameMicros = 30000
        XCTAssertThrowsError(try OpusEncoderBox(config: cfg))
    }
}
