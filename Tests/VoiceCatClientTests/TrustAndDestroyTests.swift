// Trust on first use through the known-servers file, and destroying a client from
// another thread at any moment (through the C API, where handles live).
import Foundation
import Synchronization
import VoiceCatABI
import VoiceCatClient
import VoiceCatImpl
import VoiceCatProtocol
import VoiceCatSystem
import VoiceCatTestSupport
import XCTest

final class TrustAndDestroyTests: XCTestCase {
    func testKnownServersFileAcceptsTheFirstFingerprintAndRefusesAChangedOne() throws {
        let dir = TestEnvironment.makeDirectory()
        let store = dir + "/known_servers"
        let first = try HostileServer()
        let port = first.port
        let c = try VoiceClient(config: .testing(knownServers: store))
        defer { c.shutdown() }

        // First use: accepted and recorded; a second connect to the same identity too.
        try c.connect(host: "127.0.0.1", port: port, username: "alex", password: "pw", pinnedFingerprint: nil, timeoutMs: 3000)
        try c.disconnect()
        let text = try String(contentsOfFile: store, encoding: .utf8)
        XCTAssertEqual(text, "127.0.0.1:\(port) \(first.fingerprint)\n")
        try c.connect(host: "127.0.0.1", port: port, username: "alex", password: "pw", pinnedFingerprint: nil, timeoutMs: 3000)
        try c.disconnect()
        first.stop()

        // Another identity on the same host:port: refused, both fingerprints named, nothing sent after the handshake.
        let second = try HostileServer(port: port)
        defer { second.stop() }
        XCTAssertThrowsError(try c.connect(host: "127.0.0.1", port: port, username: "alex", password: "pw", pinnedFingerprint: nil,
                                           timeoutMs: 3000)) { e in
            XCTAssertEqual((e as? ClientError)?.code, VC_ERR_AUTH)
        }
        XCTAssertTrue(c.lastError.contains(first.fingerprint), c.lastError)
        XCTAssertTrue(c.lastError.contains(second.fingerprint), c.lastError)
        XCTAssertEqual(c.serverFingerprint, second.fingerprint)
        usleep(200_000)
        XCTAssertEqual(second.handshakes, 1)
        XCTAssertEqual(second.received.count, 0, "the client sent \(second.received) to a server whose identity changed")
        XCTAssertEqual(try String(contentsOfFile: store, encoding: .utf8), text, "the store must not change")

        // No store and no pin: refused before anything is sent, unless allow_unverified.
        let bare = try VoiceClient(config: .testing(knownServers: ""))
        defer { bare.shutdown() }
        XCTAssertThrowsError(try bare.connect(host: "127.0.0.1", port: port, username: "kim", password: nil, pinnedFingerprint: nil,
                                              timeoutMs: 3000)) { e in
            XCTAssertEqual((e as? ClientError)?.code, VC_ERR_AUTH)
        }
        XCTAssertEqual(second.handshakes, 1)
        try bare.connect(host: "127.0.0.1", port: port, username: "kim", password: nil, pinnedFingerprint: nil, allowUnverified: true,
                         timeoutMs: 3000)
        try bare.disconnect()

        // NULL: the per-user default file (under this test process's XDG_CONFIG_HOME).
        // Other tests of this process write it too, and an earlier server may have had
        // this port (the kernel hands ephemeral ports out again): its line would make
        // this server's identity look changed. Start from no file, and leave none
        // (this server's own identity would do the same to a later test server).
        let defaultFile = String(cString: getenv("XDG_CONFIG_HOME")) + "/voicecat/known_servers"
        unlink(defaultFile)
        defer { unlink(defaultFile) }
        let user = try VoiceClient(config: .testing(knownServers: nil))
        defer { user.shutdown() }
        try user.connect(host: "127.0.0.1", port: port, username: "sam", password: nil, pinnedFingerprint: nil, timeoutMs: 3000)
        let recorded = try String(contentsOfFile: defaultFile, encoding: .utf8)
        XCTAssertTrue(recorded.contains("127.0.0.1:\(port) \(second.fingerprint)"), recorded)
    }

