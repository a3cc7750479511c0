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
                    jb.insert(seq: opened.header.seq, timestamp: opened.header.timestamp, flags: 0,
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
        let before = vc_alloc_count()
        for k in 200..<1200 { try frame(k) }       // 20 seconds of audio
        let allocations = vc_alloc_count() - before
        print("allocations over 1000 steady-state frames: \(allocations)")
        XCTAssertEqual(allocations, 0)
        // The counter itself works: a fresh array is an allocation.
        let probe = vc_alloc_count()
        let array = [Int](repeating: 7, count: 1000 + Int(allocations))
        XCTAssertGreaterThan(vc_alloc_count(), probe)
        XCTAssertEqual(array.count, 1000)
    }
}
