// SpeexDSP processing measured on synthetic speech, noise and echo paths.
import Glibc
import VoiceCatAudio
import VoiceCatSimulation
import XCTest

enum TestAudio {
    /// Speech-like bursts: 1 s "talking", 1 s pause, repeated; harmonic with a syllable envelope.
    static func speechWithPauses(seconds: Double, level: Double, seed: Double = 0) -> [Double] {
        (0..<Int(seconds * 48000)).map { i in
            let t = Double(i) / 48000
            guard Int(t) % 2 == 0 else { return 0 }
            let env = 0.55 + 0.45 * sin(2 * .pi * 3.1 * t + seed)
            let f0 = 140 + 25 * sin(2 * .pi * 0.6 * t + seed)
            let s = sin(2 * .pi * f0 * t) + 0.6 * sin(4 * .pi * f0 * t + 0.4) + 0.35 * sin(6 * .pi * f0 * t + 1.3) + 0.2 * sin(10 * .pi * f0 * t)
            return level * env * s / 1.4
        }
    }

    /// Stationary white noise with the given RMS.
    static func noise(count: Int, rms: Double, seed: UInt64) -> [Double] {
        var rng = TraceGenerator.Random(seed: seed)
        return (0..<count).map { _ in rng.normal() * rms }
    }

    static func rms(_ x: ArraySlice<Double>) -> Double { (x.reduce(0) { $0 + $1 * $1 } / Double(max(1, x.count))).squareRoot() }
    static func rms(_ x: ArraySlice<Int16>) -> Double { (x.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(max(1, x.count))).squareRoot() }
    static func db(_ r: Double) -> Double { 20 * log10(max(r, 1e-9)) }

    static func toInt16(_ x: [Double]) -> [Int16] { x.map { Int16(max(-32767, min(32767, $0.rounded()))) } }

    /// Speech at the level that gives `snrDB` against noise of RMS `noiseRMS` while talking.
    static func noisySpeech(seconds: Double, snrDB: Double, noiseRMS: Double) -> (mix: [Int16], speech: [Double]) {
        let probe = speechWithPauses(seconds: 1, level: 1)
        let unitRMS = rms(probe[...])
        let speech = speechWithPauses(seconds: seconds, level: noiseRMS * pow(10, snrDB / 20) / unitRMS)
        let n = noise(count: speech.count, rms: noiseRMS, seed: 5)
        return (toInt16(zip(speech, n).map { $0 + $1 }), speech)
    }

    /// Samples inside the pauses (odd seconds), skipping the edges.
    static func pauses(_ x: [Int16], from: Int) -> [Int16] {
        var out: [Int16] = []
        var s = from
        while (s + 1) * 48000 <= x.count {
            if s % 2 == 1 { out += x[(s * 48000 + 9600)..<((s + 1) * 48000 - 4800)] }
            s += 1
        }
        return out
    }
}

final class ProcessingTests: XCTestCase {
    func testListenerNoiseReductionLowersTheNoiseFloorInPausesBy10dB() {
        let (mix, _) = TestAudio.noisySpeech(seconds: 8, snrDB: 5, noiseRMS: 1000)
        var stereo = [Int16](repeating: 0, count: mix.count * 2)
        for i in 0..<mix.count { stereo[2 * i] = mix[i]; stereo[2 * i + 1] = mix[i] }
        let nr = NoiseReducer(frameSamples: 960, streamChannels: 1)
        stereo.withUnsafeMutableBufferPointer { p in
            var off = 0
            while off + 960 <= mix.count { nr.process(p.baseAddress! + off * 2, frames: 960); off += 960 }
        }
        let left = stride(from: 0, to: stereo.count, by: 2).map { stereo[$0] }
        let before = TestAudio.rms(TestAudio.pauses(mix, from: 2)[...]), after = TestAudio.rms(TestAudio.pauses(left, from: 2)[...])
        let drop = TestAudio.db(before) - TestAudio.db(after)
        print("listener NR: noise floor in pauses \(Int(TestAudio.db(before))) → \(Int(TestAudio.db(after))) dB (−\(String(format: "%.1f", drop)) dB)")
        XCTAssertGreaterThanOrEqual(drop, 10)
        XCTAssertEqual(left, stride(from: 1, to: stereo.count, by: 2).map { stereo[$0] }, "a mono stream stays L = R")
    }

    func run(_ apm: SpeexApm, near: [Int16], far: [Int16]? = nil) -> [Int16] {
        var out = near
        let b = apm.blockSize
        out.withUnsafeMutableBufferPointer { o in
            var off = 0
            while off + b <= near.count {
                if let far {
                    far.withUnsafeBufferPointer { f in apm.process(o.baseAddress! + off, farEnd: f.baseAddress! + off) }
                } else {
                    apm.process(o.baseAddress! + off, farEnd: nil)
                }
                off += b
            }
        }
        return out
    }

