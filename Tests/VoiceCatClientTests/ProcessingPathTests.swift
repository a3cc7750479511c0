// The SpeexDSP stages in the engine's own receive and send paths (the slots and
// streams of a VoiceClient), driven deterministically without a network.
import Foundation
@testable import VoiceCatClient
import VoiceCatAllocCounter
import VoiceCatAudio
import VoiceCatSimulation
import VoiceCatProtocol
import VoiceCatSystem
import VoiceCatTestSupport
import XCTest

final class ProcessingPathTests: XCTestCase {
    /// Two host threads set one stream's noise reduction at once, one on (it already
    /// is), one off: whichever lands last, the settings and the denoiser agree. (The
    /// call turning it on saw a denoiser, built none, and installed none after the other
    /// call had freed it: NR read as on with no denoiser running, about once in 50,000
    /// such pairs.)
    func testConcurrentNoiseReductionSwitchesLeaveSettingsAndDenoiserInStep() throws {
        let rs = try ReceiveSet(capacity: 2, networkWake: WakeEvent())
        XCTAssertTrue(rs.add(RemoteStream(userID: 7, streamID: 1, ssrc: 42, kind: .mic, audio: AudioConfig()), username: "x"))
        let on: RemoteSettings = { var s = RemoteSettings(); s.noiseReduction = true; return s }()
        let off: RemoteSettings = { var s = RemoteSettings(); s.noiseReduction = false; return s }()
        var trials = 0, bad = 0
        let until = MonotonicClock.nanoseconds() + 5_000_000_000
        while MonotonicClock.nanoseconds() < until && bad == 0 {
            try rs.setSettings(ssrc: 42, on)
            let go = DispatchSemaphore(value: 0), done = DispatchGroup()
            DispatchQueue.global().async(group: done) { go.wait(); try? rs.setSettings(ssrc: 42, off) }
            DispatchQueue.global().async(group: done) { go.wait(); try? rs.setSettings(ssrc: 42, on) }
            go.signal(); go.signal()
            done.wait()
            trials += 1
            let (want, have) = try rs.withSlot(ssrc: 42) { ($0.settings.noiseReduction, $0.noiseReducer != nil) }
            if want != have { bad += 1 }
        }
        print("concurrent NR switches: \(trials) pairs, \(bad) left the settings and the denoiser apart")
        XCTAssertEqual(bad, 0)
    }

    /// 1 s speech-like bursts and 1 s pauses over stationary noise, at `snrDB` while talking.
    static func noisySpeech(seconds: Int, snrDB: Double, seed: UInt64, f0: Double) -> [Int16] {
        var rng = TraceGenerator.Random(seed: seed)
        let noiseRMS = 1000.0
        let speechRMS = noiseRMS * pow(10, snrDB / 20)
        return (0..<(seconds * 48000)).map { i in
            let t = Double(i) / 48000
            var s = 0.0
            if Int(t) % 2 == 0 {
                let env = 0.55 + 0.45 * sin(2 * .pi * 3.1 * t)
                s = speechRMS * 1.6 * env * (sin(2 * .pi * f0 * t) + 0.6 * sin(4 * .pi * f0 * t + 0.4) + 0.35 * sin(6 * .pi * f0 * t + 1.3)) / 1.3
            }
            return Int16(max(-32767, min(32767, s + rng.normal() * noiseRMS)))
        }
    }

    static func packets(_ pcm: [Int16]) throws -> [[UInt8]] {
        let enc = try OpusEncoderBox(config: .speech)
        var out: [[UInt8]] = []
        var buf = [UInt8](repeating: 0, count: 1500)
        for f in 0..<(pcm.count / 960) {
            let n = try pcm.withUnsafeBufferPointer { p in try buf.withUnsafeMutableBytes { try enc.encode(p.baseAddress! + f * 960, into: $0) } }
            out.append(Array(buf[0..<n]))
        }
        return out
    }

    /// A client (never connected) with two receive slots playing A and B.
    func listener(nrOnA: Bool) throws -> (VoiceClient, RemoteSlot, RemoteSlot) {
        let c = try VoiceClient()
        XCTAssertTrue(c.receive.add(RemoteStream(userID: 1, streamID: 1, ssrc: 1001, kind: .mic, audio: .speech), username: "a"))
        XCTAssertTrue(c.receive.add(RemoteStream(userID: 2, streamID: 1, ssrc: 1002, kind: .mic, audio: .speech), username: "b"))
        let a = c.receive.slots[0], b = c.receive.slots[1]
        try c.setRemote(ssrc: 1001, RemoteSettings(noiseReduction: nrOnA))
        XCTAssertEqual(try c.isNoiseReducing(ssrc: 1001), nrOnA)
        XCTAssertFalse(try c.isNoiseReducing(ssrc: 1002))
        return (c, a, b)
    }

