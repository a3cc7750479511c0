// The seams between the engine's parts, driven through the client as a host would:
// the output stage under every order of mode changes while a talker talks, the
// callbacks' lifetime contract, and where and in what order events arrive.
import Foundation
@testable import VoiceCatClient
import VoiceCatDevices
import VoiceCatProtocol
import VoiceCatSystem
import VoiceCatTestSupport
import XCTest

/// Everything the sink saw: blocks with their time and thread, and overlaps.
final class SinkProbe: @unchecked Sendable {
    let lock = NSLock()
    var blocks: [(t: UInt64, thread: pthread_t, pcm: [Int16])] = []
    private let inside = ManagedAtomicInt()
    var overlaps = 0

    func take(_ pcm: UnsafePointer<Int16>, _ frames: Int) {
        if inside.increment() > 1 { lock.lock(); overlaps += 1; lock.unlock() }
        let left = (0..<frames).map { pcm[2 * $0] }
        let t = MonotonicClock.nanoseconds()
        lock.lock()
        blocks.append((t, pthread_self(), left))
        lock.unlock()
        inside.decrement()
    }

    func window(from: UInt64, to: UInt64) -> [(t: UInt64, thread: pthread_t, pcm: [Int16])] {
        lock.lock(); defer { lock.unlock() }
        return blocks.filter { $0.t >= from && $0.t < to }
    }
}

/// A tiny atomic counter for the probe (Foundation-only tests).
final class ManagedAtomicInt: @unchecked Sendable {
    private let lock = NSLock()
    private var v = 0
    func increment() -> Int { lock.lock(); defer { lock.unlock() }; v += 1; return v }
    func decrement() { lock.lock(); v -= 1; lock.unlock() }
}

final class EngineSeamTests: XCTestCase {
    var server: TestServer!
    var clients: [VoiceClient] = []

    override func setUpWithError() throws { server = try TestServer() }

    override func tearDown() {
        for c in clients { c.shutdown() }
        clients = []
        server.stop()
    }

    func make(_ name: String, external: Bool = true, backend: AudioBackend? = nil, device: String = "default",
              channel: String? = "Lobby") throws -> VoiceClient {
        var cfg = ClientConfig()
        cfg.keepaliveMs = 1000
        cfg.externalPlayback = external
        cfg.playbackDevice = device
        if let backend { cfg.backend = backend }
        let c = try VoiceClient(config: cfg)
        clients.append(c)
        try c.connect(host: "127.0.0.1", port: server.port, username: name, password: nil, pinnedFingerprint: nil, timeoutMs: 3000)
        if let channel { try c.joinChannel(channel) }
        return c
    }

    // The talker's "clock": a staircase of 25 tones, one step per 40 ms.
    static let stepSamples = 1920
    static func stepFrequency(_ step: Int) -> Double { 400 + 40 * Double(step % 25) }

    /// The step whose tone dominates a block, or nil when the block is (nearly) silent.
    static func decodeStep(_ pcm: [Int16]) -> Int? {
        var best = (step: -1, power: 0.0)
        for s in 0..<25 {
            let p = Signal.tonePower(pcm[...], stepFrequency(s))
            if p > best.power { best = (s, p) }
        }
        return best.power > 2e5 ? best.step : nil
    }

