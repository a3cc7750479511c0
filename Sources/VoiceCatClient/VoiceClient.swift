// The client engine behind libvoicecat: one session with a server, its published
// streams, the receive slots and the mixer.
//
// Threads:
//   * callers (the host's threads): connect, join, start/stop streams, feed PCM,
//     settings and stats. Blocking requests wait on `cond` for the network thread.
//   * the network thread: reads the control channel and the UDP socket, inserts
//     frames into the receive slots, keepalive/ping timers, rebinding, talk state,
//     events (and the host's event callback).
//   * the mixer thread (only while a sink is set): renders the mix every 20 ms.
import Glibc
import VoiceCatAudio
import VoiceCatProtocol
import VoiceCatSystem

public final class VoiceClient: MediaSender {
    public let config: ClientConfig

    // Session state, guarded by `cond`.
    let cond = Condition()
    var control: ControlConnection?
    var udp: Socket?
    var serverAddress = SocketAddress()
    var hello: HelloResult?
    var fingerprint: String?
    var channelID: UInt32 = 0
    var channelAudio: AudioConfig?
    var usernames: [UInt32: String] = [:]
    var localStreams: [UInt32: LocalStream] = [:]
    var nextStreamID: UInt32 = 1
    var nextRequestID: UInt32 = 1
    /// Outstanding requests by request id: nil until the reply arrives.
    var replies: [UInt32: ControlMessage?] = [:]
    var connected = false
    var networkThread: SystemThread?
    var networkThreadID: pthread_t?
    var stopNetwork = false
    var lastErrorText = ""

    // Media keys: the receive key is used by the network thread only. What a feeding
    // thread needs to send (key, socket, server address) and the server-mute flag are
    // one snapshot under `keyLock`, taken once per frame; sealing happens outside it.
    struct MediaSendPath {
        var key: SymmetricKey
        let socket: Socket
        let address: SocketAddress
    }
    let keyLock = Lock()
    var mediaSend: MediaSendPath?
    var selfMuted = false
    var mediaReceiveKey: SymmetricKey?
    var epoch: UInt32 = 0

    // Counters (network thread writes under statsLock; senders too).
    let statsLock = Lock()
    var connStats = ConnectionStats()

    // Receive side.
    let slots: [RemoteSlot]
    var ssrcToSlot: [UInt32: Int] = [:]  // network thread only
    let mixLock = Lock()
    let bus: MixBus
    static let mixChunk = 4800

    // Devices (guarded by deviceLock).
    let deviceLock = Lock()
    var playback: PlaybackWorker?
    var audioSuspended = false

    // Talker-side echo cancellation: the played mix, for the capture side.
    let farEnd = FarEndRing(blockSize: 480, blocks: 64)
    let aecStreams = AtomicCounter()

    // Input gate.
    let gateLock = Lock()
    var gate = GateSettings()

    // Output.
    var externalPlayback: Bool
    var sink: ((UnsafePointer<Int16>, Int) -> Void)?
    var mixerThread: SystemThread?
    var mixerThreadID: pthread_t?
    var stopMixer = false
    let sinkBuffer: UnsafeMutablePointer<Int16>

    // Events.
    let events: EventQueue
    let handlerLock = Lock()
    var eventHandler: ((ClientEvent) -> Void)?
    let wake: WakePipe

    public init(config: ClientConfig = ClientConfig()) throws {
        guard config.maxRemoteStreams >= 1 && config.maxRemoteStreams <= 1024 else {
            throw ClientError.invalidArgument("max_remote_streams must be 1..1024")
        }
        guard config.keepaliveMs >= 50 else { throw ClientError.invalidArgument("keepalive_ms must be at least 50") }
        self.config = config
        externalPlayback = config.externalPlayback
        Sodium.ensureInitialized()
        var s: [RemoteSlot] = []
        do { for _ in 0..<config.maxRemoteStreams { s.append(try RemoteSlot()) } } catch {
            throw ClientError.codec("cannot create Opus decoders: \(error)")
        }
        slots = s
        bus = MixBus(capacityFrames: VoiceClient.mixChunk)
        sinkBuffer = .allocate(capacity: 960 * 2)
        sinkBuffer.initialize(repeating: 0, count: 960 * 2)
        events = EventQueue(capacity: config.eventQueueSize)
        do { wake = try WakePipe() } catch { throw ClientError.noMemory("\(error)") }
    }

