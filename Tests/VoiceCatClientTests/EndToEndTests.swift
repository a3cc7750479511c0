// Two or more clients in one process through a real server on loopback, real Opus,
// real sockets: what one feeds comes out of the other's mix.
import Foundation
import VoiceCatABI
import VoiceCatAudio
import VoiceCatClient
import VoiceCatProtocol
import VoiceCatSystem
import VoiceCatTestSupport
import XCTest

/// Collects the mixed output pushed to a sink, with the time of the first block.
final class SinkRecorder: @unchecked Sendable {
    let lock = NSLock()
    var left: [Int16] = []
    var right: [Int16] = []
    var firstBlockNs: UInt64 = 0
    private var lastBlockNs: UInt64 = 0
    /// Blocks that came more than 40 ms after the one before (the render thread was
    /// held up: on this shared machine, a scheduling stall).
    private(set) var lateBlocks = 0

    func take(_ pcm: UnsafePointer<Int16>, _ frames: Int) {
        lock.lock(); defer { lock.unlock() }
        let now = MonotonicClock.nanoseconds()
        if firstBlockNs == 0 { firstBlockNs = now }
        if lastBlockNs != 0 && now - lastBlockNs > 40_000_000 { lateBlocks += 1 }
        lastBlockNs = now
        for i in 0..<frames { left.append(pcm[2 * i]); right.append(pcm[2 * i + 1]) }
    }
    var snapshot: (l: [Int16], r: [Int16], t0: UInt64) { lock.lock(); defer { lock.unlock() }; return (left, right, firstBlockNs) }
    var renderStalls: Int { lock.lock(); defer { lock.unlock() }; return lateBlocks }
}

final class EndToEndTests: XCTestCase {
    var server: TestServer!
    var clients: [VoiceClient] = []

    override func setUpWithError() throws {
        server = try TestServer()
    }

    override func tearDown() {
        for c in clients { c.shutdown() }
        clients = []
        server.stop()
    }

    func client(_ name: String, channel: String = "Lobby") throws -> VoiceClient {
        var cfg = ClientConfig()
        cfg.keepaliveMs = 1000
        cfg.externalPlayback = true
        let c = try VoiceClient(config: cfg)
        clients.append(c)
        try c.connect(host: "127.0.0.1", port: server.port, username: name, password: nil, pinnedFingerprint: nil, timeoutMs: 3000)
        try c.joinChannel(channel)
        return c
    }

    /// Feeds `pcm` (interleaved, `channels`) in 20 ms blocks at real-time pace.
    func feedRealtime(_ c: VoiceClient, _ stream: UInt32, _ pcm: [Int16], channels: Int = 1, block: Int = 960) throws {
        let start = MonotonicClock.nanoseconds()
        var i = 0
        var k: UInt64 = 0
        while i < pcm.count / channels {
            let n = min(block, pcm.count / channels - i)
            try pcm.withUnsafeBufferPointer { try c.feed(streamID: stream, pcm: $0.baseAddress! + i * channels, frames: n, channels: channels) }
            i += n
            k += UInt64(n)
            let due = start + k * 1_000_000_000 / 48000
            let now = MonotonicClock.nanoseconds()
            if due > now { usleep(UInt32((due - now) / 1000)) }
        }
    }

    /// Pulls the mix at real-time pace while `work` runs on another thread.
    func pullWhile(_ c: VoiceClient, seconds: Double, during work: @escaping () -> Void) -> (l: [Int16], r: [Int16]) {
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread { work(); done.signal() }
        var l: [Int16] = [], r: [Int16] = []
        var buf = [Int16](repeating: 0, count: 960 * 2)
        let start = MonotonicClock.nanoseconds()
        let blocks = Int(seconds * 50)
        for k in 1...blocks {
            buf.withUnsafeMutableBufferPointer { try! c.readMixed(into: $0.baseAddress!, frames: 960) }
            for i in 0..<960 { l.append(buf[2 * i]); r.append(buf[2 * i + 1]) }
            let due = start + UInt64(k) * 20_000_000
            let now = MonotonicClock.nanoseconds()
            if due > now { usleep(UInt32((due - now) / 1000)) }
        }
        done.wait()
        return (l, r)
    }