    /// Plays both streams tick by tick; returns each slot's own output (left channel).
    func play(_ a: RemoteSlot, _ b: RemoteSlot, _ pa: [[UInt8]], _ pb: [[UInt8]]) -> ([Int16], [Int16]) {
        let busA = MixBus(capacityFrames: 960), busB = MixBus(capacityFrames: 960)
        let scratch = RemoteSlot.Scratch()
        defer { scratch.deallocate() }
        var outA: [Int16] = [], outB: [Int16] = []
        var pcm = [Int16](repeating: 0, count: 1920)
        for k in 0..<pa.count {
            for (slot, p) in [(a, pa[k]), (b, pb[k])] {
                p.withUnsafeBytes { _ = slot.jitter.insert(seq: UInt64(k), timestamp: UInt32(k * 960), flags: [], payload: $0, arrivalMs: Double(k) * 20) }
            }
            for (slot, bus) in [(a, busA), (b, busB)] {
                bus.clear(frames: 960)
                slot.lock.withLock { slot.render(into: bus, frames: 960, nowMs: Double(k) * 20 + 10, scratch: scratch) }
                pcm.withUnsafeMutableBufferPointer { bus.render(into: $0.baseAddress!, frames: 960) }
                let left = stride(from: 0, to: 1920, by: 2).map { pcm[$0] }
                if slot === a { outA += left } else { outB += left }
            }
        }
        return (outA, outB)
    }