    func testKnownServersFileEditedByHandWithCRLFLinesOrNoFinalLineEnd() throws {
        let dir = TestEnvironment.makeDirectory()
        let store = dir + "/known_servers"
        let server = try HostileServer()
        defer { server.stop() }
        let c = try VoiceClient(config: .testing(knownServers: store))
        defer { c.shutdown() }
        func connect() throws {
            try c.connect(host: "127.0.0.1", port: server.port, username: "alex", password: nil, pinnedFingerprint: nil,
                          timeoutMs: 3000)
            try c.disconnect()
        }
        // CRLF line ends (a file edited on another system), the right fingerprint:
        // accepted as known (it was refused as "changed", the CR taken into it).
        let crlf = "# servers\r\n127.0.0.1:\(server.port) \(server.fingerprint)\r\n"
        try crlf.write(toFile: store, atomically: true, encoding: .utf8)
        try connect()
        XCTAssertEqual(try String(contentsOfFile: store, encoding: .utf8), crlf, "known: nothing appended")

        // A last line without its line end: the new entry goes on a line of its own
        // (it was glued to that line, spoiling both), and both servers stay known.
        let other = "example.org:47800 " + String(repeating: "ab", count: 32)
        try other.write(toFile: store, atomically: true, encoding: .utf8)
        try connect()
        XCTAssertEqual(try String(contentsOfFile: store, encoding: .utf8),
                       other + "\n127.0.0.1:\(server.port) \(server.fingerprint)\n")
        try connect()
    }

    func testUsernamesAndChannelNamesAreCheckedBeforeSending() throws {
        let hostile = try HostileServer()
        defer { hostile.stop() }
        let c = try VoiceClient(config: .testing())
        defer { c.shutdown() }
        for bad in ["", "bell\u{07}", "esc\u{1b}[31m", "nl\nx", String(repeating: "é", count: 33), "c1\u{85}"] {
            XCTAssertThrowsError(try c.connect(host: "127.0.0.1", port: hostile.port, username: bad, password: nil, pinnedFingerprint: nil,
                                               allowUnverified: true, timeoutMs: 3000)) { e in
                XCTAssertEqual((e as? ClientError)?.code, VC_ERR_INVALID_ARG, bad.debugDescription)
            }
        }
        XCTAssertEqual(hostile.handshakes, 0)
        try c.connect(host: "127.0.0.1", port: hostile.port, username: "zoë", password: nil, pinnedFingerprint: nil,
                      allowUnverified: true, timeoutMs: 3000)
        XCTAssertThrowsError(try c.joinChannel("Lob\u{1b}by")) { e in XCTAssertEqual((e as? ClientError)?.code, VC_ERR_INVALID_ARG) }
        XCTAssertFalse(hostile.received.contains { if case .joinChannel = $0 { return true }; return false })
        // Through the C API: a username that is not UTF-8.
        var h: OpaquePointer? = nil
        var cfg = vc_client_config_default()
        cfg.external_playback = 1
        XCTAssertEqual(vc_client_create(&cfg, &h), VC_OK)
        defer { vc_client_destroy(h) }
        let badUTF8: [CChar] = [0x61, CChar(bitPattern: 0xff), 0x62, 0]
        let rc = "127.0.0.1".withCString { host in
            badUTF8.withUnsafeBufferPointer { user in
                var p = vc_connect_params(host: host, port: hostile.port, username: user.baseAddress, password: nil, server_fingerprint: nil,
                                          timeout_ms: 2000, allow_unverified: 1)
                return vc_connect(h, &p)
            }
        }
        XCTAssertEqual(rc, VC_ERR_INVALID_ARG)
    }

    static func count(_ dir: String) -> Int { (try? FileManager.default.contentsOfDirectory(atPath: dir).count) ?? -1 }

    /// Threads of this process named `name` (/proc/self/task/*/comm).
    static func threads(named name: String) -> Int {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        return tasks.filter { t in
            (try? String(contentsOfFile: "/proc/self/task/\(t)/comm", encoding: .utf8))?
                .trimmingCharacters(in: .whitespacesAndNewlines) == name
        }.count
    }

    func testADisconnectedClientKeepsNoThread() throws {
        // docs/architecture.md: disconnect leaves no thread behind. The send pacer
        // (vc-send) of a client that had published a stream outlived vc_disconnect.
        let server = try TestServer()
        defer { server.stop() }
        let c = try VoiceClient(config: .testing())
        defer { c.shutdown() }
        let before = Self.threads(named: "vc-send")
        for round in 0..<2 {
            try c.connect(host: "127.0.0.1", port: server.port, username: "alex", password: nil, pinnedFingerprint: nil,
                          allowUnverified: true, timeoutMs: 3000)
            try c.joinChannel("Lobby")
            let sid = try c.startStream(kind: .mic, externalFeed: true, channels: 1)
            let tone = Signal.tone(440, seconds: 0.5)
            try tone.withUnsafeBufferPointer { try c.feed(streamID: sid, pcm: $0.baseAddress!, frames: tone.count, channels: 1) }
            // The thread names itself once it runs: wait for it (a loaded machine).
            let deadline = MonotonicClock.milliseconds() + 3000
            while Self.threads(named: "vc-send") != before + 1 && MonotonicClock.milliseconds() < deadline { usleep(2000) }
            XCTAssertEqual(Self.threads(named: "vc-send"), before + 1, "round \(round): the pacer runs while the stream does")
            try c.disconnect()
            XCTAssertEqual(Self.threads(named: "vc-send"), before, "round \(round): the pacer outlived the session")
        }
    }