    func testFedSignalComesOutOfTheOtherSinkCorrelatedAndOnTime() throws {
        let alex = try client("alex")
        let sam = try client("sam")
        let rec = SinkRecorder()
        try sam.setSink { rec.take($0, $1) }
        let sid = try alex.startStream(kind: .mic, externalFeed: true, channels: 1)
        let ssrc = try XCTUnwrap(alex.ssrc(ofStream: sid))
        try sam.waitForRemote(ssrc: ssrc)
        let input = Signal.glidingVoice(seconds: 3)
        usleep(100_000)
        let feedStart = MonotonicClock.nanoseconds()
        try feedRealtime(alex, sid, input)
        usleep(400_000)
        try sam.setSink(nil)
        let (out, _, t0) = rec.snapshot
        // Where in the sink timeline the fed signal starts.
        let offset = Int(Int64(feedStart) - Int64(t0)) * 48 / 1_000_000
        XCTAssertGreaterThan(offset, 0)
        var shifted = [Int16](repeating: 0, count: max(0, out.count - offset))
        if offset < out.count { shifted = Array(out[offset...]) }
        // Latency: where the first second of the signal sits in the sink's timeline.
        let (lag, startNCC) = Signal.align(input: input, output: shifted, maxLag: 48 * 400, window: 24000..<72000)
        let latencyMs = Double(lag) / 48
        // Fidelity: each 100 ms window against the input (robust to the buffer
        // stretching by a frame when the machine stalls a thread).
        var nccs: [Double] = []
        for w in stride(from: 24000, to: 134_400, by: 4800) {
            nccs.append(Signal.align(input: input, output: shifted, maxLag: 48 * 400, window: w..<(w + 4800)).ncc)
        }
        let ncc = nccs.sorted()[nccs.count / 2]
        print("one-way latency feed → sink: \(String(format: "%.1f", latencyMs)) ms; normalized cross-correlation: "
              + "median of 100 ms windows \(String(format: "%.3f", ncc)), first second \(String(format: "%.3f", startNCC))")
        XCTAssertGreaterThanOrEqual(ncc, 0.9)
        XCTAssertLessThan(latencyMs, 300, "generous bound; 20 ms frames on loopback")
        let stats = try sam.streamStats(ssrc: ssrc)
        XCTAssertGreaterThanOrEqual(stats.jitter.packetsReceived, 145)
        XCTAssertEqual(stats.jitter.packetsLost, 0)
        XCTAssertEqual(alex.connectionStats().authFailures + sam.connectionStats().authFailures, 0)
    }

