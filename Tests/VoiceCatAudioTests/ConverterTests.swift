// Rate and channel conversion at the engine's edges (FormatConverter), levels.
import Foundation
import VoiceCatAllocCounter
import VoiceCatAudio
import XCTest

final class ConverterTests: XCTestCase {
    static func tone(_ f: Double, rate: Int, seconds: Double, amplitude: Double = 0.3, channels: Int = 1) -> [Int16] {
        let n = Int(seconds * Double(rate))
        var out = [Int16](repeating: 0, count: n * channels)
        for i in 0..<n {
            let v = Int16(amplitude * 32767 * sin(2 * .pi * f * Double(i) / Double(rate)))
            for c in 0..<channels { out[i * channels + c] = c == 0 ? v : v / 2 }
        }
        return out
    }

    /// Power of frequency `f` at `rate` (Goertzel), normalized by length.
    static func power(_ x: ArraySlice<Int16>, _ f: Double, rate: Int) -> Double {
        let c = 2 * cos(2 * Double.pi * f / Double(rate))
        var s1 = 0.0, s2 = 0.0
        for v in x { let s0 = Double(v) + c * s1 - s2; s2 = s1; s1 = s0 }
        return (s1 * s1 + s2 * s2 - c * s1 * s2) / Double(x.count * x.count)
    }

    func convertWhole(_ conv: FormatConverter, _ input: [Int16], block: Int) -> [Int16] {
        var out: [Int16] = []
        input.withUnsafeBufferPointer { p in
            var i = 0
            let frames = input.count / conv.inChannels
            while i < frames {
                let n = min(block, frames - i)
                let (q, m) = conv.convert(p.baseAddress! + i * conv.inChannels, frames: n)
                out.append(contentsOf: UnsafeBufferPointer(start: q, count: m * conv.outChannels))
                i += n
            }
        }
        return out
    }

    func testRatesKeepTheToneItsLevelAndTheFrameCount() throws {
        for (inRate, outRate) in [(48000, 16000), (48000, 44100), (44100, 48000), (8000, 48000), (48000, 11025), (22050, 48000),
                                  (48000, 192_000)] {
            let conv = try FormatConverter(inRate: inRate, outRate: outRate, inChannels: 1, outChannels: 1, maxInFrames: 960)
            let input = Self.tone(1000, rate: inRate, seconds: 1)
            let out = convertWhole(conv, input, block: 960)
            // Every input frame gives its share of output (the filter delay kept: the first
            // block as long as the rest), or that minus the delay when it is skipped.
            let expected = input.count * outRate / inRate
            XCTAssertLessThanOrEqual(abs(out.count - expected), 3, "\(inRate) → \(outRate): \(out.count) frames")
            let skipping = try FormatConverter(inRate: inRate, outRate: outRate, inChannels: 1, outChannels: 1, maxInFrames: 960,
                                               skipFilterDelay: true)
            let skipped = convertWhole(skipping, input, block: 960)
            XCTAssertGreaterThan(skipping.latencyFrames, 0)
            XCTAssertLessThanOrEqual(abs(skipped.count + skipping.latencyFrames - expected), 3,
                                     "\(inRate) → \(outRate), filter delay skipped: \(skipped.count) frames")
            let w = out.indices.dropFirst(out.count / 4).prefix(out.count / 2)
            let inRMS = sqrt(Self.power(input[...], 1000, rate: inRate)), outRMS = sqrt(Self.power(out[w], 1000, rate: outRate))
            XCTAssertEqual(outRMS / inRMS, 1, accuracy: 0.03, "\(inRate) → \(outRate) keeps the 1 kHz level")
            XCTAssertLessThan(Self.power(out[w], 3000, rate: outRate), Self.power(out[w], 1000, rate: outRate) / 1000,
                              "no image or alias near 3 kHz")
        }
    }

