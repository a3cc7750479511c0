// voicecat-server: one epoll event loop over a TCP listener, the TCP control
// connections and one UDP socket, all on the same port (PROTOCOL.md §4).
// It authenticates sessions, assigns ssrcs, relays VOICE frames to the rest of the
// channel with a per-listener reseal, and never decodes audio.
//
// Cost per loop turn grows with what is ready, not with what is connected: epoll
// reports ready descriptors only, deadlines (reaper, handshake, login, stalled frames,
// throttles, held answers) live in a heap touched once per connection per deadline,
// and each connection gets a bounded budget of bytes and frames per turn.
import Glibc
import VoiceCatProtocol
import VoiceCatSystem

public final class Server {
    /// The configuration the server was started with (see `reload` for changes).
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

    // Per-turn budgets: what one connection or socket may take of a loop turn.
    static let maxEvents = 256
    static let framesPerTurn = 16
    static let readChunk = 16 * 1024
    static let acceptsPerTurn = 64
    static let udpBatchesPerTurn = 8
    /// A peer that does not read its control channel does not get to hold more memory.
    static let maxOutputBacklog = 4 << 20

    /// The settings in force (the loop thread's; changed by `reload`).
    var live: ServerConfig
    let listener: Socket
    let udp: Socket
    let wake: WakeEvent
    let poll: EventPoll
    /// Connections by descriptor.
    var connections: [Connection?] = []
    var connectionCount = 0
    var nextSerial: UInt32 = 0
    var channels: [Channel] = []
    var channelsByName: [String: Channel] = [:]
    var nextChannelID: UInt32 = 1
    /// `channels` as ChannelInfo entries (HelloResult.channelsField), for the login's list.
    var channelList = EntryList()
    var sessionsByUsername: [String: Session] = [:]
    var sessionsByUserID: [UInt32: Session] = [:]
    var sessionsByBinding: [UInt32: Session] = [:]
    var sessionsByAddress: [SocketAddress: Session] = [:]
    var streamsBySSRC: [UInt32: Stream] = [:]
    var nextUserID: UInt32 = 1
    var nextSSRC: UInt32
    var counters = ServerCounters()
    /// The loop's clock for the current turn (milliseconds, monotonic).
    var now: UInt64 = 0
    var stopping = false

    // Loop bookkeeping.
    var deadlines = DeadlineHeap()
    var backlog: [Connection] = []
    var dirty: [Connection] = []
    var noticeChannels: [Channel] = []
    // The lists above are worked off by swapping each with its spare (empty between
    // turns), so what is appended while working goes to the next round and neither
    // buffer is reallocated once both have grown: no allocation per turn.
    private var backlogSpare: [Connection] = []
    private var dirtySpare: [Connection] = []
    private var noticeSpare: [Channel] = []
    var presence = PresenceState()
    var turn: UInt64 = 0
    private var lastStatsMs: UInt64 = 0
    private var lastSweepMs: UInt64 = 0
    var acceptPausedUntilMs: UInt64?

    // Abuse limits.
    var unauthenticatedByHost: [SocketAddress: [Connection]] = [:]
    var unauthenticatedQueue: [Connection] = []
    var unauthenticatedQueueHead = 0
    var unauthenticatedCount = 0
    var serverPasswordFailures = AuthFailures()
    var adminPasswordFailures = AuthFailures()
    /// Key of the binding cookies (docs/protocol.md §3), fresh each start.
    let cookieSecret = Sodium.randomBytes(32)

    // Cross-thread requests.
    private let requestLock = Lock()
    private var stopRequested = false
    private var pendingReload: ServerConfig?
    private var snapshot = ServerCounters()
    private var thread: SystemThread?