    func testGainMuteAndTwoTalkers() throws {
        let alex = try client("alex")
        let kim = try client("kim")
        let sam = try client("sam")
        let a = try alex.startStream(kind: .mic, externalFeed: true, channels: 1)
        let k = try kim.startStream(kind: .mic, externalFeed: true, channels: 1)
        let aSSRC = alex.ssrc(ofStream: a)!, kSSRC = kim.ssrc(ofStream: k)!
        try sam.waitForRemote(ssrc: aSSRC)
        try sam.waitForRemote(ssrc: kSSRC)
        let toneA = Signal.tone(440, seconds: 4.5), toneK = Signal.tone(1200, seconds: 4.5)
        // 0–1.5 s both at gain 1; 1.5–3 s Alex at gain 0.5; 3–4.5 s Alex muted.
        let (l, _) = pullWhile(sam, seconds: 5) {
            let t = Thread { try? self.feedRealtime(kim, k, toneK) }
            t.start()
            let start = MonotonicClock.milliseconds()
            var switched = 0
            var i = 0
            while i < toneA.count {
                let n = min(960, toneA.count - i)
                try? toneA.withUnsafeBufferPointer { try alex.feed(streamID: a, pcm: $0.baseAddress! + i, frames: n, channels: 1) }
                i += n
                // Switch by the audio fed so far, not by the wall clock: a slow machine
                // (TSan) feeds late, and a wall-clock switch then lands early in the audio.
                let due = UInt64(i) / 48  // ms of audio fed so far
                if switched == 0 && due >= 1500 { try? sam.setRemote(ssrc: aSSRC, RemoteSettings(gain: 0.5)); switched = 1 }
                if switched == 1 && due >= 3000 { try? sam.setRemote(ssrc: aSSRC, RemoteSettings(gain: 1, muted: true)); switched = 2 }
                let el = MonotonicClock.milliseconds() - start
                if due > el { usleep(UInt32(due - el) * 1000) }
            }
        }
        // Tone power per 100 ms piece (both tones whole cycles there, so neither leaks
        // into the other's bin), the median over the window: a frame concealed or a
        // realignment on a loaded machine breaks the tone's phase, which would cancel part
        // of a measurement over the whole window, but costs only the piece it falls in.
        func power(_ fromS: Double, _ toS: Double, _ f: Double) -> Double {
            let blocks = stride(from: Int(fromS * 48000), to: Int(toS * 48000) - 4799, by: 4800).map { Signal.tonePower(l[$0..<($0 + 4800)], f) }
            return blocks.sorted()[blocks.count / 2]
        }
        let pA1 = power(0.8, 1.4, 440), pK1 = power(0.8, 1.4, 1200)
        let pA2 = power(2.3, 2.9, 440)
        let pA3 = power(3.8, 4.4, 440), pK3 = power(3.8, 4.4, 1200)
        print("tone power: alex \(pA1) → gain 0.5 \(pA2) → muted \(pA3); kim \(pK1) → \(pK3)")
        XCTAssertGreaterThan(pA1, 1000, "alex present")
        XCTAssertGreaterThan(pK1, 1000, "kim present")
        // Gain 0.5 halves the amplitude: a quarter of the power (RMS ratio 0.5 ± 10 %).
        let ratio = sqrt(pA2 / pA1)
        XCTAssertEqual(ratio, 0.5, accuracy: 0.05)
        XCTAssertLessThan(pA3, pA1 / 10_000, "muted stream is silent")
        XCTAssertEqual(sqrt(pK3 / pK1), 1, accuracy: 0.1, "muting alex leaves kim untouched")
        XCTAssertEqual(try sam.remote(ssrc: aSSRC), RemoteSettings(gain: 1, muted: true))
    }

    func testStereoChannelKeepsLeftAndRightDistinct() throws {
        let alex = try client("alex", channel: "Music")
        let sam = try client("sam", channel: "Music")
        let sid = try alex.startStream(kind: .screenAudio, externalFeed: true, channels: 2)
        try sam.waitForRemote(ssrc: alex.ssrc(ofStream: sid)!)
        let l = Signal.tone(500, seconds: 2), r = Signal.tone(1500, seconds: 2)
        var stereo = [Int16](repeating: 0, count: l.count * 2)
        for i in 0..<l.count { stereo[2 * i] = l[i]; stereo[2 * i + 1] = r[i] }
        let (ol, or) = pullWhile(sam, seconds: 2.5) { try? self.feedRealtime(alex, sid, stereo, channels: 2) }
        let w = ol.indices.dropFirst(24000).prefix(48000)
        let (lSep, rSep) = Signal.stereoSeparation(ol[w], or[w], leftHz: 500, rightHz: 1500, label: "stereo")
        XCTAssertGreaterThan(lSep, 100)
        XCTAssertGreaterThan(rSep, 100)
    }

