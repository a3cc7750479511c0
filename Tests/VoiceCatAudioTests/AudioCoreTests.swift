// Pure audio core: reframer, limiter, Opus (the jitter buffer: JitterBufferTests.swift).
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

final class MixerTests: XCTestCase {
    func testLimiterKeepsManyLoudStreamsInsideInt16WithoutWrap() {
        let bus = MixBus(capacityFrames: 480)
        bus.clear(frames: 480)
        var loud = [Int16](repeating: 0, count: 960)
        for i in 0..<480 { let v = Int16(i % 2 == 0 ? 30000 : -30000); loud[2 * i] = v; loud[2 * i + 1] = v }
        for _ in 0..<16 { loud.withUnsafeBufferPointer { bus.add($0.baseAddress!, frames: 480, gain: 1) } }
        var out = [Int16](repeating: 0, count: 960)
        out.withUnsafeMutableBufferPointer { bus.render(into: $0.baseAddress!, frames: 480) }
        let top = Int(MixBus.ceiling * 32767)
        for i in 0..<960 {
            XCTAssertEqual(out[i].signum(), loud[i].signum(), "sign flipped (wrap-around) at \(i)")
            XCTAssertEqual(abs(Int(out[i])), top, accuracy: 2, "at the ceiling, not past it, at \(i)")
        }
    }

    /// A mix past full scale is turned down, not flattened: a sine at twice full scale
    /// comes out a sine at the ceiling (its crest factor stays sqrt 2; clipped, it fell
    /// toward 1), and once it stops the gain returns within the release. A mix below
    /// the ceiling passes unchanged, sample for sample.
    func testTheLimiterTurnsALoudMixDownInsteadOfFlatteningIt() {
        let bus = MixBus(capacityFrames: 960)
        var out = [Int16](repeating: 0, count: 1920)
        var phase = 0
        func block(amplitude: Float) -> [Int16] {
            bus.clear(frames: 960)
            for i in 0..<960 {
                let v = amplitude * sin(2 * Float.pi * 1000 * Float(phase + i) / 48000)
                bus.acc[2 * i] = v; bus.acc[2 * i + 1] = v
            }
            phase += 960
            out.withUnsafeMutableBufferPointer { bus.render(into: $0.baseAddress!, frames: 960) }
            return out
        }
        let quiet = block(amplitude: 0.85)
        for i in 0..<960 { XCTAssertEqual(quiet[2 * i], Int16((0.85 * sin(2 * Float.pi * 1000 * Float(i) / 48000) * 32767).rounded())) }
        _ = block(amplitude: 2)
        let settled = block(amplitude: 2)
        let samples = stride(from: 0, to: 1920, by: 2).map { Double(settled[$0]) }
        let peak = samples.map(abs).max()!
        let rms = (samples.map { $0 * $0 }.reduce(0, +) / Double(samples.count)).squareRoot()
        XCTAssertEqual(peak, Double(MixBus.ceiling) * 32767, accuracy: 40)
        XCTAssertGreaterThan(peak / rms, 1.38, "a sine, not a flattened one (crest factor \(peak / rms))")
        var back = 0
        while bus.limiterGain < 1 && back < 20 { _ = block(amplitude: 0.5); back += 1 }
        XCTAssertLessThanOrEqual(back, 6, "the gain is back within the release (\(back) blocks)")
    }

    /// A frame that is not a number (in either channel) or infinite is silenced, not
    /// converted to full scale, and leaves the limiter and its neighbours alone; a reset
    /// limiter starts at full gain.
    func testNonFiniteFramesAreSilencedAndTheLimiterResets() {
        let bus = MixBus(capacityFrames: 8)
        bus.clear(frames: 8)
        for i in 0..<8 { bus.acc[2 * i] = 0.25; bus.acc[2 * i + 1] = -0.25 }
        bus.acc[2] = .nan                      // frame 1, left
        bus.acc[5] = .nan                      // frame 2, right only
        bus.acc[6] = .infinity                 // frame 3
        bus.acc[9] = -.infinity                // frame 4, right
        var out = [Int16](repeating: 7, count: 16)
        out.withUnsafeMutableBufferPointer { bus.render(into: $0.baseAddress!, frames: 8) }
        let quarter = Int16((0.25 * 32767).rounded())
        XCTAssertEqual(Array(out[2..<10]), [0, 0, 0, 0, 0, 0, 0, 0], "frames 1-4 silenced: \(out)")
        XCTAssertEqual([out[0], out[1], out[14], out[15]], [quarter, -quarter, quarter, -quarter], "the rest unchanged")
        XCTAssertEqual(bus.limiterGain, 1, "nothing loud was heard")
        bus.clear(frames: 8)
        for i in 0..<16 { bus.acc[i] = 3 }
        out.withUnsafeMutableBufferPointer { bus.render(into: $0.baseAddress!, frames: 8) }
        XCTAssertLessThan(bus.limiterGain, 0.5)
        bus.resetLimiter()
        XCTAssertEqual(bus.limiterGain, 1)
    }