    /// A library writes nothing to its host's stderr (its lines go to the log
    /// callback): setting SpeexDSP's VAD, even off, printed "warning: The VAD has been
    /// replaced by a hack pending a complete rewrite" on every vc_set_send_processing
    /// that turned on noise suppression or AGC.
    func testSendProcessingWritesNothingToStderr() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("vc-stderr-\(getpid()).txt").path
        let file = open(path, O_CREAT | O_TRUNC | O_RDWR, 0o600)
        XCTAssertGreaterThanOrEqual(file, 0)
        defer { close(file); unlink(path) }
        fflush(stderr)
        let saved = dup(2)
        dup2(file, 2)
        for settings in [SendProcessing(noiseSuppression: true), SendProcessing(agc: true),
                         SendProcessing(noiseSuppression: true, agc: true, echoCancellation: true)] {
            let apm = SpeexApm(frameSamples: 960, settings: settings)
            _ = run(apm, near: [Int16](repeating: 100, count: 1920))
        }
        fflush(stderr)
        dup2(saved, 2)
        close(saved)
        let written = lseek(file, 0, SEEK_END)
        var text = [UInt8](repeating: 0, count: Int(max(0, min(written, 512))))
        _ = pread(file, &text, text.count, 0)
        XCTAssertEqual(written, 0, "written to stderr: \(String(decoding: text, as: UTF8.self))")
    }

    func testTalkerNoiseSuppressionLowersNoiseInPausesBy10dB() {
        let (mix, _) = TestAudio.noisySpeech(seconds: 8, snrDB: 5, noiseRMS: 1000)
        let out = run(SpeexApm(frameSamples: 960, settings: SendProcessing(noiseSuppression: true)), near: mix)
        let before = TestAudio.rms(TestAudio.pauses(mix, from: 2)[...]), after = TestAudio.rms(TestAudio.pauses(out, from: 2)[...])
        let drop = TestAudio.db(before) - TestAudio.db(after)
        print("talker NS: noise in pauses −\(String(format: "%.1f", drop)) dB")
        XCTAssertGreaterThanOrEqual(drop, 10)
    }

    func testAGCBringsAQuietTalkerToItsTarget() {
        // −30 dBFS speech (RMS while talking) in 1 s bursts over a faint noise floor (−70 dBFS).
        let target: Float = 0.125  // −18 dBFS
        let probe = TestAudio.speechWithPauses(seconds: 1, level: 1)
        let level = 32768 * pow(10, -30.0 / 20) / TestAudio.rms(probe[...])
        let speech = TestAudio.speechWithPauses(seconds: 20, level: level)
        let floor = TestAudio.noise(count: speech.count, rms: 32768 * pow(10, -70.0 / 20), seed: 9)
        let input = TestAudio.toInt16(zip(speech, floor).map { $0 + $1 })
        var settings = SendProcessing(agc: true)
        settings.agcLevel = target
        let out = run(SpeexApm(frameSamples: 960, settings: settings), near: input)
        // Talking in the last talkspurts (16-17 s and 18-19 s).
        let talk = Array(input[(16 * 48000)..<(17 * 48000)] + input[(18 * 48000)..<(19 * 48000)])
        let talkOut = Array(out[(16 * 48000)..<(17 * 48000)] + out[(18 * 48000)..<(19 * 48000)])
        let inDB = TestAudio.db(TestAudio.rms(talk[...]) / 32768)
        let outDB = TestAudio.db(TestAudio.rms(talkOut[...]) / 32768)
        print("AGC: input \(String(format: "%.1f", inDB)) dBFS → output \(String(format: "%.1f", outDB)) dBFS (target \(String(format: "%.1f", TestAudio.db(Double(target)))))")
        XCTAssertEqual(outDB, TestAudio.db(Double(target)), accuracy: 6)
    }

    /// far → delay, attenuation and a low-pass filter: the room between speaker and microphone.
    func echoPath(_ far: [Double], delayMs: Double) -> [Double] {
        let d = Int(delayMs * 48)
        var y = [Double](repeating: 0, count: far.count)
        var lp = 0.0
        for i in 0..<far.count {
            let x = i >= d ? far[i - d] : 0
            lp += 0.3 * (x - lp)
            y[i] = 0.5 * lp + (i >= d + 480 ? 0.15 * far[i - d - 480] : 0)   // direct path and one reflection
        }
        return y
    }

    func testEchoCancellationERLEAndDoubleTalk() {
        for delay in [40.0, 120.0] {
            let seconds = 14.0
            var far: [Double] = []
            for k in 0..<Int(seconds) { far += TestAudio.speechWithPauses(seconds: 1, level: 6000, seed: Double(k) * 0.7) }
            let echo = echoPath(far, delayMs: delay)
            // Near-end talks only from 10 s to 12 s (double-talk), silent otherwise.
            let nearTalk: [Double] = (0..<far.count).map { i in
                let t = Double(i) / 48000
                return t >= 10 && t < 12 ? 3000 * sin(2 * .pi * 310 * t) * (0.6 + 0.4 * sin(2 * .pi * 2.3 * t)) : 0
            }
            let mic = TestAudio.toInt16(zip(echo, nearTalk).map { $0 + $1 })
            let farI = TestAudio.toInt16(far)
            let out = run(SpeexApm(frameSamples: 960, settings: SendProcessing(echoCancellation: true)), near: mic, far: farI)
            // ERLE after convergence, on echo alone (5 s to 10 s).
            let w = (5 * 48000)..<(10 * 48000)
            let erle = TestAudio.db(TestAudio.rms(mic[w])) - TestAudio.db(TestAudio.rms(out[w]))
            // Double-talk: the near-end speech must survive (within 6 dB).
            let dt = (10 * 48000 + 4800)..<(12 * 48000)
            let nearDB = TestAudio.db(TestAudio.rms(nearTalk[dt]))
            let outDB = TestAudio.db(TestAudio.rms(out[dt]))
            print("AEC, echo delay \(Int(delay)) ms: ERLE \(String(format: "%.1f", erle)) dB; double-talk near-end \(String(format: "%.1f", nearDB)) dB → output \(String(format: "%.1f", outDB)) dB")
            XCTAssertGreaterThanOrEqual(erle, 15)
            XCTAssertEqual(outDB, nearDB, accuracy: 6)
        }
    }
}