    deinit {
        shutdown()
        sinkBuffer.deallocate()
    }

    /// Stops every thread and closes the session (destroy).
    public func shutdown() {
        setSink(nil)
        closeAllDevices(includingCaptures: true)
        if isConnected { try? disconnect() }
        joinNetworkThread()
    }

    // MARK: helpers

    /// True on one of this client's own threads (inside a callback).
    public var onOwnThread: Bool {
        let me = currentThreadID()
        if let n = cond.withLock({ networkThreadID }), sameThread(me, n) { return true }
        if let m = mixLock.withLock({ mixerThreadID }), sameThread(me, m) { return true }
        return false
    }

    func refuseInCallback(_ what: String) throws {
        if onOwnThread { throw ClientError.state("\(what) cannot be called from inside a callback") }
    }

    public var isConnected: Bool { cond.withLock { connected } }

    func emit(_ e: ClientEvent) {
        events.push(e)
        let h = handlerLock.withLock { eventHandler }
        h?(e)
    }

    public func setEventHandler(_ h: ((ClientEvent) -> Void)?) { handlerLock.withLock { eventHandler = h } }
    public func pollEvent(timeoutMs: Int) -> ClientEvent? { events.pop(timeoutMs: timeoutMs) }

    public var lastError: String { cond.withLock { lastErrorText } }
    @discardableResult
    func fail(_ e: ClientError) -> ClientError {
        cond.withLock { lastErrorText = e.description }
        ClientLog.log(1, e.description)
        return e
    }

    public var serverFingerprint: String? { cond.withLock { fingerprint } }
    public var currentChannelAudio: AudioConfig? { cond.withLock { channelAudio } }

    // MARK: connect

    public func connect(host: String, port: UInt16, username: String, password: String?, pinnedFingerprint: String?,
                        timeoutMs: Int) throws {
        try refuseInCallback("vc_connect")
        if let pin = pinnedFingerprint, pin.count != 64 || bytesFromHex(pin) == nil {
            throw fail(.invalidArgument("server_fingerprint must be 64 hex digits"))
        }
        guard !username.isEmpty, username.utf8.count <= 64 else { throw fail(.invalidArgument("username must be 1 to 64 bytes")) }
        try cond.withLock {
            if connected || control != nil { throw ClientError.state("already connected") }
        }
        joinNetworkThread()
        let deadline = MonotonicClock.milliseconds() + UInt64(max(1, timeoutMs))
        do {
            let address: SocketAddress
            do { address = try SocketAddress(host: host, port: port == 0 ? ProtocolVersion.defaultPort : port) } catch {
                throw ClientError.network("cannot resolve \(host): \(error)")
            }
            var seen: String? = nil
            let conn: ControlConnection
            do { conn = try ControlConnection(address: address, pinned: pinnedFingerprint, deadlineMs: deadline, seenFingerprint: &seen) } catch {
                cond.withLock { fingerprint = seen }
                throw error
            }
            cond.withLock { fingerprint = seen }
            try conn.send(.hello(Hello(username: username, password: password ?? "", clientName: config.clientName)))
            let reply: ControlMessage
            do { reply = try conn.receive(deadlineMs: deadline) } catch { conn.close(); throw error }
            let result: HelloResult
            switch reply {
            case .helloResult(let r): result = r
            case .error(let e):
                conn.close()
                throw VoiceClient.mapServerError(e)
            default:
                conn.close()
                throw ClientError.protocolError("expected HelloResult, got \(reply.type)")
            }
            let sock: Socket
            do {
                sock = try Socket.udp(familyOf: address)
                try sock.setNonBlocking()
                sock.setReceiveBuffer(1 << 20)
            } catch {
                conn.close()
                throw ClientError.network("cannot open the UDP socket: \(error)")
            }
            let media = conn.keys.media(epoch: 0)
            do {
                try bindUDP(sock, to: address, sessionID: result.sessionID, bindingID: result.bindingID,
                            keys: conn.keys.bind(epoch: 0), epoch: 0, deadlineMs: deadline)
            } catch {
                conn.close()
                throw error
            }
            keyLock.withLock { mediaSend = MediaSendPath(key: media.send, socket: sock, address: address); selfMuted = false }
            statsLock.withLock { connStats = ConnectionStats(); connStats.voiceConnected = true }
            cond.withLock {
                control = conn
                udp = sock
                serverAddress = address
                hello = result
                channelID = 0
                channelAudio = nil
                usernames = [result.userID: username]
                connected = true
                stopNetwork = false
                mediaReceiveKey = media.receive
                epoch = 0
                replies = [:]
            }
            startNetworkThread()
            openPlaybackAfterConnect()
            var e = ClientEvent(type: .connected)
            e.userID = result.userID
            e.text = result.serverName
            emit(e)
            ClientLog.log(2, "connected to \(address) as \(username) (user \(result.userID)), server fingerprint \(conn.fingerprint)")
        } catch let e as ClientError {
            throw fail(e)
        }
    }