    /// A ramped add moves the gain in a straight line over the block, wherever a piece
    /// of it lands (a block made of two pieces gets the same ramp as one of a piece), and
    /// ends on the new gain: a gain or mute change is not a step between two samples.
    func testAGainRampMovesInAStraightLineOverTheBlock() {
        let ramp = GainRamp(from: 1, to: 0, frames: 480)
        XCTAssertEqual(ramp.gain(at: 479), 0)
        XCTAssertEqual(ramp.gain(at: 239), 0.5, accuracy: 1e-6)
        let ones = [Int16](repeating: 16384, count: 960)             // 0.5 full scale, stereo
        let monoHalf = [Float](repeating: 0.5, count: 480)
        let whole = MixBus(capacityFrames: 480), pieces = MixBus(capacityFrames: 480), mono = MixBus(capacityFrames: 480)
        for b in [whole, pieces, mono] { b.clear(frames: 480) }
        ones.withUnsafeBufferPointer { p in
            whole.add(p.baseAddress!, frames: 480, ramp: ramp)
            pieces.add(p.baseAddress!, frames: 100, ramp: ramp)
            pieces.add(p.baseAddress! + 200, frames: 380, ramp: ramp, at: 100)
        }
        monoHalf.withUnsafeBufferPointer { mono.add($0.baseAddress!, frames: 480, mono: true, ramp: ramp) }
        var largestStep: Float = 0
        for i in 0..<960 {
            XCTAssertEqual(whole.acc[i], pieces.acc[i], accuracy: 1e-6, "sample \(i): pieces ramp as the whole block")
            XCTAssertEqual(whole.acc[i], mono.acc[i], accuracy: 1e-6, "sample \(i): mono ramps as stereo")
            if i >= 2 { largestStep = max(largestStep, abs(whole.acc[i] - whole.acc[i - 2])) }
        }
        XCTAssertEqual(whole.acc[0], 0.5 * ramp.gain(at: 0), accuracy: 1e-6)
        XCTAssertEqual(whole.acc[958], 0, accuracy: 1e-6, "the block ends on the new gain")
        XCTAssertLessThan(largestStep, 0.5 / 400, "no step: 1/480 of the change per frame")
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

    /// playNext decodes a period as int16 or as float: the same audio either way, and
    /// a packet shorter than the frame (a 10 ms packet on a 20 ms stream) leaves the
    /// rest of the frame silent, not what the buffer held before (the receive path
    /// decodes every stream into one buffer: it would be another stream's audio).
    func testPlayNextGivesTheSameAudioAsInt16AndFloatAndSilenceAfterAShortPacket() throws {
        var ten = AudioConfig.speech
        ten.frameMicros = 10_000
        let enc20 = try OpusEncoderBox(config: .speech), enc10 = try OpusEncoderBox(config: ten)
        let tone = (0..<(960 * 6)).map { Int16(8000 * sin(Double($0) * 2 * .pi * 440 / 48000)) }
        var packets: [[UInt8]] = []
        var buf = [UInt8](repeating: 0, count: 1500)
        for k in 0..<6 {
            // Frames 0-4 are 20 ms packets; frame 5 is a 10 ms packet.
            let e = k == 5 ? enc10 : enc20
            let len = try tone.withUnsafeBufferPointer { p in try buf.withUnsafeMutableBytes { try e.encode(p.baseAddress! + k * 960, into: $0) } }
            packets.append(Array(buf[0..<len]))
        }
        func play(float: Bool, channels: Int) throws -> [[Float]] {
            let jitter = JitterBuffer(capacity: 16, maxPayload: 1500)
            jitter.reset(frameSamples: 960)
            let dec = try OpusDecoderBox()
            dec.setChannels(channels)
            for (k, p) in packets.enumerated() {
                p.withUnsafeBytes { _ = jitter.insert(seq: UInt64(k), timestamp: UInt32(k * 960), flags: k == 0 ? .marker : [], payload: $0,
                                                      arrivalMs: Double(k) * 20) }
            }
            var frames: [[Float]] = []
            // Stereo-sized: what another stream decoded into it before.
            var i16 = [Int16](repeating: 0, count: 1920), f32 = [Float](repeating: 0, count: 1920)
            var t = 40.0
            while frames.count < 6 && t < 400 {
                // What another stream decoded into the buffer before.
                for i in 0..<1920 { i16[i] = 12345; f32[i] = 0.376 }
                let playout = float
                    ? f32.withUnsafeMutableBufferPointer { dec.playNext(from: jitter, dred: nil, frames: 960, nowMs: t, into: .float($0.baseAddress!)) }
                    : i16.withUnsafeMutableBufferPointer { dec.playNext(from: jitter, dred: nil, frames: 960, nowMs: t, into: $0.baseAddress!) }
                t += 20
                guard case .packet = playout else { continue }
                frames.append(Array((float ? f32 : i16.map { Float($0) / 32768 })[0..<(960 * channels)]))
            }
            return frames
        }
        for channels in [2, 1] {
            let a = try play(float: false, channels: channels), b = try play(float: true, channels: channels)
            XCTAssertEqual(a.count, 6, "every packet played")
            XCTAssertEqual(b.count, 6)
            for k in 0..<min(a.count, b.count) {
                let worst = zip(a[k], b[k]).map { abs($0 - $1) }.max()!
                XCTAssertLessThanOrEqual(worst, 2.0 / 32768, "\(channels) ch, frame \(k): int16 and float differ by \(worst * 32768) LSB")
            }
            for f in [a.last!, b.last!] {
                XCTAssertGreaterThan(f[0..<(480 * channels)].map(abs).max()!, 0.05, "the short packet's 10 ms play")
                XCTAssertEqual(f[(480 * channels)...].map(abs).max()!, 0, "\(channels) ch: the rest of its frame is silence")
            }
        }
    }

    func testBadConfigurationIsACodecError() {
        var cfg = AudioConfig.speech
        cfg.frameMicros = 30000
        XCTAssertThrowsError(try OpusEncoderBox(config: cfg))
    }
}

final class LossRecoveryTests: XCTestCase {
    /// Speech-like: a harmonic voice with a syllable envelope.
    func voice(_ n: Int) -> [Int16] {
        (0..<n).map { i in
            let t = Double(i) / 48000
            let env = 0.55 + 0.45 * sin(2 * .pi * 3.3 * t)
            let f0 = 160 + 20 * sin(2 * .pi * 0.7 * t)
            let s = sin(2 * .pi * f0 * t) + 0.6 * sin(4 * .pi * f0 * t + 0.5) + 0.3 * sin(6 * .pi * f0 * t + 1.1)
            return Int16(9000 * env * s / 1.9)
        }
    }