    func testEventsForStreamsAndTalkState() throws {
        let alex = try client("alex")
        let sam = try client("sam")
        while sam.pollEvent(timeoutMs: 0) != nil {}
        let sid = try alex.startStream(kind: .mic, externalFeed: true, channels: 1)
        let ssrc = alex.ssrc(ofStream: sid)!
        func next(_ t: ClientEventType) throws -> ClientEvent {
            let deadline = MonotonicClock.milliseconds() + 3000
            while MonotonicClock.milliseconds() < deadline {
                if let e = sam.pollEvent(timeoutMs: 100), e.type == t { return e }
            }
            throw ClientError.timeout("no \(t) event")
        }
        let added = try next(.remoteStreamAdded)
        XCTAssertEqual(added.ssrc, ssrc)
        XCTAssertEqual(added.text, "alex")
        try feedRealtime(alex, sid, Signal.voiceLike(seconds: 0.5))
        XCTAssertEqual(try next(.talkStart).ssrc, ssrc)
        XCTAssertEqual(try next(.talkStop).ssrc, ssrc)
        try alex.stopStream(sid)
        XCTAssertEqual(try next(.remoteStreamRemoved).ssrc, ssrc)
        XCTAssertThrowsError(try sam.streamStats(ssrc: ssrc))
    }

    func testDestroyWhileConnectedAndStreamingIsClean() throws {
        let alex = try client("alex")
        let sam = try client("sam")
        let rec = SinkRecorder()
        try sam.setSink { rec.take($0, $1) }
        let sid = try alex.startStream(kind: .mic, externalFeed: true, channels: 1)
        let feeder = Thread { try? self.feedRealtime(alex, sid, Signal.voiceLike(seconds: 1)) }
        feeder.start()
        usleep(300_000)
        sam.shutdown()
        alex.shutdown()
        XCTAssertFalse(sam.isConnected)
        XCTAssertThrowsError(try alex.feed(streamID: sid, pcm: [Int16](repeating: 0, count: 960), frames: 960, channels: 1))
        server.waitSessions(0)
    }

    func testServerErrorsAndFingerprintPinning() throws {
        let c = try VoiceClient()
        clients.append(c)
        XCTAssertThrowsError(try c.connect(host: "127.0.0.1", port: server.port, username: "x", password: nil,
                                           pinnedFingerprint: String(repeating: "0", count: 64), timeoutMs: 2000)) { e in
            guard case .auth? = e as? ClientError else { return XCTFail("\(e)") }
        }
        XCTAssertEqual(c.serverFingerprint, server.server.fingerprint, "the fingerprint seen is reported")
        try c.connect(host: "127.0.0.1", port: server.port, username: "x", password: nil, pinnedFingerprint: server.server.fingerprint,
                      timeoutMs: 2000)
        XCTAssertThrowsError(try c.joinChannel("Nowhere")) { e in
            guard case .notFound? = e as? ClientError else { return XCTFail("\(e)") }
        }
        let dup = try VoiceClient()
        clients.append(dup)
        XCTAssertThrowsError(try dup.connect(host: "127.0.0.1", port: server.port, username: "x", password: nil, pinnedFingerprint: nil,
                                             timeoutMs: 2000)) { e in
            guard case .rejected? = e as? ClientError else { return XCTFail("\(e)") }
        }
        XCTAssertTrue(dup.lastError.contains("already connected"), dup.lastError)
    }