    static func mapServerError(_ e: ErrorMessage) -> ClientError {
        let text = "server: \(e.message)"
        switch ProtocolErrorCode(rawValue: e.code) {
        case .authFailed: return .auth(text)
        case .versionMismatch: return .version(text)
        case .usernameTaken, .serverFull, .limitReached, .forbidden: return .rejected(text)
        case .notFound: return .notFound(text)
        case .wrongState: return .state(text)
        default: return .rejected(text)
        }
    }

    /// UDP_BINDING handshake: retries every 250 ms until answered (connect phase).
    func bindUDP(_ sock: Socket, to address: SocketAddress, sessionID: UInt64, bindingID: UInt32, keys: DirectionalKeys,
                 epoch: UInt32, deadlineMs: UInt64) throws {
        var payload = [UInt8](repeating: 0, count: 12)
        payload.withUnsafeMutableBytes { p in
            p.storeBytes(of: sessionID.bigEndian, toByteOffset: 0, as: UInt64.self)
            p.storeBytes(of: epoch.bigEndian, toByteOffset: 8, as: UInt32.self)
        }
        var seq: UInt64 = 0
        var buf = [UInt8](repeating: 0, count: 2048)
        while MonotonicClock.milliseconds() < deadlineMs {
            let d = MediaCrypto.seal(header: FrameHeader(type: .udpBinding, ssrc: bindingID, seq: seq, timestamp: 0), payload: payload, key: keys.send)
            seq += 1
            _ = try? d.withUnsafeBytes { try sock.sendTo($0, address) }
            let until = min(deadlineMs, MonotonicClock.milliseconds() + 250)
            while MonotonicClock.milliseconds() < until {
                let left = Int(Int64(until) - Int64(MonotonicClock.milliseconds()))
                guard left > 0, (try? sock.waitFor(events: Int16(POLLIN), timeoutMs: left)) == true else { break }
                guard let (n, _) = try? buf.withUnsafeMutableBytes({ try sock.receiveFrom(into: $0) }) else { continue }
                if let (h, p) = try? MediaCrypto.open(Array(buf[0..<n]), key: keys.receive), h.type == .udpBinding, p == payload {
                    return
                }
            }
        }
        throw ClientError.timeout("the server did not answer the UDP binding (is UDP to port \(address.port) blocked?)")
    }

    // MARK: disconnect

    public func disconnect() throws {
        try refuseInCallback("vc_disconnect")
        let (conn, streams) = cond.withLock { () -> (ControlConnection?, [LocalStream]) in
            let c = control
            let s = Array(localStreams.values)
            return (c, s)
        }
        guard let conn else { throw fail(.state("not connected")) }
        closeAllDevices(includingCaptures: true)
        for s in streams { s.lock.withLock { s.finish(); s.stopped = true } }
        cond.withLock { stopNetwork = true }
        wake.wake()
        joinNetworkThread()
        conn.close()
        teardown(reason: 0, text: "disconnected by the host")
    }

    /// Stops a stream the server no longer carries: its capture thread ends, feeds are refused.
    func retire(_ s: LocalStream) {
        deviceLock.withLock { s.capture?.stopAndJoin(); s.capture = nil }
        let hadAEC = s.lock.withLock { () -> Bool in
            s.stopped = true
            let aec = s.apm?.settings.echoCancellation == true
            s.apm = nil
            return aec
        }
        if hadAEC { aecStreams.add(-1) }
    }