    func snr(_ ref: ArraySlice<Int16>, _ x: ArraySlice<Int16>) -> Double {
        var sig = 0.0, err = 0.0
        for (a, b) in zip(ref, x) { sig += Double(a) * Double(a); let d = Double(a) - Double(b); err += d * d }
        return 10 * log10(sig / max(err, 1e-9))
    }

    func testASingleLostPacketIsRebuiltBetterByFECThanByPLC() throws {
        var cfg = AudioConfig.speech
        cfg.fec = true
        cfg.expectedPacketLoss = 20
        let enc = try OpusEncoderBox(config: cfg)
        let n = cfg.frameSamples
        let pcm = voice(n * 50)
        var packets: [[UInt8]] = []
        var buf = [UInt8](repeating: 0, count: 1500)
        for f in 0..<50 {
            let len = try pcm.withUnsafeBufferPointer { p in try buf.withUnsafeMutableBytes { try enc.encode(p.baseAddress! + f * n, into: $0) } }
            packets.append(Array(buf[0..<len]))
        }
        func decodeAll(lost: Int?, useFEC: Bool) throws -> [Int16] {
            let dec = try OpusDecoderBox()
            var out: [Int16] = []
            var frame = [Int16](repeating: 0, count: n * 2)
            for f in 0..<50 {
                try frame.withUnsafeMutableBufferPointer { o in
                    if f == lost {
                        if useFEC {
                            _ = try packets[f + 1].withUnsafeBytes { try dec.decode($0, fec: true, frames: n, into: o.baseAddress!) }
                        } else {
                            _ = try dec.decode(nil, frames: n, into: o.baseAddress!)
                        }
                    } else {
                        _ = try packets[f].withUnsafeBytes { try dec.decode($0, frames: n, into: o.baseAddress!) }
                    }
                }
                out += stride(from: 0, to: n * 2, by: 2).map { frame[$0] }
            }
            return out
        }
        let clean = try decodeAll(lost: nil, useFEC: false)
        var gains: [Double] = []
        for lost in [20, 27, 33, 40] {
            let plc = try decodeAll(lost: lost, useFEC: false)
            let fec = try decodeAll(lost: lost, useFEC: true)
            let w = (lost * n)..<((lost + 1) * n)
            let sPLC = snr(clean[w], plc[w]), sFEC = snr(clean[w], fec[w])
            print("lost frame \(lost): SNR against the clean decode: PLC \(String(format: "%.1f", sPLC)) dB, FEC \(String(format: "%.1f", sFEC)) dB")
            // Where the next packet carries no LBRR data, FEC decoding is PLC: never worse.
            XCTAssertGreaterThanOrEqual(sFEC, sPLC - 0.1)
            gains.append(sFEC - sPLC)
        }
        let mean = gains.reduce(0, +) / Double(gains.count)
        print("mean SNR gain of FEC over PLC: \(String(format: "%.1f", mean)) dB")
        XCTAssertGreaterThan(mean, 6, "in-band FEC must rebuild a single lost frame better than PLC")
        XCTAssertGreaterThan(gains.max()!, 10)
    }

    func testDREDIsDetectedAtRunTimeAndAbsentDREDFallsBack() throws {
        // Debian's libopus 1.3 has no DRED: asking for it must not fail the encoder.
        var cfg = AudioConfig.speech
        cfg.dred = true
        let enc = try OpusEncoderBox(config: cfg)
        XCTAssertEqual(enc.dredEnabled, DRED.isAvailable)
        print("DRED in the loaded libopus: \(DRED.isAvailable)")
    }
}