    /// A listener with one receive slot and two talkers: the second stream is not
    /// played (ERROR, NO_MEMORY, its ssrc), the server's later messages about it are
    /// not refused as naming an unknown stream (a new-user trial saw PROTOCOL errors
    /// for its state update and its removal), and when the slot frees it is played.
    func testAStreamBeyondTheReceiveSlotsIsPlayedWhenOneFrees() throws {
        var cfg = ClientConfig()
        cfg.keepaliveMs = 1000
        cfg.externalPlayback = true
        cfg.maxRemoteStreams = 1
        let sam = try VoiceClient(config: cfg)
        clients.append(sam)
        try sam.connect(host: "127.0.0.1", port: server.port, username: "sam-slots", password: nil, pinnedFingerprint: nil, timeoutMs: 3000)
        try sam.joinChannel("Lobby")
        let alex = try client("alex-slots"), bob = try client("bob-slots")
        let a = try alex.startStream(kind: .mic, externalFeed: true, channels: 1)
        let aSSRC = try XCTUnwrap(alex.ssrc(ofStream: a))
        try sam.waitForRemote(ssrc: aSSRC)
        let b = try bob.startStream(kind: .mic, externalFeed: true, channels: 1)
        let bSSRC = try XCTUnwrap(bob.ssrc(ofStream: b))
        var seen: [ClientEvent] = []
        func drain(until done: (ClientEvent) -> Bool, ms: UInt64 = 3000) -> Bool {
            let deadline = MonotonicClock.milliseconds() + ms
            while MonotonicClock.milliseconds() < deadline {
                guard let e = sam.pollEvent(timeoutMs: 50) else { continue }
                seen.append(e)
                if done(e) { return true }
            }
            return false
        }
        XCTAssertTrue(drain { $0.type == .error && $0.ssrc == bSSRC }, "no ERROR for the stream beyond the slots")
        XCTAssertEqual(seen.last?.code, VC_ERR_NO_MEMORY)
        try bob.setStreamState(streamID: b, muted: true, hold: false)
        usleep(300_000)
        try alex.stopStream(a)
        XCTAssertTrue(drain { $0.type == .remoteStreamAdded && $0.ssrc == bSSRC }, "bob's stream was not taken up: \(seen.map { ($0.type, $0.ssrc, $0.text) })")
        XCTAssertTrue(sam.remoteStreams().contains { $0.ssrc == bSSRC })
        // The host is told the slot freed before it is taken: it never counts more
        // streams than there are slots.
        let removedA = seen.firstIndex { $0.type == .remoteStreamRemoved && $0.ssrc == aSSRC }
        let addedB = seen.firstIndex { $0.type == .remoteStreamAdded && $0.ssrc == bSSRC }
        XCTAssertNotNil(removedA)
        XCTAssertLessThan(removedA ?? .max, addedB ?? .min, "\(seen.map { ($0.type, $0.ssrc) })")
        // The mute bob set while his stream waited is told once it is heard.
        XCTAssertTrue(drain { $0.type == .streamStateUpdate && $0.ssrc == bSSRC }, "the state set while it waited was not told")
        XCTAssertEqual(seen.last?.muted, true)
        XCTAssertEqual(seen.last?.hold, false)
        XCTAssertEqual(seen.last?.text, "bob-slots")
        try bob.stopStream(b)
        XCTAssertTrue(drain { $0.type == .remoteStreamRemoved && $0.ssrc == bSSRC })
        let protocolErrors = seen.filter { $0.type == .error && $0.code == VC_ERR_PROTOCOL }
        XCTAssertEqual(protocolErrors.count, 0, "\(protocolErrors.map(\.text))")
        // A stream that leaves before a slot frees is forgotten without an event.
        let c = try bob.startStream(kind: .mic, externalFeed: true, channels: 1)
        let cSSRC = try XCTUnwrap(bob.ssrc(ofStream: c))
        try sam.waitForRemote(ssrc: cSSRC)
        let d = try alex.startStream(kind: .mic, externalFeed: true, channels: 1)
        let dSSRC = try XCTUnwrap(alex.ssrc(ofStream: d))
        XCTAssertTrue(drain { $0.type == .error && $0.ssrc == dSSRC })
        try alex.stopStream(d)
        usleep(300_000)
        try bob.stopStream(c)
        XCTAssertTrue(drain { $0.type == .remoteStreamRemoved && $0.ssrc == cSSRC })
        usleep(300_000)
        _ = drain(until: { _ in false }, ms: 200)
        XCTAssertFalse(seen.contains { $0.ssrc == dSSRC && $0.type != .error }, "the stream that left was played or named again")
        XCTAssertEqual(seen.filter { $0.type == .error && $0.code == VC_ERR_PROTOCOL }.count, 0)
    }
}

