// voicecat-server: one poll(2) event loop over a TCP listener, the TCP control
// connections and one UDP socket, all on the same port (PROTOCOL.md §4).
// It authenticates sessions, assigns ssrcs, relays VOICE frames to the rest of the
// channel with a per-listener reseal, and never decodes audio.
import Glibc
import VoiceCatProtocol
import VoiceCatSystem

public final class Server {
    public let config: ServerConfig
    public let identity: IdentityKey
    /// True when this start created the identity file.
    public let identityCreated: Bool
    /// The port TCP and UDP listen on.
    public let port: UInt16
    public var fingerprint: String { identity.fingerprint }

    /// Receives the server's log lines (from the loop thread). Defaults to stderr.
    public var log: (String) -> Void = { line in
        var s = line + "\n"
        s.withUTF8 { _ = fwrite($0.baseAddress, 1, $0.count, stderr) }
    }

    let listener: Socket
    let udp: Socket
    let wake: WakePipe
    var connections: [Int32: Connection] = [:]
    var channels: [Channel] = []
    var sessionsByUsername: [String: Session] = [:]
    var sessionsByUserID: [UInt32: Session] = [:]
    var sessionsByBinding: [UInt32: Session] = [:]
    var sessionsByAddress: [SocketAddress: Session] = [:]
    var streamsBySSRC: [UInt32: Stream] = [:]
    var nextUserID: UInt32 = 1
    var nextSSRC: UInt32
    var counters = ServerCounters()
    private let snapshotLock = Lock()
    private var snapshot = ServerCounters()
    private var stopRequested = false
    private var thread: SystemThread?
    private var lastStatsMs: UInt64 = 0