    /// The listener's denoiser switched on, off again before it was faded in, on again
    /// much later, and once it is heard off and on between two renders: the stream
    /// glides 10 ms later (its denoiser unheard: the stream is the other stream's audio,
    /// which has none, read at the glide's lag), back to its own time (sample for sample
    /// the other stream's), later again; each new denoiser fades in only once the stream
    /// is at its delay and it has run a frame, never from its empty first window (a 10 ms
    /// hole); and nothing dips or steps on the way (a cross-fade between the stream and
    /// itself 10 ms apart did: a comb; a fade from the decoded frame, a splice).
    func testADenoiserSwitchedOffBeforeItsFadeLeavesTheNextOneToPrimeAnew() throws {
        let (c, a, b) = try listener(nrOnA: false)
        // A voice of gliding pitch at a steady level: a hole or a comb, not syllables, makes a dip.
        var phase = 0.0
        let voice = (0..<(2 * 48000)).map { i -> Int16 in
            phase += 2 * .pi * (190 + 55 * sin(2 * .pi * 0.9 * Double(i) / 48000)) / 48000
            return Int16(0.3 * 32767 * (sin(phase) + 0.5 * sin(2 * phase + 1) + 0.3 * sin(3 * phase + 2)) / 1.8)
        }
        let packets = try Self.packets(voice)
        let bus = MixBus(capacityFrames: 960)
        let scratch = RemoteSlot.Scratch()
        defer { scratch.deallocate() }
        var pcm = [Int16](repeating: 0, count: 1920)
        // What A plays while no denoiser is heard: B (no denoiser) read at A's lag.
        let expected = LagGlide(maxLag: 480, maxFrame: 960)
        var unheard: [Int: Bool] = [:]        // tick -> A is B at the lag, to within rounding
        var differs: [Int: Int] = [:]         // tick -> samples where A differs from B
        var heard: [[Int16]] = [[], []]       // A's and B's left channel
        for k in 0..<packets.count {
            if k == 10 { try c.setRemote(ssrc: 1001, RemoteSettings(noiseReduction: true)) }    // gliding from 10
            if k == 11 { try c.setRemote(ssrc: 1001, RemoteSettings(noiseReduction: false)) }   // off before its fade
            if k == 30 { try c.setRemote(ssrc: 1001, RemoteSettings(noiseReduction: true)) }    // a new one
            if k == 70 {                                                                        // heard: off, on
                try c.setRemote(ssrc: 1001, RemoteSettings(noiseReduction: false))
                try c.setRemote(ssrc: 1001, RemoteSettings(noiseReduction: true))
            }
            if k == 10 || k == 30 { expected.glide(to: 480, perSample: RemoteSlot.glideRate) }
            if k == 11 { expected.glide(to: 0, perSample: RemoteSlot.glideRate) }
            var outs: [[Int16]] = []
            for slot in [a, b] {
                packets[k].withUnsafeBytes { _ = slot.jitter.insert(seq: UInt64(k), timestamp: UInt32(k * 960), flags: [], payload: $0, arrivalMs: Double(k) * 20) }
                bus.clear(frames: 960)
                slot.lock.withLock { slot.render(into: bus, frames: 960, nowMs: Double(k) * 20 + 10, scratch: scratch) }
                pcm.withUnsafeMutableBufferPointer { bus.render(into: $0.baseAddress!, frames: 960) }
                outs.append(pcm)
            }
            differs[k] = zip(outs[0], outs[1]).filter { $0 != $1 }.count
            var lagged = outs[1]
            lagged.withUnsafeBufferPointer { expected.push($0.baseAddress!, frames: 960) }
            lagged.withUnsafeMutableBufferPointer { expected.read(into: $0.baseAddress!, frames: 960) }
            unheard[k] = zip(outs[0], lagged).allSatisfy { abs(Int($0) - Int($1)) <= 3 }
            for n in 0..<2 { heard[n] += stride(from: 0, to: 1920, by: 2).map { outs[n][$0] } }
        }
        XCTAssertEqual((0..<10).map { differs[$0] ?? -1 }, Array(repeating: 0, count: 10))
        XCTAssertGreaterThan(differs[10] ?? 0, 0, "the stream starts to glide at once")
        XCTAssertEqual((13..<30).map { differs[$0] ?? -1 }, Array(repeating: 0, count: 17),
                       "back on the decoded audio's own time, sample for sample, nothing faded in")
        let fadedIn = (31..<70).first { unheard[$0] == false } ?? -1
        // (25 frames of 2 % from tick 30; the lag's sum of 24,000 steps may take a sample more.)
        XCTAssertTrue((55...56).contains(fadedIn), "unheard while the stream glides 10 ms, then faded in: tick \(fadedIn)")
        XCTAssertTrue((10..<55).allSatisfy { unheard[$0] == true }, "the denoiser heard before the stream is at its delay")
        XCTAssertFalse(unheard[60] ?? true, "then heard")
        XCTAssertEqual(unheard[71], true, "off and on while heard: the new denoiser's first frame unheard (the stream at its delay)")
        XCTAssertEqual(unheard[72], false, "then faded in")
        XCTAssertTrue((73..<packets.count).allSatisfy { unheard[$0] == false }, "and heard")
        // No hole or comb: each 5 ms against the 100 ms either side of it (until the first
        // fade-in and a few frames after; the denoiser then turns this steady voice down,
        // as it would a noise), A's and B's; no step between two samples (a splice).
        func quietest(_ x: [Int16], upTo tick: Int) -> Double {
            let rms = stride(from: 0, to: x.count - 240, by: 240).map { Signal.rms(x[$0..<($0 + 240)]) }
            var least = Double.infinity
            for w in 32..<min(rms.count - 20, tick * 4) where rms[w - 20..<w + 20].sorted()[20] > 1000 {
                least = min(least, rms[w] / rms[w - 20..<w + 20].sorted()[20])
            }
            return least
        }
        func largestStep(_ x: [Int16]) -> Int { (1..<x.count).map { abs(Int(x[$0]) - Int(x[$0 - 1])) }.max() ?? 0 }
        let worst = quietest(heard[0], upTo: 58), reference = quietest(heard[1], upTo: 58)
        let step = largestStep(Array(heard[0][960...])), referenceStep = largestStep(Array(heard[1][960...]))
        print("denoiser on, off before its fade, on again, off and on while heard: faded in at ticks \(fadedIn) and 72; "
              + "its quietest 5 ms up to tick 58 at \(String(format: "%.2f", worst)) of the 200 ms around it (the other "
              + "stream's at \(String(format: "%.2f", reference))); largest step \(step) (the other stream's \(referenceStep))")
        XCTAssertGreaterThan(worst, min(0.6, reference - 0.1), "a hole, or a comb, where the stream moved or the denoiser faded in")
        XCTAssertLessThan(step, referenceStep * 3 / 2 + 100, "a splice where the stream moved or the denoiser faded in or out")
        XCTAssertTrue(try c.isNoiseReducing(ssrc: 1001))
    }