    /// Forgets the session (any thread; the network thread when the server goes away).
    func teardown(reason: Int32, text: String) {
        closeAllDevices(includingCaptures: true)
        for s in cond.withLock({ Array(localStreams.values) }) { retire(s) }
        let wasConnected = cond.withLock { () -> Bool in
            let was = connected
            connected = false
            control?.close()
            control = nil
            udp?.close()
            udp = nil
            localStreams = [:]
            channelID = 0
            channelAudio = nil
            cond.broadcast()
            return was
        }
        keyLock.withLock { mediaSend = nil }
        statsLock.withLock { connStats.voiceConnected = false }
        for slot in slots { slot.lock.withLock { slot.active = false } }
        guard wasConnected else { return }
        var e = ClientEvent(type: .disconnected)
        e.code = reason
        e.text = text
        emit(e)
    }

    func joinNetworkThread() {
        let t = cond.withLock { () -> SystemThread? in
            let t = networkThread
            networkThread = nil
            return t
        }
        if let t, !onOwnThread { t.join() }
    }

    // MARK: requests

    /// Sends a request and waits for the reply that carries its request id.
    func request(_ make: (UInt32) -> ControlMessage, timeoutMs: Int) throws -> ControlMessage {
        let (conn, rid) = try cond.withLock { () throws -> (ControlConnection, UInt32) in
            guard connected, let c = control else { throw ClientError.state("not connected") }
            let r = nextRequestID
            nextRequestID &+= 1
            if nextRequestID == 0 { nextRequestID = 1 }
            replies[r] = .some(nil)
            return (c, r)
        }
        let deadline = MonotonicClock.milliseconds() + UInt64(timeoutMs)
        do { try conn.send(make(rid)) } catch { cond.withLock { _ = replies.removeValue(forKey: rid) }; throw error }
        return try cond.withLock {
            // Whatever happens, the request stops being outstanding here.
            defer { replies.removeValue(forKey: rid) }
            while true {
                if case .some(.some(let m)) = replies[rid] { return m }
                guard connected else { throw ClientError.network("connection lost while waiting for the server") }
                if MonotonicClock.milliseconds() >= deadline { throw ClientError.timeout("the server did not answer in \(timeoutMs) ms") }
                cond.wait(untilMs: deadline)
            }
        }
    }

    public func joinChannel(_ name: String, timeoutMs: Int = 5000) throws {
        try refuseInCallback("vc_join_channel")
        do {
            let reply = try request({ .joinChannel(JoinChannel(name: name, requestID: $0)) }, timeoutMs: timeoutMs)
            switch reply {
            case .joinChannelResult(let r):
                let streams = cond.withLock { () -> [LocalStream] in
                    channelID = r.channelID
                    channelAudio = r.audio
                    for m in r.members { usernames[m.userID] = m.username }
                    // The server withdrew streams published in another channel.
                    let old = Array(localStreams.values)
                    localStreams = [:]
                    return old
                }
                for s in streams { retire(s) }
                var e = ClientEvent(type: .channelJoined)
                e.channelID = r.channelID
                e.text = name
                emit(e)
            case .error(let err): throw VoiceClient.mapServerError(err)
            default: throw ClientError.protocolError("unexpected reply \(reply.type)")
            }
        } catch let e as ClientError { throw fail(e) }
    }

    // MARK: streams

    public func startStream(kind: StreamKind, externalFeed: Bool, channels: Int, device: String? = nil) throws -> UInt32 {
        try refuseInCallback("vc_stream_start")
        guard channels == 1 || channels == 2 else { throw fail(.invalidArgument("channels must be 1 or 2")) }
        do {
            let sid = try cond.withLock { () throws -> UInt32 in
                guard connected else { throw ClientError.state("not connected") }
                guard channelAudio != nil else { throw ClientError.state("join a channel before starting a stream") }
                let s = nextStreamID
                nextStreamID &+= 1
                return s
            }
            let reply = try request({ .streamAnnounce(StreamAnnounce(streamID: sid, kind: kind, channels: UInt32(channels), requestID: $0)) },
                                    timeoutMs: 5000)
            switch reply {
            case .streamAnnounceResult(let r):
                let s = try LocalStream(streamID: sid, ssrc: r.ssrc, kind: kind, externalFeed: externalFeed,
                                        inputChannels: channels, audio: r.effectiveAudio)
                s.sender = self
                if !externalFeed {
                    do {
                        try deviceLock.withLock {
                            if audioSuspended { s.device = device ?? "default"; return }
                            try startCapture(s, device: device ?? "default", channels: channels)
                        }
                    } catch {
                        // The server already announced it: withdraw it again.
                        cond.withLock { () -> ControlConnection? in control }.map { try? $0.send(.streamStop(StreamStop(streamID: sid))) }
                        throw error
                    }
                }
                cond.withLock { localStreams[sid] = s }
                ClientLog.log(2, "stream \(sid) (\(kind)) started with ssrc \(r.ssrc)")
                return sid
            case .error(let err): throw VoiceClient.mapServerError(err)
            default: throw ClientError.protocolError("unexpected reply \(reply.type)")
            }
        } catch let e as ClientError { throw fail(e) }
    }