    // Preallocated datagram buffers: the relay path does not allocate per packet.
    let rxBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 65536, alignment: 16)
    let txBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 65536, alignment: 16)
    var readBuffer = [UInt8](repeating: 0, count: 65536)

    /// Loads (or creates) the identity and binds TCP and UDP. Does not start serving.
    public init(config: ServerConfig) throws {
        if let why = config.validationError() { throw ConfigError(description: why) }
        self.config = config
        (identity, identityCreated) = try IdentityStore.loadOrCreate(path: config.identityPath)
        var addr = try SocketAddress(host: config.bindHost, port: config.port)
        var tcp: Socket? = nil
        var udpSock: Socket? = nil
        // With port 0 the kernel picks a TCP port; UDP must get the same number, so retry
        // on the rare collision.
        for attempt in 0..<32 {
            let t = try Socket.listenTCP(addr)
            let a = try t.localAddress()
            do {
                udpSock = try Socket.bindUDP(a)
                tcp = t
                addr = a
                break
            } catch let e {
                if config.port != 0 || attempt == 31 { throw e }
            }
        }
        listener = tcp!
        udp = udpSock!
        port = addr.port
        try listener.setNonBlocking()
        try udp.setNonBlocking()
        udp.setReceiveBuffer(4 << 20)
        udp.setSendBuffer(4 << 20)
        wake = try WakePipe()
        for (i, c) in config.channels.enumerated() {
            channels.append(Channel(id: UInt32(i + 1), name: c.name, audio: c.audio))
        }
        nextSSRC = 1000 + (Sodium.randomUInt32() % 1000)
    }

    deinit {
        rxBuffer.deallocate()
        txBuffer.deallocate()
    }

    /// A copy of the counters (any thread).
    public func countersSnapshot() -> ServerCounters { snapshotLock.withLock { snapshot } }

    /// Serves on a background thread until `stop()`.
    public func start() {
        precondition(thread == nil, "server already started")
        thread = SystemThread(name: "vc-server") { [self] in self.run() }
    }

    /// Asks the loop to finish and waits for it (when started with `start()`).
    public func stop() {
        snapshotLock.withLock { stopRequested = true }
        wake.wake()
        thread?.join()
        thread = nil
    }

    /// Runs the event loop on the calling thread until `stop()` is called from elsewhere.
    public func run() {
        log("voicecat-server listening on \(config.bindHost):\(port) (TCP+UDP), fingerprint \(fingerprint)")
        var pollSet = PollSet()
        var order: [Int32] = []
        lastStatsMs = MonotonicClock.milliseconds()
        while !snapshotLock.withLock({ stopRequested }) {
            pollSet.removeAll()
            order.removeAll(keepingCapacity: true)
            pollSet.add(wake.readFD, events: Int16(POLLIN))
            pollSet.add(listener.fd, events: Int16(POLLIN))
            pollSet.add(udp.fd, events: Int16(POLLIN))
            for (fd, c) in connections {
                var ev = Int16(POLLIN)
                if c.pendingOutput > 0 { ev |= Int16(POLLOUT) }
                pollSet.add(fd, events: ev)
                order.append(fd)
            }
            do { try pollSet.wait(timeoutMs: 100) } catch { log("poll failed: \(error)"); break }
            if pollSet.fds[0].revents != 0 { wake.drain() }
            if pollSet.fds[1].revents != 0 { acceptConnections() }
            if pollSet.fds[2].revents != 0 { drainUDP() }
            for (i, fd) in order.enumerated() {
                let re = pollSet.fds[i + 3].revents
                guard re != 0, let c = connections[fd] else { continue }
                if re & Int16(POLLOUT) != 0 { flush(c) }
                if re & Int16(POLLIN | POLLHUP | POLLERR) != 0, connections[fd] != nil { readControl(c) }
            }
            timers()
            snapshotLock.withLock { snapshot = counters }
        }
        for c in Array(connections.values) { close(c, reason: "server stopping") }
        listener.close()
        udp.close()
        snapshotLock.withLock { snapshot = counters }
        log("voicecat-server stopped: \(counters.summary)")
    }

    // MARK: timers

    func timers() {
        let now = MonotonicClock.milliseconds()
        let reapMs = UInt64(config.reapSeconds * 1000)
        let frameMs = UInt64(config.frameTimeoutSeconds * 1000)
        for c in Array(connections.values) {
            if let s = c.session {
                if now &- s.lastSeenMs > reapMs {
                    counters.sessionsReaped += 1
                    close(c, reason: "silent on TCP and UDP for \(config.reapSeconds) s")
                    continue
                }
            } else if now &- c.openedMs > frameMs {
                counters.controlProtocolErrors += 1
                close(c, reason: "handshake not completed in \(config.frameTimeoutSeconds) s")
                continue
            }
            if let since = c.partialSinceMs, now &- since > frameMs {
                counters.controlProtocolErrors += 1
                close(c, reason: "control frame stalled mid-way for \(config.frameTimeoutSeconds) s")
            }
        }
        if config.statsIntervalSeconds > 0, now &- lastStatsMs >= UInt64(config.statsIntervalSeconds * 1000) {
            lastStatsMs = now
            log("stats: \(counters.summary)")
        }
    }

    // MARK: TCP

    func acceptConnections() {
        while true {
            let accepted: (Socket, SocketAddress)?
            do { accepted = try listener.accept() } catch {
                log("accept failed: \(error)")
                return
            }
            guard let (sock, peer) = accepted else { return }
            // Handshaking connections count against the user limit too, with some slack.
            if connections.count >= config.maxUsers + 16 {
                counters.tcpRejected += 1
                sock.close()
                continue
            }
            do { try sock.setNonBlocking() } catch { continue }
            counters.tcpAccepted += 1
            connections[sock.fd] = Connection(socket: sock, peer: peer, now: MonotonicClock.milliseconds())
        }
    }

    func readControl(_ c: Connection) {
        while c.phase != .closing {
            let n: Int?
            do {
                n = try readBuffer.withUnsafeMutableBytes { try c.socket.read(into: $0) }
            } catch {
                close(c, reason: "\(error)")
                return
            }
            guard let n else { return }
            if n == 0 { close(c, reason: "peer closed"); return }
            ingest(c, readBuffer[0..<n])
        }
    }

    func ingest(_ c: Connection, _ bytes: ArraySlice<UInt8>) {
        if c.phase == .awaitingClientHello {
            c.handshakeBuffer.append(contentsOf: bytes)
            guard c.handshakeBuffer.count >= 6 else { return }
            let v: UInt16
            do { v = try Handshake.parseClientHello(c.handshakeBuffer).version } catch HandshakeError.truncated {
                // Magic and version are known; anything but our version is answered at once.
                let ver = UInt16(c.handshakeBuffer[4]) << 8 | UInt16(c.handshakeBuffer[5])
                guard Array(c.handshakeBuffer[0..<4]) == Array("VCAT".utf8) else {
                    counters.controlProtocolErrors += 1
                    close(c, reason: "not a VoiceCat client (bad magic)")
                    return
                }
                if ver == ProtocolVersion.current { return }  // wait for the rest
                v = ver
            } catch {
                counters.controlProtocolErrors += 1
                close(c, reason: "bad ClientHello: \(error)")
                return
            }
            guard v == ProtocolVersion.current else {
                counters.handshakeVersionMismatch += 1
                enqueueRaw(c, Handshake.versionMismatchReply())
                closeAfterFlush(c, reason: "client speaks protocol v\(v)")
                return
            }
            let hello = Array(c.handshakeBuffer[0..<Handshake.clientHelloSize])
            let rest = c.handshakeBuffer[Handshake.clientHelloSize...]
            do {
                let (reply, keys) = try ServerHandshake.respond(clientHello: hello, identity: identity)
                c.keys = keys
                c.sealer = ControlSealer(key: keys.control.send)
                c.opener = ControlOpener(key: keys.control.receive)
                c.phase = .awaitingHello
                c.handshakeBuffer = []
                enqueueRaw(c, reply)
            } catch {
                counters.controlProtocolErrors += 1
                close(c, reason: "handshake failed: \(error)")
                return
            }
            if rest.isEmpty { return }
            ingest(c, ArraySlice(rest))
            return
        }
        guard c.opener != nil else { return }
        c.opener!.append(bytes)
        while c.phase == .awaitingHello || c.phase == .active {
            let plain: [UInt8]?
            do { plain = try c.opener!.next() } catch {
                counters.controlProtocolErrors += 1
                close(c, reason: "\(error)")
                return
            }
            guard let plain else { break }
            counters.controlFramesIn += 1
            c.session?.lastSeenMs = MonotonicClock.milliseconds()
            let msg: ControlMessage
            do { msg = try ControlMessage.decode(plain) } catch ControlDecodeError.unknownType(let t) {
                send(c, .error(ErrorMessage(code: .unknownMessageType, message: "unknown message type \(t)")))
                continue
            } catch {
                counters.controlProtocolErrors += 1
                send(c, .error(ErrorMessage(code: .badRequest, message: "\(error)")))
                closeAfterFlush(c, reason: "\(error)")
                return
            }
            handle(c, msg)
        }
        if c.phase != .closing {
            c.partialSinceMs = c.opener!.hasPartialFrame ? (c.partialSinceMs ?? MonotonicClock.milliseconds()) : nil
        }
    }

    func enqueueRaw(_ c: Connection, _ bytes: [UInt8]) {
        c.outBuffer.append(contentsOf: bytes)
        flush(c)
    }

    /// Seals and queues a control message.
    func send(_ c: Connection, _ m: ControlMessage) {
        guard c.phase != .closing, c.sealer != nil else { return }
        let frame = c.sealer!.seal(m.encode())
        counters.controlFramesOut += 1
        c.outBuffer.append(contentsOf: frame)
        // A peer that does not read its control channel does not get to hold memory.
        if c.pendingOutput > 4 << 20 {
            close(c, reason: "control output backlog over 4 MiB (peer not reading)")
            return
        }
        flush(c)
    }

    func flush(_ c: Connection) {
        while c.pendingOutput > 0 {
            let r: Int?
            do {
                let start = c.outStart
                r = try c.outBuffer.withUnsafeBytes { try c.socket.write(UnsafeRawBufferPointer(rebasing: $0[start...])) }
            } catch {
                // Nothing more can be delivered; drop the connection (without recursing into flush).
                c.outBuffer = []; c.outStart = 0
                if c.phase != .closing { close(c, reason: "\(error)") } else { finishClose(c) }
                return
            }
            guard let n = r else { return }
            c.outStart += n
        }
        c.outBuffer.removeAll(keepingCapacity: true)
        c.outStart = 0
        if c.phase == .closing { finishClose(c) }
    }

    /// Sends what is queued, then closes.
    func closeAfterFlush(_ c: Connection, reason: String) {
        detachSession(c, reason: reason)
        c.phase = .closing
        if c.pendingOutput == 0 { finishClose(c) }
    }

    func close(_ c: Connection, reason: String) {
        detachSession(c, reason: reason)
        c.phase = .closing
        c.outBuffer = []; c.outStart = 0
        finishClose(c)
    }

    func finishClose(_ c: Connection) {
        guard connections[c.socket.fd] === c else { return }
        connections[c.socket.fd] = nil
        c.socket.close()
    }

    /// Removes a connection's session from every index and tells the channel.
    func detachSession(_ c: Connection, reason: String) {
        guard let s = c.session else { return }
        c.session = nil
        leaveChannel(s)
        for st in s.streams.values { streamsBySSRC[st.ssrc] = nil }
        s.streams = [:]
        sessionsByUsername[s.username] = nil
        sessionsByUserID[s.userID] = nil
        sessionsByBinding[s.bindingID] = nil
        if let a = s.udpAddress { sessionsByAddress[a] = nil }
        counters.sessionsActive -= 1
        log("session \(s.username) (user \(s.userID)) closed: \(reason)")
    }
}