    /// A denoiser switched on before the stream talks, where nothing is heard moving:
    /// the stream moves to its delay at once, and the denoiser is heard from the first
    /// words (the glide would have left them undenoised, and 2 % low, for 500 ms).
    func testADenoiserSwitchedOnBeforeTheStreamTalksIsHeardFromItsFirstWords() throws {
        let (c, a, b) = try listener(nrOnA: false)
        let packets = try Self.packets(Self.noisySpeech(seconds: 1, snrDB: 5, seed: 7, f0: 150))
        let bus = MixBus(capacityFrames: 960)
        let scratch = RemoteSlot.Scratch()
        defer { scratch.deallocate() }
        var pcm = [Int16](repeating: 0, count: 1920)
        try c.setRemote(ssrc: 1001, RemoteSettings(noiseReduction: true))
        var firstHeard = -1
        let delayed = LagGlide(maxLag: 480, maxFrame: 960)   // B's audio 10 ms late
        delayed.jump(to: 480)
        for k in 0..<(5 + packets.count) {
            var outs: [[Int16]] = []
            for slot in [a, b] {
                if k >= 5 {   // five silent periods, then the talkspurt
                    let f = k - 5
                    packets[f].withUnsafeBytes { _ = slot.jitter.insert(seq: UInt64(f), timestamp: UInt32(f * 960), flags: f == 0 ? .marker : [], payload: $0, arrivalMs: Double(k) * 20) }
                }
                bus.clear(frames: 960)
                slot.lock.withLock { slot.render(into: bus, frames: 960, nowMs: Double(k) * 20 + 10, scratch: scratch) }
                pcm.withUnsafeMutableBufferPointer { bus.render(into: $0.baseAddress!, frames: 960) }
                outs.append(pcm)
            }
            if k < 5 { XCTAssertTrue(a.lock.withLock { a.glide?.lag == 480 }, "silent: at the delay at once (tick \(k))") }
            // B's audio 10 ms late against A's: the same (to within rounding) unless the
            // denoiser is heard.
            var lagged = outs[1]
            lagged.withUnsafeBufferPointer { delayed.push($0.baseAddress!, frames: 960) }
            lagged.withUnsafeMutableBufferPointer { delayed.read(into: $0.baseAddress!, frames: 960) }
            if firstHeard < 0 && !zip(outs[0], lagged).allSatisfy({ abs(Int($0) - Int($1)) <= 3 }) { firstHeard = k }
        }
        print("denoiser switched on five periods before the stream talks: heard from tick \(firstHeard)")
        XCTAssertEqual(firstHeard, 5, "the denoiser heard from the talkspurt's first frame, 10 ms late")
    }

    /// A slot reused for a stream of another channel count decodes with that many
    /// channels: a stereo stream plays its two channels, then a mono one plays L = R
    /// with nothing of the stereo stream left in it, then stereo again; one loss in
    /// each (concealment) included.
    func testASlotReusedAcrossChannelCountsPlaysEachStreamAsItIs() throws {
        let c = try VoiceClient()
        let bus = MixBus(capacityFrames: 960)
        let scratch = RemoteSlot.Scratch()
        defer { scratch.deallocate() }
        var pcm = [Int16](repeating: 0, count: 1920)
        for (round, audio) in [AudioConfig.music, .speech, .music].enumerated() {
            let enc = try OpusEncoderBox(config: audio)
            let ch = audio.channels
            // Left: a 440 Hz tone; right (stereo): silence.
            let input = (0..<(960 * 30)).flatMap { i -> [Int16] in
                let l = Int16(9000 * sin(Double(i) * 2 * .pi * 440 / 48000))
                return ch == 2 ? [l, 0] : [l]
            }
            var packets: [[UInt8]] = []
            var buf = [UInt8](repeating: 0, count: 1500)
            for f in 0..<30 {
                let n = try input.withUnsafeBufferPointer { p in try buf.withUnsafeMutableBytes { try enc.encode(p.baseAddress! + f * 960 * ch, into: $0) } }
                packets.append(Array(buf[0..<n]))
            }
            let ssrc = UInt32(4000 + round)
            XCTAssertTrue(c.receive.add(RemoteStream(userID: 1, streamID: 1, ssrc: ssrc, kind: .mic, audio: audio), username: "a"))
            let slot = try XCTUnwrap(c.receive.slots.first { $0.live.load(ordering: .acquiring) })
            var left: [Int16] = [], right: [Int16] = []
            for k in 0..<30 {
                if k != 12 {
                    packets[k].withUnsafeBytes { _ = slot.jitter.insert(seq: UInt64(k), timestamp: UInt32(k * 960), flags: k == 0 ? .marker : [],
                                                                       payload: $0, arrivalMs: Double(k) * 20) }
                }
                bus.clear(frames: 960)
                slot.lock.withLock { slot.render(into: bus, frames: 960, nowMs: Double(k) * 20 + 10, scratch: scratch) }
                pcm.withUnsafeMutableBufferPointer { bus.render(into: $0.baseAddress!, frames: 960) }
                left += stride(from: 0, to: 1920, by: 2).map { pcm[$0] }
                right += stride(from: 1, to: 1920, by: 2).map { pcm[$0] }
            }
            XCTAssertNotNil(c.receive.remove(ssrc: ssrc))
            let rms = { (x: ArraySlice<Int16>) in (x.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(max(1, x.count))).squareRoot() }
            let heard = 960 * 3..<960 * 30
            XCTAssertGreaterThan(rms(left[heard]), 3000, "round \(round): the tone plays")
            if ch == 2 {
                XCTAssertLessThan(rms(right[heard]), 0.1 * rms(left[heard]), "round \(round): a stereo stream keeps its silent right channel")
            } else {
                XCTAssertEqual(left, right, "round \(round): a mono stream plays L = R, its concealed frame too")
            }
        }
    }