extension TestServer {
    func waitSessions(_ n: UInt64) {
        XCTAssertNotNil(poll { $0.sessionsActive == n }, "sessions never dropped to \(n)")
    }
}

final class ImpairedNetworkTests: XCTestCase {
    func testSpeechArrivesThroughBurstyLossAndJitter() throws {
        let server = try TestServer()
        defer { server.stop() }
        var down = Impairment.burstyLoss(percent: 5)
        down.baseDelayMs = 10
        down.jitterMs = 30
        let proxy = try ImpairmentProxy(targetPort: server.port, downstream: down, seed: 42)
        defer { proxy.stop() }
        var cfg = ClientConfig()
        cfg.externalPlayback = true
        let alex = try VoiceClient(config: cfg), sam = try VoiceClient(config: cfg)
        defer { alex.shutdown(); sam.shutdown() }
        try alex.connect(host: "127.0.0.1", port: server.port, username: "alex", password: nil, pinnedFingerprint: nil, timeoutMs: 3000)
        // Sam's TCP and UDP go through the impairing proxy.
        try sam.connect(host: "127.0.0.1", port: proxy.port, username: "sam", password: nil, pinnedFingerprint: nil, timeoutMs: 3000)
        try alex.joinChannel("Lobby")
        try sam.joinChannel("Lobby")
        alex.setInputMode(.continuous)
        let sid = try alex.startStream(kind: .mic, externalFeed: true, channels: 1)
        let ssrc = try XCTUnwrap(alex.ssrc(ofStream: sid))
        let deadline = MonotonicClock.milliseconds() + 3000
        while !sam.remoteStreams().contains(where: { $0.ssrc == ssrc }) && MonotonicClock.milliseconds() < deadline { usleep(5000) }
        let rec = SinkRecorder()
        try sam.setSink { rec.take($0, $1) }
        let input = Signal.glidingVoice(seconds: 6)
        usleep(100_000)
        let feedStart = MonotonicClock.nanoseconds()
        var i = 0, k: UInt64 = 0
        while i < input.count {
            try input.withUnsafeBufferPointer { try alex.feed(streamID: sid, pcm: $0.baseAddress! + i, frames: 960, channels: 1) }
            i += 960; k += 960
            let due = feedStart + k * 1_000_000_000 / 48000
            let now = MonotonicClock.nanoseconds()
            if due > now { usleep(UInt32((due - now) / 1000)) }
        }
        usleep(500_000)
        try sam.setSink(nil)
        let stats = try sam.streamStats(ssrc: ssrc)
        let (out, right, t0) = rec.snapshot
        // A mono stream plays L = R, its FEC and concealed frames too (the stereo
        // decoder draws each channel's concealment noise apart; the slot copies L).
        let apart = zip(out, right).filter { $0 != $1 }.count
        XCTAssertEqual(apart, 0, "\(apart) of \(out.count) samples of a mono stream differ between L and R")
        let offset = Int(Int64(feedStart) - Int64(t0)) * 48 / 1_000_000
        let shifted = offset > 0 && offset < out.count ? Array(out[offset...]) : out
        // The delay moves as the buffer stretches and catches up: correlate 100 ms windows.
        var nccs: [Double] = []
        for w in stride(from: 48000, to: 264_000, by: 4800) {
            nccs.append(Signal.align(input: input, output: shifted, maxLag: 48 * 300, window: w..<(w + 4800)).ncc)
        }
        let ncc = nccs.sorted()[nccs.count / 2]
        let j = stats.jitter
        print("through 5 % bursty loss + 30 ms jitter: median NCC of 100 ms windows \(String(format: "%.3f", ncc)); received \(j.packetsReceived), "
              + "lost \(j.packetsLost), late \(j.late), fec \(j.fecRecovered), plc \(j.plcFrames), underruns \(j.underruns), "
              + "target \(stats.targetDepthMs) ms; proxy dropped \(proxy.udpDropped)")
        XCTAssertGreaterThan(ncc, 0.7, "speech must still arrive, correlated with the input")
        XCTAssertGreaterThan(j.packetsLost, 3, "the stats must show the injected loss")
        XCTAssertLessThanOrEqual(Int(j.packetsLost), proxy.udpDropped, "no more lost than the proxy dropped (it also drops keepalive echoes)")
        XCTAssertGreaterThan(j.fecRecovered + j.plcFrames, 0)
        XCTAssertGreaterThan(stats.targetDepthMs, 20, "30 ms of jitter must raise the target above one frame")
    }
}