    // Preallocated buffers: neither the relay path nor control reads allocate per packet.
    let rx = DatagramBatch(capacity: 64, slotSize: ServerConfig.datagramBytesLimit + 1)
    let tx = DatagramBatch(capacity: 256, slotSize: ServerConfig.datagramBytesLimit + 1)
    let readBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Server.readChunk, alignment: 16)
    /// A list message is assembled here before sealing.
    let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: ControlFraming.maxPlaintext, alignment: 16)

    /// Checks the config, loads the identity, binds TCP and UDP, and creates the identity
    /// when there was none. Does not start serving.
    public init(config: ServerConfig) throws {
        try config.validate()
        self.config = config
        live = config
        // A broken identity file fails the start before anything is bound; a missing
        // one is created only once the ports are bound (a start that fails leaves none).
        let loaded = try IdentityStore.load(path: config.identityPath)
        var addr = try SocketAddress(host: config.bindHost, port: config.listenPort)
        var tcp: Socket? = nil
        var udpSock: Socket? = nil
        // With `anyPort` the kernel picks a TCP port; UDP must get the same number, so retry
        // on the rare collision.
        for attempt in 0..<32 {
            let t = try Socket.listenTCP(addr, backlog: 1024)
            let a = try t.localAddress()
            do {
                udpSock = try Socket.bindUDP(a)
                tcp = t
                addr = a
                break
            } catch let e {
                if !config.anyPort || attempt == 31 { throw e }
            }
        }
        listener = tcp!
        udp = udpSock!
        port = addr.port
        if let loaded {
            (identity, identityCreated) = (loaded, false)
        } else {
            (identity, identityCreated) = try IdentityStore.create(path: config.identityPath)
        }
        try listener.setNonBlocking()
        try udp.setNonBlocking()
        udp.setReceiveBuffer(4 << 20)
        udp.setSendBuffer(4 << 20)
        wake = try WakeEvent()
        poll = try EventPoll(capacity: Server.maxEvents)
        nextSSRC = 1000 + (Sodium.randomUInt32() % 1000)
        installChannels(config.channels)
    }

    deinit {
        readBuffer.deallocate()
        scratch.deallocate()
    }

    /// A copy of the counters (any thread).
    public func countersSnapshot() -> ServerCounters { requestLock.withLock { snapshot } }

    /// Serves on a background thread until `stop()`.
    public func start() {
        precondition(thread == nil, "server already started")
        thread = SystemThread(name: "vc-server") { [self] in self.run() }
    }

    /// Asks the loop to finish and waits for it (when started with `start()`).
    public func stop() {
        requestLock.withLock { stopRequested = true }
        wake.wake()
        thread?.join()
        thread = nil
    }

    /// Hands a new configuration to the running loop (any thread): channels and limits
    /// change without dropping sessions. Checked here; a bad one throws and changes nothing.
    /// The address, port and identity file cannot change while running (the loop logs it).
    public func reload(_ newConfig: ServerConfig) throws(ServerConfig.ValidationError) {
        try newConfig.validate()
        requestLock.withLock { pendingReload = newConfig }
        wake.wake()
    }

    /// Runs the event loop on the calling thread until `stop()` is called from elsewhere.
    public func run() {
        log("voicecat-server listening on \(config.bindHost):\(port) (TCP+UDP), fingerprint \(fingerprint)")
        do {
            try poll.add(wake.fd, .readable, data: Server.systemToken(wake.fd))
            try poll.add(listener.fd, .readable, data: Server.systemToken(listener.fd))
            try poll.add(udp.fd, .readable, data: Server.systemToken(udp.fd))
        } catch {
            log("cannot watch the sockets: \(error)")
            return
        }
        now = MonotonicClock.milliseconds()
        lastStatsMs = now
        lastSweepMs = now
        while true {
            let n: Int
            do { n = try poll.wait(timeoutMs: waitTimeout()) } catch {
                log("epoll_wait failed: \(error)")
                break
            }
            now = MonotonicClock.milliseconds()
            turn &+= 1
            var i = 0
            while i < n { dispatch(poll.event(i)); i += 1 }
            // Requests from other threads (they also wake the loop, so the wait ends).
            let (stop, reload) = requestLock.withLock { () -> (Bool, ServerConfig?) in
                defer { pendingReload = nil }
                return (stopRequested, pendingReload)
            }
            if stop { break }
            if let r = reload { applyReload(r) }
            runBacklog()
            runTimers()
            endTurn()
            counters.deadlineEntries = deadlines.count
            counters.unauthenticatedQueueEntries = unauthenticatedQueue.count
            requestLock.withLock { snapshot = counters }
        }
        stopping = true
        // Every session is told why its connection closes (what the sockets take now,
        // without waiting: a client that reads nothing more gets the bare close).
        var told = 0
        for case let c? in connections where c.session != nil {
            send(c, .error(ErrorMessage(code: .shuttingDown, message: "the server is shutting down")))
            told += 1
        }
        if told > 0 { log("voicecat-server stopping: \(told) sessions told and closed") }
        endTurn()
        for case let c? in connections { close(c, reason: "server stopping") }
        listener.close()
        udp.close()
        requestLock.withLock { snapshot = counters }
        log("voicecat-server stopped: \(counters.summary)")
    }

    static func systemToken(_ fd: Int32) -> UInt64 { UInt64(UInt32(bitPattern: fd)) }

    /// How long the loop may sleep: until the next deadline; at once with a backlog,
    /// or with notices or output that the end of the turn itself queued (a connection
    /// that failed while being flushed leaves its channel: the others are told now).
    func waitTimeout() -> Int32 {
        if !backlog.isEmpty || !noticeChannels.isEmpty || !dirty.isEmpty { return 0 }
        var next = lastSweepMs + 60_000
        if let d = deadlines.next { next = min(next, d) }
        if live.statsIntervalSeconds > 0 { next = min(next, lastStatsMs + UInt64(live.statsIntervalSeconds * 1000)) }
        if let a = acceptPausedUntilMs { next = min(next, a) }
        if let p = presence.flushAtMs { next = min(next, p) }
        let current = MonotonicClock.milliseconds()
        return next <= current ? 0 : Int32(min(next - current, 60_000))
    }

    func dispatch(_ e: PollEvent) {
        let fd = Int32(bitPattern: UInt32(truncatingIfNeeded: e.data))
        let serial = UInt32(truncatingIfNeeded: e.data >> 32)
        if serial == 0 {
            if fd == wake.fd { wake.drain() } else if fd == listener.fd { acceptConnections() } else if fd == udp.fd { drainUDP() }
            return
        }
        guard let c = connection(fd), c.serial == serial, !c.closed else { return }
        // Bit tests rather than set literals: this runs for every event of every turn.
        let bits = e.mask.rawValue
        let failed = bits & (EventMask.error.rawValue | EventMask.hangup.rawValue) != 0
        if bits & EventMask.writable.rawValue != 0 || (failed && c.pendingOutput > 0) { flush(c) }
        guard !c.closed else { return }
        if c.readPaused {
            // Hangups are reported even when reading is paused: the peer is gone. So is
            // the close of a peer whose reading is paused by the control rate alone
            // (asked for then, see updateInterest): what it sent beyond its rate and is
            // not read yet is dropped, and its session does not outlive it by that
            // backlog (a client reconnecting at once was refused: its name was still
            // connected). Held requests (a password backoff) and a connection closing
            // after its last message keep waiting for their time.
            if failed {
                close(c, reason: "peer hung up")
            } else if bits & EventMask.peerClosed.rawValue != 0 {
                flush(c)
                if !c.closed { close(c, reason: "peer closed the connection (requests over its rate not read)") }
            }
            return
        }
        if failed || bits & EventMask.readable.rawValue != 0 { readControl(c) }
    }

    func connection(_ fd: Int32) -> Connection? {
        fd >= 0 && Int(fd) < connections.count ? connections[Int(fd)] : nil
    }

    // MARK: timers

    var reapMs: UInt64 { UInt64(live.reapSeconds * 1000) }
    var frameMs: UInt64 { UInt64(live.frameTimeoutSeconds * 1000) }
    var loginMs: UInt64 { UInt64(live.loginTimeoutSeconds * 1000) }

    /// The earliest time something must be checked for `c` (.max: nothing).
    func deadline(_ c: Connection) -> UInt64 {
        if c.phase == .closing { return c.closeDeadlineMs ?? now }
        var d = UInt64.max
        if let h = c.heldUntilMs { d = min(d, h) }
        if let t = c.throttledUntilMs { d = min(d, t) }
        if c.heldUntilMs == nil && c.throttledUntilMs == nil {
            if let s = c.session {
                d = min(d, s.lastSeenMs &+ reapMs)
            } else {
                d = min(d, c.loginDeadlineMs)
                if c.phase == .awaitingClientHello { d = min(d, c.openedMs + frameMs) }
            }
            if let p = c.partialSinceMs { d = min(d, p + frameMs) }
        }
        return d
    }

    /// Makes sure the heap holds an entry for `c`'s deadline or an earlier one.
    func schedule(_ c: Connection) {
        guard !c.closed else { return }
        let d = deadline(c)
        guard d != .max else { return }
        if let t = c.timerAtMs, t <= d { return }
        c.timerAtMs = d
        deadlines.push(d, c)
    }

    func runTimers() {
        var budget = 100_000
        while budget > 0, let c = deadlines.popDue(now: now) {
            budget -= 1
            expire(c)
            schedule(c)
        }
        if let a = acceptPausedUntilMs, now >= a {
            acceptPausedUntilMs = nil
            try? poll.modify(listener.fd, .readable, data: Server.systemToken(listener.fd))
        }
        if live.statsIntervalSeconds > 0, now &- lastStatsMs >= UInt64(live.statsIntervalSeconds * 1000) {
            lastStatsMs = now
            log("stats: \(counters.summary)")
        }
        if now &- lastSweepMs >= 60_000 {
            lastSweepMs = now
            serverPasswordFailures.expire(now: now, forgetMs: authForgetMs)
            adminPasswordFailures.expire(now: now, forgetMs: authForgetMs)
        }
    }

    /// `c`'s deadline came: release what waited, enforce what expired.
    func expire(_ c: Connection) {
        if c.phase == .closing {
            if now >= c.closeDeadlineMs ?? 0 { finishClose(c) }
            return
        }
        if let t = c.throttledUntilMs, now >= t {
            c.throttledUntilMs = nil
            updateInterest(c)
            addToBacklog(c)
        }
        if let h = c.heldUntilMs, now >= h { releaseHeld(c) }
        guard !c.closed, c.phase != .closing, c.heldUntilMs == nil, c.throttledUntilMs == nil else { return }
        if let s = c.session {
            if now &- s.lastSeenMs >= reapMs {
                counters.sessionsReaped += 1
                // A peer that stopped reading (or can no longer be reached) leaves what
                // was sent to it in the kernel: say so, the operator's likely question.
                var why = "silent on TCP and UDP for \(live.reapSeconds) s"
                if let n = c.socket.unacknowledgedBytes, n > 0 {
                    why += "; \(n) bytes sent to it are still unacknowledged (it stopped reading, or cannot be reached)"
                }
                close(c, reason: why)
                return
            }
        } else {
            if c.phase == .awaitingClientHello && now - c.openedMs >= frameMs {
                counters.controlProtocolErrors += 1
                close(c, reason: "handshake not completed in \(live.frameTimeoutSeconds) s")
                return
            }
            if now >= c.loginDeadlineMs {
                counters.loginTimeouts += 1
                counters.controlProtocolErrors += 1
                close(c, reason: "not logged in within \(live.loginTimeoutSeconds) s")
                return
            }
        }
        if let p = c.partialSinceMs, now - p >= frameMs {
            counters.controlProtocolErrors += 1
            close(c, reason: "control frame stalled mid-way for \(live.frameTimeoutSeconds) s")
        }
    }

    // MARK: the end of a turn

    func markDirty(_ c: Connection) {
        guard !c.dirty else { return }
        c.dirty = true
        dirty.append(c)
    }

    func addToBacklog(_ c: Connection) {
        guard !c.inBacklog, !c.closed else { return }
        c.inBacklog = true
        backlog.append(c)
    }

    /// Frames left over from earlier turns (budget, throttle or hold), one budget each.
    func runBacklog() {
        guard !backlog.isEmpty else { return }
        swap(&backlog, &backlogSpare)
        var i = 0
        while i < backlogSpare.count {
            let c = backlogSpare[i]
            i += 1
            c.inBacklog = false
            guard !c.closed, !c.readPaused, c.phase == .awaitingHello || c.phase == .active else { continue }
            var budget = Server.framesPerTurn
            processFrames(c, budget: &budget)
        }
        backlogSpare.removeAll(keepingCapacity: true)
    }

    /// Tells pending membership changes and writes what each connection has queued.
    func endTurn() {
        if let p = presence.flushAtMs, p <= now { flushPresence() }
        if !noticeChannels.isEmpty {
            swap(&noticeChannels, &noticeSpare)
            var i = 0
            while i < noticeSpare.count { flushNotices(noticeSpare[i]); i += 1 }
            noticeSpare.removeAll(keepingCapacity: true)
        }
        if !dirty.isEmpty {
            swap(&dirty, &dirtySpare)
            var i = 0
            while i < dirtySpare.count {
                let c = dirtySpare[i]
                i += 1
                c.dirty = false
                if !c.closed { flush(c) }
            }
            dirtySpare.removeAll(keepingCapacity: true)
        }
        if !tx.isEmpty { flushDatagrams() }
    }

    // MARK: TCP

    func acceptConnections() {
        for _ in 0..<Server.acceptsPerTurn {
            let accepted: (Socket, SocketAddress)?
            do { accepted = try listener.accept() } catch {
                if error.errno == EMFILE || error.errno == ENFILE {
                    // Out of descriptors: make room from the connections not logged in, or wait a little.
                    counters.tcpRejected += 1
                    if evictOldestUnauthenticated(reason: "descriptor limit reached") { continue }
                    log("accept: \(error); pausing accepts for 100 ms")
                    acceptPausedUntilMs = now + 100
                    try? poll.modify(listener.fd, [], data: Server.systemToken(listener.fd))
                    return
                }
                log("accept failed: \(error)")
                return
            }
            guard let (sock, peer) = accepted else { return }
            admit(sock, peer)
        }
    }

    func admit(_ sock: Socket, _ peer: SocketAddress) {
        do { try sock.setNonBlocking() } catch { return }
        makeRoomForUnauthenticated(from: peer.host)
        nextSerial &+= 1
        if nextSerial == 0 { nextSerial = 1 }
        let c = Connection(socket: sock, peer: peer, serial: nextSerial, now: now, config: live)
        do { try poll.add(c.fd, .readable, data: c.token) } catch {
            log("cannot watch a new connection: \(error)")
            return
        }
        let i = Int(c.fd)
        if i >= connections.count { connections.append(contentsOf: repeatElement(nil, count: i + 1 - connections.count + 64)) }
        connections[i] = c
        connectionCount += 1
        counters.tcpAccepted += 1
        trackUnauthenticated(c)
        schedule(c)
    }

    func readControl(_ c: Connection) {
        var budget = Server.framesPerTurn
        if c.phase == .awaitingHello || c.phase == .active {
            // Frames already buffered go first; read more only if the budget is left.
            guard processFrames(c, budget: &budget) else { return }
        }
        let n: Int?
        do { n = try c.socket.read(into: readBuffer) } catch {
            close(c, reason: "\(error)")
            return
        }
        guard let n else { return }
        if n == 0 {
            close(c, reason: "peer closed")
            return
        }
        let bytes = UnsafeRawBufferPointer(rebasing: readBuffer[0..<n])
        if c.phase == .awaitingClientHello {
            ingestHandshake(c, bytes, budget: &budget)
        } else if c.opener != nil {
            c.opener!.append(bytes)
            processFrames(c, budget: &budget)
        }
    }

    func ingestHandshake(_ c: Connection, _ bytes: UnsafeRawBufferPointer, budget: inout Int) {
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
        let rest = Array(c.handshakeBuffer[Handshake.clientHelloSize...])
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
        if !rest.isEmpty { c.opener!.append(rest) }
        processFrames(c, budget: &budget)
    }

    /// Opens and handles buffered frames while the budget, the connection's control
    /// rate and its state allow. Returns false when it stopped with frames possibly left.
    @discardableResult
    func processFrames(_ c: Connection, budget: inout Int) -> Bool {
        while !c.closed && !c.readPaused && (c.phase == .awaitingHello || c.phase == .active) {
            if budget == 0 {
                addToBacklog(c)
                return false
            }
            guard c.controlBucket.take(rate: live.controlMessagesPerSecond, burst: live.controlBurst, now: now) else {
                throttle(c)
                return false
            }
            let plain: [UInt8]?
            do { plain = try c.opener!.next() } catch {
                counters.controlProtocolErrors += 1
                close(c, reason: "\(error)")
                return false
            }
            guard let plain else {
                c.controlBucket.refund(burst: live.controlBurst)
                break
            }
            budget -= 1
            counters.controlFramesIn += 1
            c.session?.lastSeenMs = now
            let msg: ControlMessage
            do { msg = try ControlMessage.decode(plain) } catch ControlDecodeError.unknownType(let t) {
                send(c, .error(ErrorMessage(code: .unknownMessageType, message: "unknown message type \(t)")))
                continue
            } catch {
                counters.controlProtocolErrors += 1
                send(c, .error(ErrorMessage(code: .badRequest, message: "\(error)")))
                closeAfterFlush(c, reason: "\(error)")
                return false
            }
            handle(c, msg)
        }
        if !c.closed && c.phase != .closing, let o = c.opener {
            if o.hasPartialFrame {
                if c.partialSinceMs == nil {
                    c.partialSinceMs = now
                    schedule(c)
                }
            } else {
                c.partialSinceMs = nil
            }
        }
        return !c.closed && !c.readPaused
    }

    /// Pauses reading `c` until its control bucket has a token again.
    func throttle(_ c: Connection) {
        counters.controlThrottled += 1
        c.throttledUntilMs = now + max(1, c.controlBucket.waitMs(rate: live.controlMessagesPerSecond))
        updateInterest(c)
        schedule(c)
    }

    /// Registers `c` for what it needs now: reading unless paused, writing while blocked.
    func updateInterest(_ c: Connection) {
        guard !c.closed else { return }
        var want: EventMask = []
        if !c.readPaused {
            want.insert(.readable)
        } else if c.throttledUntilMs != nil && c.heldUntilMs == nil && c.phase != .closing {
            want.insert(.peerClosed)   // dispatch: the peer's close ends it now
        }
        if c.writeBlocked { want.insert(.writable) }
        guard want != c.interest else { return }
        do { try poll.modify(c.fd, want, data: c.token) } catch {
            close(c, reason: "\(error)")
            return
        }
        c.interest = want
    }

    func enqueueRaw(_ c: Connection, _ bytes: [UInt8]) {
        bytes.withUnsafeBytes { c.out.append($0) }
        markDirty(c)
    }

    /// Seals and queues a control message (written at the end of the turn).
    func send(_ c: Connection, _ m: ControlMessage) {
        let plain = m.encode()
        plain.withUnsafeBytes { sendPlaintext(c, $0) }
    }

    /// Seals and queues an encoded control message; membership changes pending for the
    /// connection's session go first so it sees events in order.
    func sendPlaintext(_ c: Connection, _ plain: UnsafeRawBufferPointer) {
        guard !c.closed, c.phase != .closing, c.sealer != nil else { return }
        if let s = c.session { deliverNotices(to: s) }
        seal(c, plain)
    }

    /// Seals one message into `c`'s output, if it fits one frame (never a crash: a
    /// message that does not fit is counted and dropped).
    func seal(_ c: Connection, _ plain: UnsafeRawBufferPointer) {
        guard !c.closed, c.phase != .closing, c.sealer != nil else { return }
        guard ControlFraming.fits(plain.count) else {
            counters.controlOversize += 1
            log("not sent to \(c.peer): a \(plain.count)-byte control message exceeds the frame limit")
            return
        }
        let room = c.out.reserve(plain.count + ControlFraming.overhead)
        c.out.commit(c.sealer!.seal(plain, into: room))
        counters.controlFramesOut += 1
        markDirty(c)
        if c.pendingOutput > Server.maxOutputBacklog {
            close(c, reason: "control output backlog over \(Server.maxOutputBacklog >> 20) MiB (peer not reading)")
        }
    }

    func flush(_ c: Connection) {
        while c.pendingOutput > 0 {
            let r: Int?
            do { r = try c.socket.write(c.out.readable) } catch {
                // Nothing more can be delivered.
                c.out.release()
                if c.phase == .closing { finishClose(c) } else { close(c, reason: "\(error)") }
                return
            }
            guard let n = r else {
                if !c.writeBlocked {
                    c.writeBlocked = true
                    updateInterest(c)
                }
                return
            }
            c.out.consume(n)
        }
        if c.writeBlocked {
            c.writeBlocked = false
            updateInterest(c)
        }
        if c.phase == .closing { finishClose(c) }
    }

    /// Sends what is queued (within `frame_timeout_seconds`), then closes.
    func closeAfterFlush(_ c: Connection, reason: String) {
        guard !c.closed, c.phase != .closing else { return }
        detachSession(c, reason: reason)
        c.phase = .closing
        forgetUnauthenticated(c)
        if c.pendingOutput == 0 {
            finishClose(c)
            return
        }
        c.closeDeadlineMs = now + frameMs
        updateInterest(c)
        markDirty(c)
        schedule(c)
    }

    /// Closes at once, dropping queued output.
    func close(_ c: Connection, reason: String) {
        guard !c.closed else { return }
        detachSession(c, reason: reason)
        c.phase = .closing
        c.out.release()
        finishClose(c)
    }

    func finishClose(_ c: Connection) {
        guard !c.closed else { return }
        c.closed = true
        forgetUnauthenticated(c)
        if connection(c.fd) === c { connections[Int(c.fd)] = nil }
        connectionCount -= 1
        deadlines.dropStale(whenMoreThan: 2 * connectionCount + 64)
        // Closing the descriptor also takes it out of the epoll set.
        c.socket.close()
    }

    /// Removes a connection's session from every index and tells the channel.
    func detachSession(_ c: Connection, reason: String) {
        guard let s = c.session else { return }
        c.session = nil
        unsubscribePresence(s)
        leaveChannel(s)
        for st in s.streams.values { streamsBySSRC[st.ssrc] = nil }
        s.streams = [:]
        sessionsByUsername[s.username] = nil
        sessionsByUserID[s.userID] = nil
        sessionsByBinding[s.bindingID] = nil
        if let a = s.udpAddress, sessionsByAddress[a] === s { sessionsByAddress[a] = nil }
        counters.sessionsActive -= 1
        notePresenceGone(s)
        if !stopping { log("session \(s.username) (user \(s.userID)) closed: \(reason)") }
    }

    // MARK: channels and reload

    /// Builds the channel set from `configs`, keeping a channel (its id and members) whose
    /// name and AudioConfig are unchanged; others are retired (kept for their members only).
    func installChannels(_ configs: [ChannelConfig]) {
        var old = channelsByName
        var next: [Channel] = []
        for cc in configs {
            if let ch = old[cc.name], ch.audio == cc.audio {
                next.append(ch)
                old[cc.name] = nil
            } else {
                next.append(Channel(id: nextChannelID, name: cc.name, audio: cc.audio))
                nextChannelID += 1
            }
        }
        for ch in old.values { ch.retired = true }
        channels = next
        channelsByName = [:]
        channelList.removeAll()
        for ch in next {
            channelsByName[ch.name] = ch
            channelList.append(ch.info.encoded(asField: HelloResult.channelsField))
        }
    }

    func applyReload(_ new: ServerConfig) {
        var cfg = new
        var fixed: [String] = []
        if cfg.bindHost != live.bindHost { fixed.append("bind"); cfg.bindHost = live.bindHost }
        if cfg.listenPort != live.listenPort || cfg.anyPort != live.anyPort {
            fixed.append("port"); cfg.port = live.port; cfg.anyPort = live.anyPort
        }
        if cfg.identityPath != live.identityPath { fixed.append("identity"); cfg.identityPath = live.identityPath }
        let before = Set(channels.map(\.name))
        let oldChannels = channels
        installChannels(cfg.channels)
        noteChannelsChanged(added: channels.filter { ch in !oldChannels.contains { $0 === ch } },
                            retired: oldChannels.filter { ch in !channels.contains { $0 === ch } }.map(\.id))
        live = cfg
        counters.reloads += 1
        let after = Set(channels.map(\.name))
        // A channel kept by name whose AudioConfig changed is a new channel: its members
        // stay in the retired one until they join again.
        let replaced = channels.filter { ch in !oldChannels.contains { $0 === ch } }.map(\.name).filter(before.contains).sorted()
        var line = "reloaded: \(channels.count) channels (added \(after.subtracting(before).sorted()), "
            + "removed \(before.subtracting(after).sorted()), replaced with new settings \(replaced)), limits updated"
        if !fixed.isEmpty { line += "; \(fixed.joined(separator: ", ")) unchanged until a restart" }
        log(line)
    }
}