    func pausesRMS(_ x: [Int16]) -> Double {
        var acc = 0.0, n = 0
        for s in stride(from: 3, to: x.count / 48000, by: 2) {
            for v in x[(s * 48000 + 9600)..<((s + 1) * 48000 - 4800)] { acc += Double(v) * Double(v); n += 1 }
        }
        return (acc / Double(n)).squareRoot()
    }

    func testListenerNoiseReductionOnOneStreamLeavesTheOtherSampleIdentical() throws {
        let pa = try Self.packets(Self.noisySpeech(seconds: 8, snrDB: 5, seed: 1, f0: 150))
        let pb = try Self.packets(Self.noisySpeech(seconds: 8, snrDB: 5, seed: 2, f0: 210))
        let (c1, a1, b1) = try listener(nrOnA: true)
        let (c2, a2, b2) = try listener(nrOnA: false)
        let (withNR, otherWith) = play(a1, b1, pa, pb)
        let (withoutNR, otherWithout) = play(a2, b2, pa, pb)
        XCTAssertEqual(otherWith, otherWithout, "the other stream must be sample-identical")
        let drop = 20 * log10(pausesRMS(withoutNR) / pausesRMS(withNR))
        print("listener NR in the receive path: noise floor in pauses −\(String(format: "%.1f", drop)) dB")
        XCTAssertGreaterThanOrEqual(drop, 10)
        // Turning it off releases the state; the settings read back.
        try c1.setRemote(ssrc: 1001, RemoteSettings(gain: 0.5))
        XCTAssertFalse(try c1.isNoiseReducing(ssrc: 1001))
        XCTAssertEqual(try c1.remote(ssrc: 1001), RemoteSettings(gain: 0.5))
        _ = c2
    }

    func testTheEnginesSlotAndStreamDoNotAllocatePerFrame() throws {
        try XCTSkipIf(vc_alloc_counter_active() == 0, "the allocation counter is off under sanitizers")
        let pa = try Self.packets(Self.noisySpeech(seconds: 6, snrDB: 5, seed: 4, f0: 180))
        let (c, a, _) = try listener(nrOnA: true)
        let bus = MixBus(capacityFrames: 960)
        let scratch = RemoteSlot.Scratch()
        defer { scratch.deallocate() }
        // A stream as vc_stream_start builds it, with NS/AGC/AEC, fed through the gate.
        let (s, slot) = try discardingStream(on: c)
        c.streams.aecStreams.add(1)
        s.apm = SpeexApm(frameSamples: 960, settings: SendProcessing(noiseSuppression: true, agc: true, echoCancellation: true))
        c.setInputMode(.continuous)
        let mic = Self.noisySpeech(seconds: 6, snrDB: 10, seed: 5, f0: 120)
        var out = [Int16](repeating: 0, count: 1920)
        func step(_ k: Int) throws {
            pa[k].withUnsafeBytes { _ = a.jitter.insert(seq: UInt64(k), timestamp: UInt32(k * 960), flags: [], payload: $0, arrivalMs: Double(k) * 20) }
            bus.clear(frames: 960)
            a.lock.withLock { a.render(into: bus, frames: 960, nowMs: Double(k) * 20 + 10, scratch: scratch) }
            out.withUnsafeMutableBufferPointer { bus.render(into: $0.baseAddress!, frames: 960) }
            c.streams.farEnd.pushStereo(out, frames: 960)
            try mic.withUnsafeBufferPointer { p in try slot.lock.withLock { try s.feed(p.baseAddress! + k * 960, frames: 960, channels: 1, clock: { UInt64(k) * 20_000_000 }) } }
        }
        // The listener's denoiser switched off and on again, once before the count (every
        // path the slot takes has run once: the first float decode allocates in the Swift
        // runtime) and once during it (the stream glides back and forth; the control path
        // builds the denoiser: not counted).
        for k in 0..<100 {
            if k == 30 { try c.setRemote(ssrc: a.ssrc, RemoteSettings(noiseReduction: false)) }
            if k == 60 { try c.setRemote(ssrc: a.ssrc, RemoteSettings(noiseReduction: true)) }
            try step(k)
        }
        var n: Int64 = 0
        for k in 100..<pa.count {
            if k == 130 { try c.setRemote(ssrc: a.ssrc, RemoteSettings(noiseReduction: false)) }
            if k == 200 { try c.setRemote(ssrc: a.ssrc, RemoteSettings(noiseReduction: true)) }
            let before = vc_alloc_count()
            try step(k)
            let d = Int64(vc_alloc_count() - before); if d > 0 { print("frame \(k): \(d) allocations") }
            n += d
        }
        print("engine slot render + stream feed: \(n) allocations over \(pa.count - 100) frames")
        XCTAssertEqual(n, 0)
        XCTAssertTrue(a.lock.withLock { a.glide?.lag == 480 && !(a.glide?.isMoving ?? true) }, "switched off and on again: at the delay")
    }