    func testEveryOrderOfModeChangesKeepsOneRendererAtRealTimeAndTheHeadersPullRule() throws {
        let backend = MemoryAudioBackend()
        let speaker = backend.addDevice("mem-play", direction: .playback, channels: 2)
        let alex = try make("alex")
        alex.setInputMode(.continuous)
        let sid = try alex.startStream(kind: .mic, externalFeed: true, channels: 1)
        let ssrc = try XCTUnwrap(alex.ssrc(ofStream: sid))
        let sam = try make("sam", external: true, backend: backend, device: "mem-play")
        try sam.waitForRemote(ssrc: ssrc)

        // Alex talks for the whole test: the staircase, fed in real time.
        let talking = ManagedAtomicInt()
        _ = talking.increment()
        let feedStart = MonotonicClock.nanoseconds()
        let feeder = Thread {
            var k = 0
            var block = [Int16](repeating: 0, count: 960)
            while true {
                let doneFlag = talking.increment(); talking.decrement()
                if doneFlag < 2 { break }
                for i in 0..<960 {
                    let n = k * 960 + i
                    block[i] = Int16(9000 * sin(2 * .pi * Self.stepFrequency(n / Self.stepSamples) * Double(n) / 48000))
                }
                try? block.withUnsafeBufferPointer { try alex.feed(streamID: sid, pcm: $0.baseAddress!, frames: 960, channels: 1) }
                k += 1
                let due = feedStart + UInt64(k) * 20_000_000
                let now = MonotonicClock.nanoseconds()
                if due > now { usleep(UInt32((due - now) / 1000)) }
            }
        }
        feeder.start()
        defer { talking.decrement() }

        let probe = SinkProbe()
        var external = true, sinkSet = false, connected = true, suspended = false
        enum Op: CaseIterable { case sink, external, connection, suspend }
        func apply(_ op: Op) throws {
            switch op {
            case .sink:
                sinkSet.toggle()
                try sam.setSink(sinkSet ? { probe.take($0, $1) } : nil)
            case .external:
                external.toggle()
                try sam.setExternalPlayback(external)
            case .connection:
                connected.toggle()
                if connected {
                    try sam.connect(host: "127.0.0.1", port: server.port, username: "sam", password: nil, pinnedFingerprint: nil,
                                    timeoutMs: 3000)
                    try sam.joinChannel("Lobby")
                } else {
                    try sam.disconnect()
                }
            case .suspend:
                suspended.toggle()
                if suspended { try sam.suspendAudio() } else { try sam.restartAudio() }
            }
        }

        var permutations: [[Op]] = []
        func permute(_ rest: [Op], _ prefix: [Op]) {
            if rest.isEmpty { permutations.append(prefix); return }
            for (i, op) in rest.enumerated() { var r = rest; r.remove(at: i); permute(r, prefix + [op]) }
        }
        permute(Op.allCases, [])
        XCTAssertEqual(permutations.count, 24)

        let dwellNs: UInt64 = 100_000_000
        var steps = 0, activeWindows = 0, alignedBlocks = 0, decodedBlocks = 0
        var pcm = [Int16](repeating: 0, count: 960 * 2)
        for order in permutations {
            for op in order + order {
                try apply(op)
                steps += 1
                let mode: OutputStage.Mode = (!external && connected && !suspended) ? .device : (external && sinkSet ? .sink : .pull)
                let sinkCalled = mode == .sink || (mode == .device && sinkSet)
                let label = "after \(op) (external \(external), sink \(sinkSet), connected \(connected), suspended \(suspended))"
                XCTAssertEqual(sam.output.mode, mode, label)
                // vc_read_mixed_pcm: served in pull mode, refused while a driver owns the mix.
                let pulled = (try? pcm.withUnsafeMutableBufferPointer { try sam.readMixed(into: $0.baseAddress!, frames: 960) }) != nil
                XCTAssertEqual(pulled, mode == .pull, "pull \(label)")
                let written0 = speaker.writtenCount
                let t0 = MonotonicClock.nanoseconds()
                usleep(UInt32(dwellNs / 1000))
                let t1 = MonotonicClock.nanoseconds()
                let wrote = speaker.writtenCount - written0
                let window = probe.window(from: t0, to: t1)
                let realTimeBlocks = Int((t1 - t0) / 20_000_000)
                if sinkCalled {
                    activeWindows += 1
                    XCTAssertGreaterThanOrEqual(window.count, 1, "the sink is not called \(label)")
                    XCTAssertLessThanOrEqual(window.count, realTimeBlocks + 3, "the sink is called faster than real time \(label)")
                    let threads = Set(window.map { UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(bitPattern: UInt($0.thread)))) })
                    XCTAssertLessThanOrEqual(threads.count, 1, "the sink is called from \(threads.count) threads \(label)")
                    if connected {
                        for b in window {
                            guard let s = Self.decodeStep(b.pcm) else { continue }
                            decodedBlocks += 1
                            let now = Int((b.t - feedStart) / 40_000_000)
                            let lagSteps = ((now - s) % 25 + 25) % 25
                            if lagSteps <= 8 { alignedBlocks += 1 }
                        }
                    }
                } else {
                    XCTAssertEqual(window.count, 0, "the sink is called \(label)")
                }
                if mode == .device {
                    XCTAssertGreaterThan(wrote, 0, "the device plays nothing \(label)")
                    XCTAssertLessThanOrEqual(wrote / 2, (realTimeBlocks + 3) * 960, "the device plays faster than real time \(label)")
                } else {
                    XCTAssertEqual(wrote, 0, "the device plays \(label)")
                }
            }
        }
        XCTAssertEqual(steps, 192)
        XCTAssertEqual(probe.overlaps, 0, "sink calls overlapped")
        print("mode changes: \(steps) steps, \(activeWindows) windows with the sink called, "
              + "\(alignedBlocks) of \(decodedBlocks) decoded blocks within 320 ms of the talker")
        XCTAssertGreaterThan(decodedBlocks, 100)
        XCTAssertGreaterThanOrEqual(Double(alignedBlocks), 0.8 * Double(decodedBlocks), "what the sink gets drifted from what was sent")
    }

    func testClearingTheSinkOrEventCallbackWaitsForARunningCall() throws {
        let sam = try make("sam")
        let inside = ManagedAtomicInt(), finished = ManagedAtomicInt()
        try sam.setSink { _, _ in
            if inside.increment() == 1 { usleep(300_000); _ = finished.increment() }
        }
        while inside.increment() < 3 { inside.decrement(); usleep(2000) }   // the first call is running
        inside.decrement()
        try sam.setSink(nil)
        XCTAssertEqual(finished.increment(), 2, "the sink was cleared while its call still ran")

        let evInside = ManagedAtomicInt(), evFinished = ManagedAtomicInt()
        try sam.setEventHandler { _ in
            if evInside.increment() == 1 { usleep(300_000); _ = evFinished.increment() }
        }
        let alex = try make("alex")   // USER_JOINED reaches sam's handler
        _ = alex
        let deadline = MonotonicClock.milliseconds() + 3000
        while MonotonicClock.milliseconds() < deadline {
            if evInside.increment() >= 2 { evInside.decrement(); break }
            evInside.decrement()
            usleep(2000)
        }
        try sam.setEventHandler(nil)
        XCTAssertEqual(evFinished.increment(), 2, "the event callback was cleared while its call still ran")
        // From inside the sink, setting or clearing the sink is refused (it cannot wait for itself).
        let refused = ManagedAtomicInt()
        try sam.setSink { _, _ in
            if (try? sam.setSink(nil)) == nil { _ = refused.increment() }
        }
        usleep(100_000)
        try sam.setSink(nil)
        XCTAssertGreaterThan(refused.increment(), 1)
    }

    /// One client's callbacks calling another client: what could deadlock is refused.
    /// Two event callbacks each replacing the other client's callback waited for each
    /// other for good; two per-speaker sinks each pulling the other client's mix too
    /// (a lock-order inversion of the render locks); callback-unsafe calls on another
    /// client (a format change, a drain) ran inside the callback.
    func testCallsFromOneClientsCallbacksIntoAnotherAreRefusedWhereTheyCouldDeadlock() throws {
        let alex = try make("alex"), sam = try make("sam")
        func isState(_ e: Error) -> Bool { if case .state? = e as? ClientError { return true }; return false }
        let results = Shared<[String]>([])
        func note(_ what: String, _ body: () throws -> Void) {
            do { try body(); results.update { $0.append("\(what): ok") } } catch let e as ClientError {
                results.update { $0.append("\(what): \(isState(e) ? "refused" : "\(e)")") }
            } catch { results.update { $0.append("\(what): \(error)") } }
        }
        let once = (alex: Shared(false), sam: Shared(false))
        try alex.setEventHandler { e in
            guard e.type == .userJoined, !once.alex.value else { return }
            once.alex.value = true
            note("alex's callback replaces sam's") { try sam.setEventHandler { _ in } }
            note("alex's callback changes sam's format") { try sam.setOutputFormat(sampleRate: 16000, channels: 1) }
        }
        try sam.setEventHandler { e in
            guard e.type == .userJoined, !once.sam.value else { return }
            once.sam.value = true
            note("sam's callback replaces alex's") { try alex.setEventHandler { _ in } }
        }
        let kim = try make("kim")   // USER_JOINED reaches both callbacks at about the same time
        let deadline = MonotonicClock.milliseconds() + 5000
        while results.value.count < 3 && MonotonicClock.milliseconds() < deadline { usleep(5000) }
        print("calls into another client from event callbacks: \(results.value)")
        XCTAssertEqual(Set(results.value), ["alex's callback replaces sam's: refused", "alex's callback changes sam's format: refused",
                                            "sam's callback replaces alex's: refused"])
        try alex.setEventHandler(nil)
        try sam.setEventHandler(nil)

        // Per-speaker sinks each pulling the other client's mix.
        kim.setInputMode(.continuous)
        let sid = try kim.startStream(kind: .mic, externalFeed: true, channels: 1)
        let ssrc = try XCTUnwrap(kim.ssrc(ofStream: sid))
        try alex.waitForRemote(ssrc: ssrc)
        try sam.waitForRemote(ssrc: ssrc)
        let pulls = Shared<[String]>([])
        func pullFrom(_ other: VoiceClient, _ who: String) -> (SpeakerBlock) -> Void {
            { _ in
                var buf = [Int16](repeating: 0, count: 960 * 2)
                do { try buf.withUnsafeMutableBufferPointer { try other.readMixed(into: $0.baseAddress!, frames: 960) }
                    pulls.update { $0.append("\(who): ok") }
                } catch { pulls.update { $0.append("\(who): \(isState(error) ? "refused" : "\(error)")") } }
            }
        }
        try alex.setSpeakerSink(pullFrom(sam, "alex's sink pulls sam"))
        try sam.setSpeakerSink(pullFrom(alex, "sam's sink pulls alex"))
        let tone = Signal.tone(440, seconds: 1, amplitude: 0.3)
        for k in 0..<50 {
            tone.withUnsafeBufferPointer { try? kim.feed(streamID: sid, pcm: $0.baseAddress! + k * 960, frames: 960, channels: 1) }
            usleep(20_000)
        }
        try alex.setSpeakerSink(nil)
        try sam.setSpeakerSink(nil)
        let seen = Set(pulls.value)
        print("pulls of another client's mix from per-speaker sinks: \(pulls.value.count), \(seen)")
        XCTAssertEqual(seen, ["alex's sink pulls sam: refused", "sam's sink pulls alex: refused"])
    }

    func testEveryEventArrivesOnTheNetworkThreadInProtocolOrder() throws {
        let alex = try make("alex")
        alex.setInputMode(.continuous)
        let aSid = try alex.startStream(kind: .mic, externalFeed: true, channels: 1)
        let aSSRC = try XCTUnwrap(alex.ssrc(ofStream: aSid))
        let bob = try make("bob", channel: "Music")
        let bSid = try bob.startStream(kind: .screenAudio, externalFeed: true, channels: 2)
        let bSSRC = try XCTUnwrap(bob.ssrc(ofStream: bSid))

        var cfg = ClientConfig()
        cfg.externalPlayback = true
        let sam = try VoiceClient(config: cfg)
        clients.append(sam)
        let lock = NSLock()
        var seen: [(type: ClientEventType, ssrc: UInt32, text: String, onNetwork: Bool)] = []
        try sam.setEventHandler { e in
            let role = sam.callerRole
            lock.lock(); seen.append((e.type, e.ssrc, e.text, role == .network)); lock.unlock()
        }
        try sam.connect(host: "127.0.0.1", port: server.port, username: "sam", password: nil, pinnedFingerprint: nil, timeoutMs: 3000)
        try sam.joinChannel("Lobby")
        try sam.waitForRemote(ssrc: aSSRC)
        try sam.joinChannel("Music")
        try sam.waitForRemote(ssrc: bSSRC)
        try sam.disconnect()
        let events = { () -> [(type: ClientEventType, ssrc: UInt32, text: String, onNetwork: Bool)] in
            lock.lock(); defer { lock.unlock() }; return seen
        }()
        XCTAssertTrue(events.allSatisfy { $0.onNetwork }, "events delivered off the network thread: \(events.filter { !$0.onNetwork }.map { $0.type })")
        func index(_ t: ClientEventType, ssrc: UInt32 = 0, text: String? = nil) -> Int? {
            events.firstIndex { $0.type == t && (ssrc == 0 || $0.ssrc == ssrc) && (text == nil || $0.text == text) }
        }
        XCTAssertEqual(events.first?.type, .connected)
        XCTAssertEqual(events.last?.type, .disconnected)
        let joinedLobby = try XCTUnwrap(index(.channelJoined, text: "Lobby"))
        let addedA = try XCTUnwrap(index(.remoteStreamAdded, ssrc: aSSRC))
        let removedA = try XCTUnwrap(index(.remoteStreamRemoved, ssrc: aSSRC))
        let joinedMusic = try XCTUnwrap(index(.channelJoined, text: "Music"))
        let addedB = try XCTUnwrap(index(.remoteStreamAdded, ssrc: bSSRC))
        XCTAssertLessThan(joinedLobby, addedA, "CHANNEL_JOINED(Lobby) after that channel's stream")
        XCTAssertLessThan(addedA, removedA)
        XCTAssertLessThan(removedA, joinedMusic, "the old channel's streams go before CHANNEL_JOINED(Music)")
        XCTAssertLessThan(joinedMusic, addedB, "CHANNEL_JOINED(Music) after that channel's stream")
        // The queue holds the same events in the same order.
        var polled: [ClientEventType] = []
        while let e = sam.pollEvent(timeoutMs: 0) { polled.append(e.type) }
        XCTAssertEqual(polled, events.map { $0.type })
    }
}
