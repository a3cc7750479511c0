import Glibc

// The audio path must not allocate per frame (CONVENTIONS: prove it by counting).
import VoiceCatAllocCounter
import VoiceCatAudio
import VoiceCatProtocol
import XCTest

final class AllocationTests: XCTestCase {
    func testSteadyStateReceiveAndSendFramesDoNotAllocate() throws {
        try XCTSkipIf(vc_alloc_counter_active() == 0, "the allocation counter is off under sanitizers")
        let cfg = AudioConfig.speech
        let enc = try OpusEncoderBox(config: cfg)
        let dec = try OpusDecoderBox()
        let jb = JitterBuffer(frameSamples: 960)
        let reframer = Reframer(frameSamples: 960, channels: 1)
        let bus = MixBus(capacityFrames: 960)
        let key = SymmetricKey.random()
        var gate = InputGate()
        let settings = GateSettings()
        let nr = NoiseReducer(frameSamples: 960, streamChannels: 1)
        let apm = SpeexApm(frameSamples: 960, settings: SendProcessing(noiseSuppression: true, agc: true, echoCancellation: true))
        var replay = ReplayWindow()
        let pcm = UnsafeMutablePointer<Int16>.allocate(capacity: 960)
        let stereo = UnsafeMutablePointer<Int16>.allocate(capacity: 1920)
        let far = UnsafeMutablePointer<Int16>.allocate(capacity: 960)
        let packet = UnsafeMutableRawBufferPointer.allocate(byteCount: 1500, alignment: 16)
        let datagram = UnsafeMutableRawBufferPointer.allocate(byteCount: 1600, alignment: 16)
        defer { pcm.deallocate(); stereo.deallocate(); far.deallocate(); packet.deallocate(); datagram.deallocate() }
        for i in 0..<960 { pcm[i] = Int16(8000 * sin(Double(i) * 0.05)); far[i] = Int16(3000 * sin(Double(i) * 0.031)) }

        /// One 20 ms frame through everything: send processing, gate, reframe, encode,
        /// seal / open, replay check, jitter buffer, decode, NR, mix, limit.
        func frame(_ k: Int) throws {
            apm.process(pcm, farEnd: far)
            apm.process(pcm + 480, farEnd: far + 480)
            _ = gate.process(pcm, frameSamples: 960, channels: 1, settings: settings)
            var failure: Error? = nil
            reframer.push(pcm, frames: 960, inChannels: 1) { f in
                do {
                    let n = try enc.encode(f, into: packet)
                    let h = FrameHeader(type: .voice, ssrc: 7, seq: UInt64(k), timestamp: UInt32(k * 960))
                    let d = MediaCrypto.seal(header: h, payload: UnsafeRawBufferPointer(rebasing: packet[0..<n]), key: key, into: datagram)
                    let opened = try MediaCrypto.open(UnsafeMutableRawBufferPointer(rebasing: datagram[0..<d]), key: key)
                    _ = replay.accept(opened.header.seq)
                    jb.insert(seq: opened.header.seq, timestamp: opened.header.timestamp, flags: opened.header.flags,
                              payload: UnsafeRawBufferPointer(rebasing: datagram[20..<(20 + opened.length)]), arrivalMs: Double(k) * 20)
                } catch { failure = error }
            }
            if let failure { throw failure }
            if case .packet(let s) = jb.next() {
                _ = try dec.decode(jb.payload(s), frames: 960, into: stereo)
                jb.release(s)
            }
            nr.process(stereo, frames: 960)
            bus.clear(frames: 960)
            bus.add(stereo, frames: 960, gain: 0.8)
            bus.render(into: stereo, frames: 960)
        }

        for k in 0..<200 { try frame(k) }          // warm-up: codec and DSP states settle
        // This thread's own allocations (the work runs on it; another thread of the test
        // process may allocate meanwhile).
        let before = vc_alloc_count_thread()
        for k in 200..<1200 { try frame(k) }       // 20 seconds of audio
        let allocations = vc_alloc_count_thread() - before
        print("allocations over 1000 steady-state frames: \(allocations)")
        XCTAssertEqual(allocations, 0)
        // The counter itself works: a fresh array is an allocation.
        let probe = vc_alloc_count(), probeThread = vc_alloc_count_thread()
        let array = [Int](repeating: 7, count: 1000 + Int(allocations))
        XCTAssertGreaterThan(vc_alloc_count(), probe)
        XCTAssertGreaterThan(vc_alloc_count_thread(), probeThread)
        XCTAssertEqual(array.count, 1000)
    }