final class VoicePathRecoveryTests: XCTestCase {
    func testMediaBlackoutRaisesVoiceDisconnectedThenRebindsWithFreshKeys() throws {
        let server = try TestServer()
        defer { server.stop() }
        let proxy = try ImpairmentProxy(targetPort: server.port, downstream: Impairment(), seed: 1)
        defer { proxy.stop() }
        var cfg = ClientConfig()
        cfg.externalPlayback = true
        cfg.keepaliveMs = 100
        let sam = try VoiceClient(config: cfg), alex = try VoiceClient(config: cfg)
        defer { sam.shutdown(); alex.shutdown() }
        try sam.connect(host: "127.0.0.1", port: proxy.port, username: "sam", password: nil, pinnedFingerprint: nil, timeoutMs: 3000)
        try alex.connect(host: "127.0.0.1", port: server.port, username: "alex", password: nil, pinnedFingerprint: nil, timeoutMs: 3000)
        try sam.joinChannel("Lobby")
        try alex.joinChannel("Lobby")
        alex.setInputMode(.continuous)
        let sid = try alex.startStream(kind: .mic, externalFeed: true, channels: 1)
        let ssrc = alex.ssrc(ofStream: sid)!
        func waitEvent(_ t: ClientEventType, _ ms: Int) -> Bool {
            let deadline = MonotonicClock.milliseconds() + UInt64(ms)
            while MonotonicClock.milliseconds() < deadline {
                if let e = sam.pollEvent(timeoutMs: 50), e.type == t { return true }
            }
            return false
        }
        XCTAssertTrue(sam.connectionStats().voiceConnected)
        // Every UDP datagram to and from sam is lost; TCP still works.
        var blackout = Impairment()
        blackout.lossGood = 1
        proxy.setImpairment(upstream: blackout, downstream: blackout)
        XCTAssertTrue(waitEvent(.voiceDisconnected, 3000), "no voice-disconnected event")
        XCTAssertFalse(sam.connectionStats().voiceConnected)
        XCTAssertTrue(sam.isConnected, "the control session stays")
        proxy.setImpairment(upstream: Impairment(), downstream: Impairment())
        XCTAssertTrue(waitEvent(.voiceReconnected, 3000), "no voice-reconnected event")
        XCTAssertTrue(sam.connectionStats().voiceConnected)
        // Media flows again under the new epoch's keys.
        let before = (try? sam.streamStats(ssrc: ssrc).jitter.packetsReceived) ?? 0
        let tone = Signal.tone(440, seconds: 0.5)
        for k in 0..<25 {
            try tone.withUnsafeBufferPointer { try alex.feed(streamID: sid, pcm: $0.baseAddress! + k * 960, frames: 960, channels: 1) }
            usleep(20_000)
        }
        usleep(200_000)
        XCTAssertGreaterThan(try sam.streamStats(ssrc: ssrc).jitter.packetsReceived, before + 20)
        XCTAssertEqual(sam.connectionStats().authFailures, 0)
    }
}