    public func stopStream(_ id: UInt32) throws {
        try refuseInCallback("vc_stream_stop")
        let (s, conn) = cond.withLock { (localStreams.removeValue(forKey: id), control) }
        guard let s else { throw fail(.notFound("no stream \(id)")) }
        s.lock.withLock { s.finish() }
        retire(s)
        try? conn?.send(.streamStop(StreamStop(streamID: id)))
    }

    /// The ssrc the server assigned to a local stream.
    public func ssrc(ofStream id: UInt32) -> UInt32? { cond.withLock { localStreams[id]?.ssrc } }

    public func feed(streamID: UInt32, pcm: UnsafePointer<Int16>, frames: Int, channels: Int) throws {
        guard channels == 1 || channels == 2 else { throw ClientError.invalidArgument("channels must be 1 or 2") }
        guard let s = cond.withLock({ localStreams[streamID] }) else { throw ClientError.notFound("no stream \(streamID)") }
        guard s.externalFeed else { throw ClientError.state("stream \(streamID) captures from a device") }
        try s.lock.withLock {
            guard !s.stopped else { throw ClientError.notFound("stream \(streamID) was stopped") }
            try s.feed(pcm, frames: frames, channels: channels)
        }
    }

    // MediaSender: called by LocalStream on the feeding thread.
    func sendVoice(header: FrameHeader, opus: UnsafeRawBufferPointer, scratch: UnsafeMutableRawBufferPointer) -> Bool {
        guard let path = keyLock.withLock({ selfMuted ? nil : mediaSend }) else { return false }
        let n = MediaCrypto.seal(header: header, payload: opus, key: path.key, into: scratch)
        guard (try? path.socket.sendTo(UnsafeRawBufferPointer(rebasing: scratch[0..<n]), path.address)) != nil else { return false }
        statsLock.withLock { connStats.packetsOut += 1; connStats.bytesOut += UInt64(n) }
        return true
    }

    // MARK: receive settings and stats

    func withSlot<T>(ssrc: UInt32, _ body: (RemoteSlot) throws -> T) throws -> T {
        for s in slots {
            s.lock.lock()
            if s.active && s.ssrc == ssrc {
                defer { s.lock.unlock() }
                return try body(s)
            }
            s.lock.unlock()
        }
        throw ClientError.notFound("no remote stream with ssrc \(ssrc)")
    }

    public func setRemote(ssrc: UInt32, _ settings: RemoteSettings) throws {
        guard settings.gain.isFinite, settings.gain >= 0, settings.gain <= 4 else { throw ClientError.invalidArgument("gain must be within 0..4") }
        // The NR state is built here, on the caller's thread, never on the audio path.
        let shape = try withSlot(ssrc: ssrc) { ($0.frameSamples, $0.channels, $0.noiseReducer != nil) }
        let fresh = settings.noiseReduction && !shape.2 ? NoiseReducer(frameSamples: shape.0, streamChannels: shape.1) : nil
        var released: NoiseReducer? = nil
        try withSlot(ssrc: ssrc) { s in
            s.settings = settings
            if settings.noiseReduction {
                if s.noiseReducer == nil { s.noiseReducer = fresh }
            } else {
                released = s.noiseReducer  // freed below, outside the slot lock
                s.noiseReducer = nil
            }
        }
        _ = released
    }

