// What a listener hears in the ordinary ways hosts feed audio (issue #9): through the
// public client API, a real server on loopback, real Opus, the seeded impairment
// proxy. Judged by counts (concealed frames, talk events, packets) and alignment,
// with margins for a shared 2-core machine, not by wall-clock assertions.
import Foundation
import VoiceCatAudio
@testable import VoiceCatClient
import VoiceCatProtocol
import VoiceCatSimulation
import VoiceCatSystem
import VoiceCatTestSupport
import XCTest

final class TimingTests: XCTestCase {
    var server: TestServer!
    var clients: [VoiceClient] = []

    override func setUpWithError() throws { server = try TestServer() }

    override func tearDown() {
        for c in clients { c.shutdown() }
        clients = []
        server.stop()
    }

    func client(_ name: String, channel: String, port: UInt16? = nil) throws -> VoiceClient {
        var cfg = ClientConfig()
        cfg.keepaliveMs = 1000
        cfg.externalPlayback = true
        let c = try VoiceClient(config: cfg)
        clients.append(c)
        try c.connect(host: "127.0.0.1", port: port ?? server.port, username: name, password: nil, pinnedFingerprint: nil,
                      timeoutMs: 3000)
        try c.joinChannel(channel)
        return c
    }

    func feed(_ c: VoiceClient, _ sid: UInt32, _ pcm: ArraySlice<Int16>) throws {
        let a = Array(pcm)
        try a.withUnsafeBufferPointer { try c.feed(streamID: sid, pcm: $0.baseAddress!, frames: a.count, channels: 1) }
    }

    func events(_ c: VoiceClient, ssrc: UInt32) -> (starts: Int, stops: Int) {
        var s = 0, t = 0
        while let e = c.pollEvent(timeoutMs: 0) {
            if e.ssrc == ssrc && e.type == .talkStart { s += 1 }
            if e.ssrc == ssrc && e.type == .talkStop { t += 1 }
        }
        return (s, t)
    }

    /// A host feeding 5 s of speech in one call is heard whole, at real time.
    func testFiveSecondsFedInOneCallAreHeardWholeAtRealTime() throws {
        let alex = try client("alex", channel: "Lobby")
        let sam = try client("sam", channel: "Lobby")
        alex.setInputMode(.continuous)
        let sid = try alex.startStream(kind: .mic, externalFeed: true, channels: 1)
        let ssrc = try XCTUnwrap(alex.ssrc(ofStream: sid))
        try sam.waitForRemote(ssrc: ssrc)
        let rec = SinkRecorder()
        try sam.setSink { rec.take($0, $1) }
        usleep(100_000)
        let input = Signal.voiceLike(seconds: 5, amplitude: 0.3)
        let fedAt = MonotonicClock.nanoseconds()
        try feed(alex, sid, input[...])
        let queued = try alex.queuedMs(streamID: sid)
        XCTAssertGreaterThan(queued, 4500, "the file is queued, not sent at once")
        try alex.drain(streamID: sid, timeoutMs: 10_000)
        let drainedAfterMs = Double(MonotonicClock.nanoseconds() - fedAt) / 1e6
        usleep(500_000)
        try sam.setSink(nil)
        let st = try sam.streamStats(ssrc: ssrc)
        print("5 s fed in one call: \(queued) ms queued, drained after \(Int(drainedAfterMs)) ms; received \(st.jitter.packetsReceived), "
              + "late \(st.jitter.late), concealed \(st.jitter.plcFrames), skipped \(st.jitter.skipped)")
        XCTAssertGreaterThanOrEqual(st.jitter.packetsReceived, 250)
        // Paced at real time: a listener drops next to nothing (a loaded machine may
        // delay a handful of frames past their time; 2 % is the allowance).
        XCTAssertLessThanOrEqual(st.jitter.late + st.jitter.skipped, 5)
        XCTAssertGreaterThan(drainedAfterMs, 4500, "sent faster than real time")
        // Heard whole: every 100 ms window of the 5 s is in the output.
        let (out, _, t0) = rec.snapshot
        let offset = max(0, Int(Int64(fedAt) - Int64(t0)) * 48 / 1_000_000)
        let shifted = Array(out[min(offset, out.count)...])
        var nccs: [Double] = []
        for w in stride(from: 0, to: 240_000 - 4800, by: 4800) {
            nccs.append(Signal.align(input: input, output: shifted, maxLag: 48 * 300, window: w..<(w + 4800)).ncc)
        }
        let heard = nccs.filter { $0 > 0.85 }.count
        print("5 s fed in one call: \(heard) of \(nccs.count) 100 ms windows heard")
        XCTAssertGreaterThanOrEqual(heard, nccs.count - 1)
    }