    func testTheJitterBufferDoesNotAllocatePerFrame() throws {
        try XCTSkipIf(vc_alloc_counter_active() == 0, "the allocation counter is off under sanitizers")
        // Every path of the buffer: jittered arrivals (the histogram and its
        // quantiles, the baseline ring), losses (FEC and PLC), late frames, waits,
        // catch-up drops, talkspurts with markers and last frames, DTX pauses, a
        // timeline rebase, and a timestamp wrap. The schedule is made before counting.
        let jb = JitterBuffer(capacity: 64, maxPayload: 256, frameSamples: 960)
        let frames = 6000
        var rng: UInt64 = 0x2545_F491_4F6C_DD1D
        func random() -> Double {
            rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17
            return Double(rng >> 11) / Double(1 << 53)
        }
        var arrivalTick = [Int](repeating: -1, count: frames)
        var stamp = [UInt32](repeating: 0, count: frames)
        var flagSet = [FrameFlags](repeating: [.fec], count: frames)
        var byTick = [Int](repeating: -1, count: frames * 2 + 64)   // one arrival per tick slot, in order
        var ts = UInt32.max - 960 * 3000                            // crosses 2^32 half-way
        var tick = 0
        for f in 0..<frames {
            let inSpurt = f % 300
            if inSpurt == 0 { flagSet[f].insert(.marker); ts &+= 960 * 25 }         // a pause before each talkspurt
            if inSpurt == 299 { flagSet[f].insert(f % 600 == 599 ? .dtx : .lastFrame) }
            if f == 3333 { ts &+= 960 * 40 }                                        // a jump: rebased, not jitter
            stamp[f] = ts
            ts &+= 960
            tick = max(tick + 1, f + 25 * (f / 300) + Int(random() * random() * 8))  // jitter with a long tail
            if random() < 0.03 { continue }                                         // lost
            arrivalTick[f] = tick
        }
        var k = 0
        for f in 0..<frames where arrivalTick[f] >= 0 {
            while k < byTick.count && k < arrivalTick[f] { k += 1 }
            if k < byTick.count { byTick[k] = f }
            k += 1
        }
        let payload = UnsafeMutableRawBufferPointer.allocate(byteCount: 160, alignment: 8)
        defer { payload.deallocate() }
        for i in 0..<160 { payload[i] = UInt8(i) }
        func run(_ range: Range<Int>) {
            for t in range {
                let f = byTick[t]
                if f >= 0 {
                    // Quiet frames are small: half the packets carry 40 bytes, half 160.
                    let n = f % 2 == 0 ? 40 : 160
                    jb.insert(seq: UInt64(f), timestamp: stamp[f], flags: flagSet[f],
                              payload: UnsafeRawBufferPointer(rebasing: payload[0..<n]), arrivalMs: Double(t) * 20)
                }
                switch jb.next() {
                case .packet(let s): jb.reportPlayedLevel(quiet: f % 7 == 0); jb.release(s)
                case .fec, .conceal, .silence, .comfortNoise: break
                }
                _ = jb.targetMs + jb.depthMs
            }
        }
        run(0..<400)                                 // warm-up
        let before = vc_alloc_count_thread()         // (the work runs on this thread)
        run(400..<byTick.count)
        let allocations = vc_alloc_count_thread() - before
        let st = jb.stats
        print("jitter buffer over \(byTick.count - 400) ticks: \(allocations) allocations; fec \(st.fecRecovered), plc \(st.plcFrames), "
              + "late \(st.late), waited \(st.waited), skipped \(st.skipped), talkspurts \(st.talkspurts)")
        XCTAssertEqual(allocations, 0)
        // The run went through the paths it is meant to cover.
        XCTAssertGreaterThan(st.fecRecovered, 0)
        XCTAssertGreaterThan(st.plcFrames, 0)
        XCTAssertGreaterThan(st.waited, 0)
        XCTAssertGreaterThan(st.talkspurts, 10)
        XCTAssertGreaterThan(st.packetsReceived, UInt64(frames) * 9 / 10)
    }
}