    func testChannelConversionAndIdentity() throws {
        let st = Self.tone(500, rate: 48000, seconds: 0.1, channels: 2)   // right = left / 2
        let down = try FormatConverter(inRate: 48000, outRate: 48000, inChannels: 2, outChannels: 1, maxInFrames: 4800)
        let mono = convertWhole(down, st, block: 4800)
        XCTAssertEqual(mono.count, 4800)
        for i in 0..<4800 { XCTAssertEqual(mono[i], Int16((Int32(st[2 * i]) + Int32(st[2 * i + 1])) / 2)) }
        let up = try FormatConverter(inRate: 48000, outRate: 16000, inChannels: 1, outChannels: 2, maxInFrames: 960)
        let stereo = convertWhole(up, mono, block: 960)
        XCTAssertFalse(stereo.isEmpty)
        for i in 0..<(stereo.count / 2) { XCTAssertEqual(stereo[2 * i], stereo[2 * i + 1]) }
        let same = try FormatConverter(inRate: 48000, outRate: 48000, inChannels: 2, outChannels: 2, maxInFrames: 960)
        XCTAssertTrue(same.isIdentity)
        st.withUnsafeBufferPointer { p in
            let (q, n) = same.convert(p.baseAddress!, frames: 960)
            XCTAssertEqual(q, p.baseAddress!)
            XCTAssertEqual(n, 960)
        }
    }

    /// A converter replacing another mid-stream (a new output format) goes on from
    /// where the old one's output left off: the largest step from one sample to the
    /// next across the change stays that of the tone. (Primed and swapped in, the new
    /// one started the difference of the two filter delays earlier or later: a jump.)
    func testASplicedConverterGoesOnWithoutAJump() throws {
        let block = 960
        let input = Self.tone(440, rate: 48000, seconds: 0.2, amplitude: 0.3).flatMap { [$0, $0] }   // L = R
        let formats = [(48000, 2), (16000, 1), (44100, 2), (8000, 2), (24000, 1), (48000, 1), (192_000, 2)]
        let pcm = UnsafeMutablePointer<Int16>.allocate(capacity: input.count)
        defer { pcm.deallocate() }
        pcm.update(from: input, count: input.count)
        // Once before counting allocations (the runtime's first-use work).
        try FormatConverter(inRate: 48000, outRate: 16000, inChannels: 2, outChannels: 1, maxInFrames: block)
            .splice(after: nil, history: pcm, frames: block)
        for (a, b) in formats.flatMap({ a in formats.filter { $0 != a }.map { (a, $0) } }) {
            let old = try FormatConverter(inRate: 48000, outRate: a.0, inChannels: 2, outChannels: a.1, maxInFrames: block)
            let new = try FormatConverter(inRate: 48000, outRate: b.0, inChannels: 2, outChannels: b.1, maxInFrames: block)
            var heard: [(Int16, Int)] = []   // the first channel, and its rate
            for k in 0..<5 {
                let (q, m) = old.convert(pcm + k * block * 2, frames: block)
                heard += (0..<m).map { (q[$0 * a.1], a.0) }
            }
            let allocations = vc_alloc_count()
            new.splice(after: old, history: pcm + 4 * block * 2, frames: block)
            if vc_alloc_counter_active() != 0 { XCTAssertEqual(vc_alloc_count() - allocations, 0, "\(a) → \(b): the splice allocated") }
            for k in 5..<10 {
                let (q, m) = new.convert(pcm + k * block * 2, frames: block)
                if k == 5 { XCTAssertEqual(m, b.0 / 50, "\(a) → \(b): the first block keeps its length") }
                heard += (0..<m).map { (q[$0 * b.1], b.0) }
            }
            // From the second block on (the first holds each converter's filter delay).
            let start = a.0 / 50
            var worst = 0.0
            for i in (start + 1)..<heard.count {
                let steepest = 2 * Double.pi * 440 * 0.3 * 32767 / Double(min(heard[i].1, heard[i - 1].1))
                worst = max(worst, Double(abs(Int(heard[i].0) - Int(heard[i - 1].0))) / steepest)
            }
            XCTAssertLessThanOrEqual(worst, 1.3, "\(a) → \(b): a jump at the splice")
        }
    }