    func testALostFrameOnADREDChannelFallsBackToFECWithoutDRED() throws {
        // The channel asks for DRED; the loaded libopus decides whether it can run.
        var audio = AudioConfig.speech
        audio.dred = true
        audio.expectedPacketLoss = 20
        let c = try VoiceClient()
        XCTAssertTrue(c.receive.add(RemoteStream(userID: 1, streamID: 1, ssrc: 7, kind: .mic, audio: audio), username: "a"))
        let slot = c.receive.slots[0]
        let enc = try OpusEncoderBox(config: audio)
        let pcm = Self.noisySpeech(seconds: 2, snrDB: 20, seed: 6, f0: 160)
        let bus = MixBus(capacityFrames: 960)
        let scratch = RemoteSlot.Scratch()
        defer { scratch.deallocate() }
        var buf = [UInt8](repeating: 0, count: 1500)
        for k in 0..<100 {
            let n = try pcm.withUnsafeBufferPointer { p in try buf.withUnsafeMutableBytes { try enc.encode(p.baseAddress! + k * 960, into: $0) } }
            if k != 50 {  // one packet lost
                // The header's FEC flag as the sender sets it: from the packet itself.
                let flags: FrameFlags = enc.lastCarriesFEC ? .fec : []
                buf[0..<n].withUnsafeBytes { _ = slot.jitter.insert(seq: UInt64(k), timestamp: UInt32(k * 960), flags: flags, payload: $0, arrivalMs: Double(k) * 20) }
            }
            if k >= 1 {  // play a frame behind, so the frame after the loss is already here
                bus.clear(frames: 960)
                slot.lock.withLock { slot.render(into: bus, frames: 960, nowMs: Double(k) * 20 + 10, scratch: scratch) }
            }
        }
        let st = slot.jitter.stats
        XCTAssertEqual(st.packetsLost, 1)
        XCTAssertEqual(st.fecRecovered + st.dredRecovered, 1, "the lost frame is rebuilt from the next packet")
        XCTAssertEqual(st.dredRecovered, DRED.isAvailable ? 1 : 0, "DRED only where libopus has it; else in-band FEC")
        XCTAssertEqual(st.plcFrames, 0, "rebuilt in its own period, not waited for")
    }