    /// vc_client_destroy from another thread at 20 points during connect, join, stream
    /// start and streaming (5 delays into each stage, over a proxy that delays TCP so
    /// each stage lasts): no crash, no hang, no thread or descriptor left behind.
    /// One client's event callback destroys another client: the destroy returns, and
    /// the destroyed client's event callback was cleared first (it is not called with the
    /// DISCONNECTED the teardown raises), as the header says. (After the callback rules
    /// were applied across clients, the clearing was refused there and the destroyed
    /// client's callback saw its DISCONNECTED; a handler tearing down the other leg of
    /// a bridge there waited for the first destroy for good.)
    func testAClientDestroyedFromAnotherClientsCallbackHearsNothingOfIt() throws {
        let server = try TestServer()
        defer { server.stop() }
        let alex = try CHost(port: server.port, name: "alex", channel: "Lobby")
        let sam = try CHost(port: server.port, name: "sam", channel: "Lobby")
        final class Shared: @unchecked Sendable {
            let sam: OpaquePointer
            let taken = Atomic<Bool>(false), destroyed = Atomic<Bool>(false), samSawDisconnected = Atomic<Int>(0)
            init(sam: OpaquePointer) { self.sam = sam }
        }
        let state = Shared(sam: sam.h)
        let user = Unmanaged.passUnretained(state).toOpaque()
        let samCB: vc_event_fn = { user, e in
            guard let user, let e, e.pointee.type == VC_EVENT_DISCONNECTED else { return }
            Unmanaged<Shared>.fromOpaque(user).takeUnretainedValue().samSawDisconnected.wrappingAdd(1, ordering: .relaxed)
        }
        let alexCB: vc_event_fn = { user, e in
            guard let user, let e, e.pointee.type == VC_EVENT_USER_JOINED else { return }
            let st = Unmanaged<Shared>.fromOpaque(user).takeUnretainedValue()
            guard !st.taken.exchange(true, ordering: .acquiringAndReleasing) else { return }
            vc_client_destroy(st.sam)
            st.destroyed.store(true, ordering: .releasing)
        }
        XCTAssertEqual(vc_set_event_callback(sam.h, samCB, user), VC_OK)
        XCTAssertEqual(vc_set_event_callback(alex.h, alexCB, user), VC_OK)
        let kim = try CHost(port: server.port, name: "kim", channel: "Lobby")   // USER_JOINED reaches alex
        let deadline = MonotonicClock.milliseconds() + 5000
        while !state.destroyed.load(ordering: .acquiring) && MonotonicClock.milliseconds() < deadline { usleep(5000) }
        XCTAssertTrue(state.destroyed.load(ordering: .acquiring), "the destroy from alex's callback returned")
        XCTAssertEqual(state.samSawDisconnected.load(ordering: .relaxed), 0, "sam's callback was cleared before its DISCONNECTED")
        XCTAssertEqual(vc_join_channel(sam.h, "Lobby"), VC_ERR_INVALID_ARG, "the handle is gone")
        XCTAssertEqual(vc_set_event_callback(alex.h, nil, nil), VC_OK)
        _ = kim
    }