    /// True while a noise-reduction state runs for the stream (tests, diagnostics).
    public func isNoiseReducing(ssrc: UInt32) throws -> Bool { try withSlot(ssrc: ssrc) { $0.noiseReducer != nil } }

    public func remote(ssrc: UInt32) throws -> RemoteSettings { try withSlot(ssrc: ssrc) { $0.settings } }

    public func remoteStreams() -> [RemoteStreamInfo] {
        var out: [RemoteStreamInfo] = []
        for s in slots {
            s.lock.withLock {
                if s.active {
                    out.append(RemoteStreamInfo(ssrc: s.ssrc, userID: s.userID, streamID: s.streamID, kind: s.kind, channels: s.channels,
                                                talking: s.talking, settings: s.settings, username: s.username))
                }
            }
        }
        return out.sorted { $0.ssrc < $1.ssrc }
    }

    public func streamStats(ssrc: UInt32) throws -> StreamStats {
        try withSlot(ssrc: ssrc) { s in
            var st = StreamStats()
            st.jitter = s.jitter.stats
            st.jitter.duplicates += s.duplicates
            st.jitter.late += st.jitter.skipped
            st.targetDepthMs = s.targetMs
            st.currentDepthMs = s.depthMs
            st.talking = s.talking
            return st
        }
    }

    public func connectionStats() -> ConnectionStats { statsLock.withLock { connStats } }

    // MARK: output

    /// Renders `frames` of the final stereo mix into `out` (any thread; serialized).
    public func renderMix(into out: UnsafeMutablePointer<Int16>, frames: Int) {
        mixLock.lock()
        defer { mixLock.unlock() }
        var done = 0
        while done < frames {
            let n = min(VoiceClient.mixChunk, frames - done)
            bus.clear(frames: n)
            for s in slots {
                s.lock.lock()
                if s.active { s.render(into: bus, frames: n) }
                s.lock.unlock()
            }
            bus.render(into: out + done * 2, frames: n)
            // The echo canceller's far-end reference: what is being played.
            if aecStreams.load() > 0 { farEnd.pushStereo(out + done * 2, frames: n) }
            done += n
        }
    }

    /// Pull mode (vc_read_mixed_pcm).
    public func readMixed(into out: UnsafeMutablePointer<Int16>, frames: Int) throws {
        if mixLock.withLock({ sink != nil }) { throw ClientError.state("a mixed-output sink is set; the mixer thread owns the mix") }
        if deviceLock.withLock({ playback != nil }) { throw ClientError.state("a playback device owns the mix (use external playback to pull it)") }
        renderMix(into: out, frames: frames)
    }

    /// Sets or clears the push sink; starts or stops the 20 ms mixer thread.
    public func setSink(_ fn: ((UnsafePointer<Int16>, Int) -> Void)?) {
        let old = mixLock.withLock { () -> SystemThread? in
            sink = fn
            guard fn == nil else { return nil }
            stopMixer = true
            let t = mixerThread
            mixerThread = nil
            return t
        }
        if fn == nil {
            old?.join()
            mixLock.withLock { mixerThreadID = nil }
            return
        }
        // A playback device already renders the mix and taps it into the sink.
        if deviceLock.withLock({ playback != nil }) { return }
        let needThread = mixLock.withLock { () -> Bool in
            if mixerThread != nil { return false }
            stopMixer = false
            return true
        }
        guard needThread else { return }
        let t = SystemThread(name: "vc-mixer") { [unowned self] in self.mixerLoop() }
        mixLock.withLock { mixerThread = t }
    }

    func mixerLoop() {
        mixLock.withLock { mixerThreadID = currentThreadID() }
        var next = MonotonicClock.nanoseconds()
        let period: UInt64 = 20_000_000
        while true {
            let fn = mixLock.withLock { stopMixer ? nil : sink }
            guard let fn else { return }
            renderMix(into: sinkBuffer, frames: 960)
            fn(UnsafePointer(sinkBuffer), 960)
            next += period
            let now = MonotonicClock.nanoseconds()
            if next > now {
                var ts = timespec(tv_sec: Int(next / 1_000_000_000), tv_nsec: Int(next % 1_000_000_000))
                while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nil) == EINTR {}
            } else if now - next > 200_000_000 {
                next = now  // fell far behind (host stalled the sink): do not burst to catch up
            }
        }
    }
}