    /// DTX: in a pause the talker sends only sparse comfort-noise updates and the
    /// listener plays comfort noise, not digital silence; talk state follows.
    func testDTXPauseSendsComfortNoiseUpdatesAndTheListenerPlaysComfortNoise() throws {
        let alex = try client("alex", channel: "Lobby")   // DTX on
        let sam = try client("sam", channel: "Lobby")
        alex.setInputMode(.continuous)
        let sid = try alex.startStream(kind: .mic, externalFeed: true, channels: 1)
        let ssrc = try XCTUnwrap(alex.ssrc(ofStream: sid))
        try sam.waitForRemote(ssrc: ssrc)
        while sam.pollEvent(timeoutMs: 0) != nil {}
        let rec = SinkRecorder()
        try sam.setSink { rec.take($0, $1) }
        var rng = TraceGenerator.Random(seed: 5)
        let hiss = (0..<(48_000 * 3)).map { _ in Int16((rng.uniform() - 0.5) * 6) }   // far below speech
        let speech = Signal.voiceLike(seconds: 1, amplitude: 0.3)
        // Speech, 3 s of hiss far below speech, speech: one fed talkspurt.
        try feed(alex, sid, (speech + hiss + speech)[...])
        let quietT = MonotonicClock.nanoseconds() + 1_000_000_000
        usleep(2_000_000)   // the encoder has settled into DTX a second into the hiss
        let quietStart = alex.connectionStats().packetsOut
        usleep(1_500_000)
        let quietPackets = alex.connectionStats().packetsOut - quietStart
        try alex.drain(streamID: sid, timeoutMs: 5000)
        usleep(800_000)
        try sam.setSink(nil)
        let ev = events(sam, ssrc: ssrc)
        // The listener's output in the second half of the pause.
        let (out, _, t0) = rec.snapshot
        let from = Int(Int64(quietT) - Int64(t0)) * 48 / 1_000_000 + 72_000
        let pause = out[max(0, from)..<min(out.count, from + 48_000)]
        let nonzero = pause.filter { $0 != 0 }.count
        print("DTX pause of 3 s: \(quietPackets) packets sent in 1.5 s of it; listener output in the pause: \(nonzero) of \(pause.count) samples "
              + "nonzero, RMS \(String(format: "%.1f", Signal.rms(pause))); talk start/stop \(ev.starts)/\(ev.stops)")
        XCTAssertLessThanOrEqual(quietPackets, 8, "a DTX pause sends only sparse updates (75 frames)")
        XCTAssertGreaterThanOrEqual(quietPackets, 2, "comfort-noise updates must be sent")
        XCTAssertGreaterThan(nonzero, pause.count / 2, "the listener played digital silence in a DTX pause")
        XCTAssertLessThan(Signal.rms(pause), 100, "comfort noise is quiet")
        XCTAssertEqual(ev.starts, 2)
        XCTAssertEqual(ev.stops, 2)
    }

    /// SCREEN_AUDIO on a channel without DTX stops after 200 ms of digital silence
    /// and resumes with the marker.
    func testZeroGateStopsScreenAudioAfterDigitalSilence() throws {
        let alex = try client("alex", channel: "Music")   // DTX off
        let sid = try alex.startStream(kind: .screenAudio, externalFeed: true, channels: 1)
        let tone = Signal.tone(440, seconds: 1, amplitude: 0.2)
        let zeros = [Int16](repeating: 0, count: 48_000)
        try feed(alex, sid, (tone + zeros + Array(tone[0..<24_000]))[...])
        try alex.drain(streamID: sid, timeoutMs: 5000)
        usleep(150_000)
        // 50 tone frames; 10 frames of zeros, then the 11th flagged last and nothing
        // for the rest of the second; 25 tone frames; the talkspurt's padded last frame.
        XCTAssertEqual(alex.connectionStats().packetsOut, 50 + 11 + 25 + 1)
    }

    /// Through the impairment proxy with the benchmark's network models: late loss
    /// and delay stay within what bench-jitter measures for them (wide margins).
    func testImpairedProfilesStayWithinTheBenchmark() throws {
        var wifi = Impairment()
        wifi.baseDelayMs = 15; wifi.jitterMs = 12; wifi.spikeProbability = 0.01; wifi.spikeMs = 150
        let bursty = { () -> Impairment in var n = Impairment.burstyLoss(percent: 5); n.baseDelayMs = 30; n.jitterMs = 8; return n }()
        // bench-jitter (docs/benchmarks.md): VoiceCat's mean delay and late loss on these traces.
        for (name, net, benchDelayMs, benchLatePct) in [("Wi-Fi", wifi, 106.9, 2.74), ("5 % bursty loss", bursty, 37.3, 0.0)] {
            let proxy = try ImpairmentProxy(targetPort: server.port, downstream: net, seed: 7)
            defer { proxy.stop() }
            let alex = try client("alex-\(name.count)", channel: "Lobby")
            let sam = try client("sam-\(name.count)", channel: "Lobby", port: proxy.port)
            alex.setInputMode(.continuous)
            let sid = try alex.startStream(kind: .mic, externalFeed: true, channels: 1)
            let ssrc = try XCTUnwrap(alex.ssrc(ofStream: sid))
            try sam.waitForRemote(ssrc: ssrc)
            try sam.setSink { _, _ in }
            let input = Signal.voiceLike(seconds: 8, amplitude: 0.3)
            try feed(alex, sid, input[...])
            var depths: [UInt32] = []
            for _ in 0..<80 {
                usleep(100_000)
                depths.append(try sam.streamStats(ssrc: ssrc).currentDepthMs)
            }
            try sam.setSink(nil)
            let st = try sam.streamStats(ssrc: ssrc)
            let arrived = max(1, st.jitter.packetsReceived)
            let latePct = 100 * Double(st.jitter.late) / Double(arrived)
            let meanDepth = Double(depths.reduce(0, +)) / Double(depths.count)
            print("\(name) through the proxy: received \(st.jitter.packetsReceived), lost \(st.jitter.packetsLost), "
                  + "late \(String(format: "%.2f", latePct)) % (bench \(benchLatePct) %), mean buffered \(String(format: "%.1f", meanDepth)) ms "
                  + "(bench delay \(benchDelayMs) ms), fec \(st.jitter.fecRecovered), concealed \(st.jitter.plcFrames)")
            XCTAssertLessThanOrEqual(latePct, max(2 * benchLatePct, 1.5), "\(name): more late loss than the benchmark")
            XCTAssertLessThanOrEqual(meanDepth, 1.5 * benchDelayMs + 40, "\(name): more delay than the benchmark")
            alex.shutdown(); sam.shutdown()
        }
    }
}