    /// The audio edge with conversion everywhere: a stream fed float PCM at 44.1 kHz,
    /// a 16 kHz mono output format pulled (int16 and float), the per-speaker sink and
    /// a recording of one speaker, with a background render thread alongside.
    func testResampledFeedAndConvertedOutputDoNotAllocatePerBlock() throws {
        try XCTSkipIf(vc_alloc_counter_active() == 0, "the allocation counter is off under sanitizers")
        let pa = try Self.packets(Self.noisySpeech(seconds: 6, snrDB: 10, seed: 7, f0: 170))
        var cfg = ClientConfig()
        cfg.externalPlayback = true
        let c = try VoiceClient(config: cfg)
        defer { c.shutdown() }
        XCTAssertTrue(c.receive.add(RemoteStream(userID: 1, streamID: 1, ssrc: 2001, kind: .mic, audio: .speech), username: "a"))
        let a = c.receive.slots[0]
        try c.setRemote(ssrc: 2001, RemoteSettings(noiseReduction: true))
        try c.setOutputFormat(sampleRate: 16000, channels: 1)
        let delivered = ManagedAtomicInt()
        try c.setSpeakerSink { _ in _ = delivered.increment() }
        let dir = TestEnvironment.makeDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try c.startRecording(path: dir + "/a.wav", ssrc: 2001)
        // A 44.1 kHz stream fed float, as vc_stream_start builds it, sending to a sink address.
        let slot = c.streams.slots[0]
        let s = try LocalStream(streamID: 1, ssrc: 5001, kind: .mic, externalFeed: true, inputChannels: 1, audio: .speech,
                                inputRate: 44100, slot: slot, table: c.streams)
        let sock = try Socket.udp(familyOf: try SocketAddress(host: "127.0.0.1", port: 9))
        try sock.setNonBlocking()
        slot.path = SendSnapshot(key: SymmetricKey.random(), socket: sock, address: try SocketAddress(host: "127.0.0.1", port: 9),
                                 serverMuted: false)
        c.setInputMode(.continuous)
        let mic = (0..<(6 * 44100)).map { Float(0.3 * sin(2 * Double.pi * 220 * Double($0) / 44100)) }
        var out = [Int16](repeating: 0, count: 320)
        var outF = [Float](repeating: 0, count: 320)
        func step(_ k: Int) throws {
            let arrival = Double(MonotonicClock.nanoseconds()) / 1e6
            pa[k].withUnsafeBytes { _ = a.jitter.insert(seq: UInt64(k), timestamp: UInt32(k * 960), flags: [], payload: $0, arrivalMs: arrival) }
            if k % 2 == 0 {
                try out.withUnsafeMutableBufferPointer { try c.readMixed(into: $0.baseAddress!, frames: 320) }
            } else {
                try outF.withUnsafeMutableBufferPointer { try c.readMixedFloat(into: $0.baseAddress!, frames: 320) }
            }
            try mic.withUnsafeBufferPointer { p in
                try slot.lock.withLock { try s.feedFloat(p.baseAddress! + k * 882, frames: 882, channels: 1, clock: { UInt64(k) * 20_000_000 }) }
            }
        }
        for k in 0..<50 { try step(k) }
        let before = vc_alloc_count()
        for k in 50..<pa.count { try step(k) }
        let n = vc_alloc_count() - before
        let blocks = delivered.increment() - 1
        print("resampled feed + 16 kHz mono output + per-speaker sink + recording: \(n) allocations over \(pa.count - 50) blocks "
              + "(\(blocks) per-speaker blocks, \(s.seq) packets sent)")
        XCTAssertEqual(n, 0)
        XCTAssertGreaterThan(blocks, pa.count / 2)
        try c.stopRecording(ssrc: 2001)
    }

    func testSendProcessingIsRefusedWhereItCannotApply() throws {
        let c = try VoiceClient()
        XCTAssertThrowsError(try c.setSendProcessing(streamID: 9, SendProcessing(noiseSuppression: true))) { e in
            guard case .notFound? = e as? ClientError else { return XCTFail("\(e)") }
        }
        var bad = SendProcessing(agc: true)
        bad.agcLevel = 2
        XCTAssertThrowsError(try c.setSendProcessing(streamID: 9, bad)) { e in
            guard case .invalidArgument? = e as? ClientError else { return XCTFail("\(e)") }
        }
    }
}

/// Talker-side processing through a live server: what the listener receives.
final class SendProcessingNetworkTests: XCTestCase {
    func run(processing: SendProcessing, micFrom: @escaping (_ k: Int, _ playedMix: [Int16]) -> [Int16], seconds: Int,
             talkerOther: [Int16]? = nil) throws -> [Int16] {
        let server = try TestServer()
        defer { server.stop() }
        var cfg = ClientConfig()
        cfg.externalPlayback = true
        let x = try VoiceClient(config: cfg), y = try VoiceClient(config: cfg), t = try VoiceClient(config: cfg)
        defer { x.shutdown(); y.shutdown(); t.shutdown() }
        for (c, n) in [(x, "x"), (y, "y"), (t, "t")] {
            try c.connect(host: "127.0.0.1", port: server.port, username: n, password: nil, pinnedFingerprint: nil, timeoutMs: 3000)
            try c.joinChannel("Lobby")
            c.setInputMode(.continuous)
        }
        let sx = try x.startStream(kind: .mic, externalFeed: true, channels: 1)
        try x.setSendProcessing(streamID: sx, processing)
        XCTAssertEqual(try x.sendProcessing(streamID: sx), processing)
        let st = try t.startStream(kind: .mic, externalFeed: true, channels: 1)
        let xSSRC = x.ssrc(ofStream: sx)!, tSSRC = t.ssrc(ofStream: st)!
        let deadline = Date().addingTimeInterval(3)
        while Date() < deadline && !(y.remoteStreams().contains { $0.ssrc == xSSRC } && y.remoteStreams().contains { $0.ssrc == tSSRC }
                                     && x.remoteStreams().contains { $0.ssrc == tSSRC }) {
            usleep(5000)
        }
        // y hears x only.
        try y.setRemote(ssrc: tSSRC, RemoteSettings(muted: true))
        var heard: [Int16] = []
        var mix = [Int16](repeating: 0, count: 1920), ymix = [Int16](repeating: 0, count: 1920)
        let start = Date()
        for k in 0..<(seconds * 50) {
            if let other = talkerOther {
                try other.withUnsafeBufferPointer { try t.feed(streamID: st, pcm: $0.baseAddress! + k * 960, frames: 960, channels: 1) }
            }
            mix.withUnsafeMutableBufferPointer { try? x.readMixed(into: $0.baseAddress!, frames: 960) }
            let mic = micFrom(k, stride(from: 0, to: 1920, by: 2).map { mix[$0] })
            try mic.withUnsafeBufferPointer { try x.feed(streamID: sx, pcm: $0.baseAddress!, frames: 960, channels: 1) }
            ymix.withUnsafeMutableBufferPointer { try? y.readMixed(into: $0.baseAddress!, frames: 960) }
            heard += stride(from: 0, to: 1920, by: 2).map { ymix[$0] }
            let due = start.addingTimeInterval(Double(k + 1) * 0.02)
            let wait = due.timeIntervalSinceNow
            if wait > 0 { usleep(UInt32(wait * 1e6)) }
        }
        return heard
    }