    func testDestroyFromAnotherThreadAtTwentyPoints() throws {
        let server = try TestServer()
        defer { server.stop() }
        var slow = Impairment()
        slow.baseDelayMs = 15
        let proxy = try ImpairmentProxy(targetPort: server.port, upstream: slow, downstream: slow, seed: 7)
        var proxyStopped = false
        defer { if !proxyStopped { proxy.stop() } }
        proxy.setTCPDelay(ms: 15)
        let tone = Signal.tone(440, seconds: 0.02)

        // Warm up once (lazy process-wide state), then take the baseline.
        do {
            var h: OpaquePointer? = nil
            var cfg = vc_client_config_default()
            cfg.external_playback = 1
            _ = vc_client_create(&cfg, &h)
            vc_client_destroy(h)
        }
        let threads0 = Self.count("/proc/self/task"), fds0 = Self.count("/proc/self/fd")
        var stagesHit: [Int: Int] = [:]
        for point in 0..<20 {
            let stage = point % 4, delayMs = UInt32(point / 4) * 12
            var h: OpaquePointer? = nil
            var cfg = vc_client_config_default()
            cfg.external_playback = 1
            cfg.keepalive_ms = 1000
            XCTAssertEqual(vc_client_create(&cfg, &h), VC_OK)
            let handle = h
            let reached = Atomic<Int>(-1)
            let finished = Atomic<Bool>(false)
            let worker = SystemThread(name: "destroy-test") {
                defer { finished.store(true, ordering: .sequentiallyConsistent) }
                reached.store(0, ordering: .sequentiallyConsistent)
                let rc = "127.0.0.1".withCString { host in
                    "victim\(point)".withCString { user in
                        var p = vc_connect_params(host: host, port: proxy.port, username: user, password: nil, server_fingerprint: nil,
                                                  timeout_ms: 5000, allow_unverified: 1)
                        return vc_connect(handle, &p)
                    }
                }
                guard rc == VC_OK else { return }
                reached.store(1, ordering: .sequentiallyConsistent)
                guard vc_join_channel(handle, "Lobby") == VC_OK else { return }
                reached.store(2, ordering: .sequentiallyConsistent)
                var d = vc_stream_desc_default()
                var sid: UInt32 = 0
                guard vc_stream_start(handle, &d, &sid) == VC_OK else { return }
                reached.store(3, ordering: .sequentiallyConsistent)
                for _ in 0..<100 {
                    let r = tone.withUnsafeBufferPointer { vc_stream_feed_pcm(handle, sid, $0.baseAddress, 960, 1) }
                    if r != VC_OK { return }
                    usleep(10_000)
                }
            }
            // Wait for the stage, then a few ms into it, then destroy.
            let stageDeadline = MonotonicClock.milliseconds() + 5000
            while reached.load(ordering: .sequentiallyConsistent) < stage && !finished.load(ordering: .sequentiallyConsistent)
                    && MonotonicClock.milliseconds() < stageDeadline { usleep(500) }
            usleep(delayMs * 1000)
            let at = reached.load(ordering: .sequentiallyConsistent)
            stagesHit[at, default: 0] += 1
            let t0 = MonotonicClock.milliseconds()
            vc_client_destroy(handle)
            let destroyMs = MonotonicClock.milliseconds() - t0
            XCTAssertLessThan(destroyMs, 5000, "point \(point): destroy took \(destroyMs) ms")
            // The blocked call returns promptly.
            let deadline = MonotonicClock.milliseconds() + 5000
            while !finished.load(ordering: .sequentiallyConsistent) && MonotonicClock.milliseconds() < deadline { usleep(1000) }
            XCTAssertTrue(finished.load(ordering: .sequentiallyConsistent), "point \(point): the worker's call did not return")
            worker.join()
            // Later calls with the handle are refused, not crashes.
            XCTAssertEqual(vc_join_channel(handle, "Lobby"), VC_ERR_INVALID_ARG)
        }
        let threads1 = Self.count("/proc/self/task")
        // The proxy keeps a socket per client it relayed and the server closes its side
        // of each connection when it notices: count descriptors once both are done.
        proxy.stop()
        proxyStopped = true
        let fdDeadline = MonotonicClock.milliseconds() + 5000
        while Self.count("/proc/self/fd") > fds0 - 2 && MonotonicClock.milliseconds() < fdDeadline { usleep(10_000) }
        let fds1 = Self.count("/proc/self/fd") + 2   // the proxy's own listener and UDP socket were in the baseline
        print("destroy at 20 points: stage reached when destroyed \(stagesHit.sorted { $0.key < $1.key }) "
              + "(0 connect, 1 join, 2 stream start, 3 streaming); threads \(threads0) → \(threads1), descriptors \(fds0) → \(fds1)")
        XCTAssertLessThanOrEqual(threads1, threads0, "a thread outlived its client")
        XCTAssertLessThanOrEqual(fds1, fds0, "a descriptor outlived its client")
        XCTAssertGreaterThanOrEqual(stagesHit.keys.count, 3, "the points should spread over the stages")
    }
    /// A host thread waiting in vc_poll_event (no timeout, and a long one) when another
    /// thread destroys the client returns promptly, and destroy returns: with 0 events
    /// when the client never connected or connected and disconnected (nothing raises
    /// an event then to wake the waiter: a wake alone left it waiting and destroy
    /// hung), with the DISCONNECTED the destroy raised when it was connected.
    func testDestroyReleasesAThreadWaitingForEventsWhenNothingIsConnected() throws {
        let server = try TestServer()
        defer { server.stop() }
        // The last case also publishes a stream: the destroy stops it, and the waiter
        // must still wake with the DISCONNECTED (it woke with GATE_CLOSED, and its next
        // poll found the handle freed).
        for (connectFirst, timeoutMs, stayConnected, withStream) in [(false, Int32(-1), false, false), (false, 8000, false, false),
                                                                     (true, -1, false, false), (true, -1, true, false), (true, -1, true, true)] {
            var h: OpaquePointer? = nil
            var cfg = vc_client_config_default()
            cfg.external_playback = 1
            XCTAssertEqual(vc_client_create(&cfg, &h), VC_OK)
            let handle = h
            if connectFirst {
                let rc = "127.0.0.1".withCString { host in
                    "poller".withCString { user in
                        var p = vc_connect_params(host: host, port: server.port, username: user, password: nil, server_fingerprint: nil,
                                                  timeout_ms: 5000, allow_unverified: 1)
                        return vc_connect(handle, &p)
                    }
                }
                XCTAssertEqual(rc, VC_OK)
                if !stayConnected { XCTAssertEqual(vc_disconnect(handle), VC_OK) }
                if withStream {
                    XCTAssertEqual(vc_join_channel(handle, "Lobby"), VC_OK)
                    XCTAssertEqual(vc_set_input_mode(handle, VC_INPUT_CONTINUOUS), VC_OK)
                    var d = vc_stream_desc_default()
                    var sid: UInt32 = 0
                    XCTAssertEqual(vc_stream_start(handle, &d, &sid), VC_OK)
                    let zeros = [Int16](repeating: 0, count: 96_000)
                    XCTAssertEqual(zeros.withUnsafeBufferPointer { vc_stream_feed_pcm(handle, sid, $0.baseAddress, 96_000, 1) }, VC_OK)
                }
                usleep(100_000)
                var e = vc_event()
                while vc_poll_event(handle, &e, 0) == 1 {}
            }
            let result = Atomic<Int32>(99)
            let eventType = Atomic<Int32>(-1)
            let waiting = Atomic<Bool>(false)
            let poller = SystemThread(name: "poller") {
                var e = vc_event()
                waiting.store(true, ordering: .sequentiallyConsistent)
                result.store(vc_poll_event(handle, &e, timeoutMs), ordering: .sequentiallyConsistent)
                eventType.store(Int32(e.type.rawValue), ordering: .sequentiallyConsistent)
            }
            while !waiting.load(ordering: .sequentiallyConsistent) { usleep(1000) }
            usleep(200_000)   // well inside its wait
            XCTAssertEqual(result.load(ordering: .sequentiallyConsistent), 99, "the poller returned before the destroy")
            let t0 = MonotonicClock.milliseconds()
            // Destroy on a thread of its own, so a hang fails this test instead of stopping it.
            let destroyed = Atomic<Bool>(false)
            let destroyer = SystemThread(name: "destroyer") {
                vc_client_destroy(handle)
                destroyed.store(true, ordering: .sequentiallyConsistent)
            }
            while !destroyed.load(ordering: .sequentiallyConsistent) && MonotonicClock.milliseconds() < t0 + 10_000 { usleep(1000) }
            let ms = MonotonicClock.milliseconds() - t0
            XCTAssertTrue(destroyed.load(ordering: .sequentiallyConsistent),
                          "connected first: \(connectFirst), timeout \(timeoutMs): vc_client_destroy did not return in 10 s")
            guard destroyed.load(ordering: .sequentiallyConsistent) else { return }   // the threads are stuck: do not join
            destroyer.join()
            poller.join()
            if stayConnected {
                // Connected at the destroy: the waiter takes the DISCONNECTED it raised.
                XCTAssertEqual(result.load(ordering: .sequentiallyConsistent), 1, "vc_poll_event during the destroy of a connected client")
                XCTAssertEqual(eventType.load(ordering: .sequentiallyConsistent), Int32(VC_EVENT_DISCONNECTED.rawValue))
            } else {
                XCTAssertEqual(result.load(ordering: .sequentiallyConsistent), 0, "vc_poll_event after a destroy")
            }
            // Well under the 8 s timeout: the waiter was released, not timed out.
            XCTAssertLessThan(ms, 6000, "connected first: \(connectFirst), timeout \(timeoutMs): destroy took \(ms) ms")
        }
    }
}