    func testBadFormatsAreRefused() {
        XCTAssertThrowsError(try FormatConverter(inRate: 7999, outRate: 48000, inChannels: 1, outChannels: 1, maxInFrames: 960))
        XCTAssertThrowsError(try FormatConverter(inRate: 48000, outRate: 192_001, inChannels: 1, outChannels: 1, maxInFrames: 960))
        XCTAssertThrowsError(try FormatConverter(inRate: 48000, outRate: 16000, inChannels: 3, outChannels: 1, maxInFrames: 960))
        XCTAssertThrowsError(try FormatConverter(inRate: 48000, outRate: 16000, inChannels: 1, outChannels: 1, maxInFrames: 960,
                                                 quality: 11))
    }

    func testResetForgetsTheOldSignal() throws {
        let conv = try FormatConverter(inRate: 48000, outRate: 16000, inChannels: 1, outChannels: 1, maxInFrames: 960)
        let loud = Self.tone(1000, rate: 48000, seconds: 0.02, amplitude: 0.9)
        _ = convertWhole(conv, loud, block: 960)
        conv.reset()
        let out = convertWhole(conv, [Int16](repeating: 0, count: 960), block: 960)
        XCTAssertEqual(out.map { abs(Int($0)) }.max() ?? 0, 0, "nothing of the old tone after a reset")
    }

    func testLevelsAndFloatSamples() {
        let t = Self.tone(1000, rate: 48000, seconds: 0.02, amplitude: 0.5)
        let l = t.withUnsafeBufferPointer { BlockLevel.measure($0.baseAddress!, count: $0.count) }
        XCTAssertEqual(BlockLevel.dbfs(l.rms), Float(20 * log10(0.5 / sqrt(2.0))), accuracy: 0.05)
        XCTAssertEqual(BlockLevel.dbfs(l.peak), Float(20 * log10(0.5)), accuracy: 0.05)
        XCTAssertEqual(BlockLevel.dbfs(0), BlockLevel.floorDBFS)
        for x: Float in [1e-6, 0.001, 0.0317, 0.5, 0.99, 1] {
            XCTAssertEqual(BlockLevel.dbfs(x), 20 * log10(x), accuracy: 1e-3)
        }
        XCTAssertEqual(int16Sample(1.5), 32767)
        XCTAssertEqual(int16Sample(-1.5), -32768)
        XCTAssertEqual(int16Sample(.nan), 0)
        XCTAssertEqual(int16Sample(0.5), 16384)
        XCTAssertEqual(floatSample(-32768), -1)
    }

    func testConvertingBlocksDoesNotAllocate() throws {
        try XCTSkipIf(vc_alloc_counter_active() == 0, "the allocation counter is off under sanitizers")
        let a = try FormatConverter(inRate: 44100, outRate: 48000, inChannels: 1, outChannels: 1, maxInFrames: 960)
        let b = try FormatConverter(inRate: 48000, outRate: 16000, inChannels: 2, outChannels: 1, maxInFrames: 960)
        let c = try FormatConverter(inRate: 48000, outRate: 44100, inChannels: 2, outChannels: 2, maxInFrames: 960)
        let d = try FormatConverter(inRate: 16000, outRate: 48000, inChannels: 1, outChannels: 2, maxInFrames: 960)
        let input = Self.tone(700, rate: 48000, seconds: 0.02, channels: 2)
        let pcm = UnsafeMutablePointer<Int16>.allocate(capacity: input.count)
        defer { pcm.deallocate() }
        pcm.update(from: input, count: input.count)
        var produced = 0
        func block() {
            produced += a.convert(pcm, frames: 960).frames + b.convert(pcm, frames: 960).frames
            produced += c.convert(pcm, frames: 960).frames + d.convert(pcm, frames: 960).frames
        }
        for _ in 0..<10 { block() }
        // This thread's own allocations: in a process of its own (make test runs each test
        // so), another thread of the runner allocated once in one of six runs.
        let before = vc_alloc_count_thread()
        for _ in 0..<500 { block() }
        let n = vc_alloc_count_thread() - before
        print("format conversion: \(n) allocations over 500 blocks of 4 converters (\(produced) frames out)")
        XCTAssertEqual(n, 0)
    }
}