    func rms(_ x: ArraySlice<Int16>) -> Double { (x.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(max(1, x.count))).squareRoot() }

    func testTalkerNoiseSuppressionReachesTheListener() throws {
        let noisy = ProcessingPathTests.noisySpeech(seconds: 6, snrDB: 5, seed: 3, f0: 170)
        func pauses(_ h: [Int16]) -> Double {
            // Pauses at odd seconds; the path adds < 100 ms of delay.
            rms(h[(3 * 48000 + 9600)..<(4 * 48000 - 4800)]) + rms(h[(5 * 48000 + 9600)..<(6 * 48000 - 4800)])
        }
        let plain = try run(processing: SendProcessing(), micFrom: { k, _ in Array(noisy[(k * 960)..<((k + 1) * 960)]) }, seconds: 6)
        let ns = try run(processing: SendProcessing(noiseSuppression: true), micFrom: { k, _ in Array(noisy[(k * 960)..<((k + 1) * 960)]) }, seconds: 6)
        let drop = 20 * log10(pauses(plain) / pauses(ns))
        print("talker NS through the network: noise in pauses at the listener −\(String(format: "%.1f", drop)) dB")
        XCTAssertGreaterThanOrEqual(drop, 10)
    }

    func testEchoOfThePlayedMixIsCancelledBeforeItIsSent() throws {
        // x plays t's speech; x's microphone picks it up 60 ms later, attenuated (the echo).
        var remote: [Int16] = []
        for k in 0..<14 {
            remote += (0..<48000).map { i in
                let t = Double(i) / 48000
                let f0 = 130 + Double(k) * 9
                return Int16(7000 * (0.55 + 0.45 * sin(2 * .pi * 2.7 * t)) * (sin(2 * .pi * f0 * t) + 0.5 * sin(4 * .pi * f0 * t + 1)) / 1.5)
            }
        }
        func echoMic() -> (Int, [Int16]) -> [Int16] {
            var line = [Int16](repeating: 0, count: 2880)   // 60 ms
            var lp = 0.0
            return { _, played in
                line += played
                let out = line.prefix(960).map { v -> Int16 in lp += 0.35 * (Double(v) - lp); return Int16(0.5 * lp) }
                line.removeFirst(960)
                return Array(out)
            }
        }
        let plain = try run(processing: SendProcessing(), micFrom: echoMic(), seconds: 14, talkerOther: remote)
        let aec = try run(processing: SendProcessing(echoCancellation: true), micFrom: echoMic(), seconds: 14, talkerOther: remote)
        for s in stride(from: 2, to: 14, by: 2) {
            let w = (s * 48000)..<((s + 2) * 48000)
            print("  \(s)-\(s + 2) s: \(String(format: "%.1f", 20 * log10(rms(plain[w]) / max(1, rms(aec[w]))))) dB")
        }
        let w = (10 * 48000)..<(14 * 48000)   // after convergence
        let erle = 20 * log10(rms(plain[w]) / max(1, rms(aec[w])))
        print("echo cancellation in the send path: echo heard by the listener −\(String(format: "%.1f", erle)) dB")
        // This measures the wiring (far-end reference taken from the mix actually
        // played, consumed in step with the microphone) at the far listener, after
        // Opus has coded the residual and the listener's buffer has played it; the
        // canceller's own ERLE (>= 15 dB) is measured in ProcessingTests.
        XCTAssertGreaterThanOrEqual(erle, 8)
    }
}
