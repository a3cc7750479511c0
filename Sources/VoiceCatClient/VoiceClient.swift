// The client engine behind libvoicecat: a facade over parts with one owner each.
//
//   session      (this file, Session state under `cond`) the control connection,
//                requests and replies, what the server told us. Connect, join and
//                stream start/stop run on the caller's thread and wait for the
//                network thread's replies.
//   network      (Network.swift) the vc-network thread: control messages, UDP
//                receive, keepalives and rebinding, and delivery of every event.
//   send path    (SendPath.swift, LocalStream.swift) the stream table; a sent frame
//                takes only its own slot's lock.
//   receive set  (ReceiveSet.swift, RemoteSlot.swift) slots and the ssrc map.
//   output stage (OutputStage.swift, Recording.swift) the mode, the one render
//                driver, the output format, the sinks and recordings.
//   devices      (Devices.swift) capture threads through the AudioBackend.
//   events       (Events.swift) raised anywhere, delivered by the network thread.
//
// Lock order (a thread holding one may take those below it, never above):
//   deviceLock → output reconcile lock → session cond → stream slot lock
//   → receive slot lock, and output reconcile lock → render lock → receive slot
//   lock; EventQueue, EventHub and ClientLog locks are leaves. No lock is held while
//   a host callback runs, except the render lock around the per-speaker sink (see
//   OutputStage.swift).
import Glibc
import Synchronization
import VoiceCatABI
import VoiceCatAudio
import VoiceCatDevices
import VoiceCatProtocol
import VoiceCatSystem

public final class VoiceClient {
    public let config: ClientConfig

    /// idle → connecting → connected (→ reconnecting → connected …) → closing → idle.
    enum Phase { case idle, connecting, connected, reconnecting, closing }

    // Session state, guarded by `cond`.
    let cond = Condition()
    var phase = Phase.idle
    var destroyed = false
    var control: ControlConnection?
    var udp: Socket?
    var serverAddress = SocketAddress()
    var hello: HelloResult?
    var fingerprint: String?
    var channelID: UInt32 = 0
    /// Counts the session's moves out of a channel (cond): a stream whose start was
    /// answered across one may have been withdrawn by the move before it was installed.
    var channelEpoch: UInt64 = 0
    var channelName = ""
    var channelAudio: AudioConfig?
    var usernames: [UInt32: String] = [:]
    /// Remote streams announced while every receive slot was in use (cond), oldest
    /// first: not played (the host was told with an ERROR event), taken up in order as
    /// slots free, and known, so the server's later messages about them are not
    /// refused as naming streams this client never heard of. Each keeps the last
    /// mute / hold state the server sent for it, told when it is taken up.
    var unheardRemotes: [UnheardRemote] = []
    /// At most this many wait for a slot; a stream announced beyond them is not played.
    static let maxUnheardRemotes = 256
    /// The server's roster by user id (ControlPlane.swift); nil when the server sends none.
    var roster: [UInt32: UserPresence]?
    /// The state each local stream published (stream id → muted, hold), told again after a reconnect.
    var streamStates: [UInt32: (muted: Bool, hold: Bool)] = [:]
    /// Streams whose state was set in a reconnect's gap and not yet told to the new
    /// session (restore tells it with the stream's announce; what is set after that
    /// is told once the session is connected again).
    var statesSetInGap: Set<UInt32> = []
    /// Held while a stream state is stored and sent (host) or the gap's are told (network thread).
    let stateSendLock = Lock()
    /// Tests only (under `cond`): run on the network thread when a reconnect has restored
    /// the session (streams announced again) and before it counts as connected.
    var afterRestoreForTests: (() -> Void)?
    var nextRequestID: UInt32 = 1
    /// Outstanding requests by request id: nil until the reply arrives.
    var replies: [UInt32: ControlMessage?] = [:]
    /// The reply type each outstanding request waits for, and the reason a reply was
    /// refused (it broke the rules, or did not decode).
    var expected: [UInt32: MessageType] = [:]
    var refusedReplies: [UInt32: String] = [:]
    /// The channel epoch when each reply was handed over (the network thread applies
    /// what came before it on the wire first).
    var replyEpochs: [UInt32: UInt64] = [:]
    var networkThread: SystemThread?
    /// Set by disconnect/destroy: the network thread tears the session down and exits.
    var stopNetwork = false
    /// The media keys (the network thread reads them; rebinding replaces them).
    var mediaReceiveKey: SymmetricKey?
    var mediaSendKey: SymmetricKey?
    /// The network thread has started the session (connect waits for it).
    var networkReady = false
    /// Why the host ended the session (code, text), for the DISCONNECTED event.
    var disconnectReason: (Int32, String) = (VC_OK, "")
    var epoch: UInt32 = 0
    /// What the session connected to, for automatic reconnects.
    var target: ConnectTarget?
    /// Channel entries of the HelloResult refused at connect (raised after CONNECTED).
    var refusedAtHello: [String] = []
    /// Network thread only: rate limit of refusal events; why reconnecting gave up.
    let refusals = RefusalGate()
    let keepaliveScratch = UnsafeMutableRawBufferPointer.allocate(byteCount: FrameHeader.size, alignment: 8)
    var lastReconnectFailure = LinkEnd.lost(VC_ERR_NETWORK, "reconnecting failed")
    /// When the network thread last looked at talk state (network thread only).
    var talkCheckedMs: UInt64 = 0
    /// Cuts short every wait of a connect or reconnect (destroy, disconnect).
    let cancel: Canceller

    // Counters the network thread writes and host threads read.
    let mediaRttMs = Atomic<UInt32>(0)
    let controlRttMs = Atomic<UInt32>(0)
    let voiceConnected = Atomic<Bool>(false)
    let keepalivesSent = Atomic<UInt64>(0)
    let keepalivesLost = Atomic<UInt64>(0)
    /// Published local streams (the network thread probes the media path faster while any exist).
    let localStreamCount = Atomic<Int>(0)
    /// vc_join_channel calls waiting for their reply: the server withdraws this
    /// session's streams before it answers a move to another channel, and the streams
    /// are then said to have ended with the move, not to have been withdrawn.
    let joinsPending = Atomic<Int>(0)

    // Parts.
    let wake: WakeEvent
    let events: EventHub
    let streams: StreamTable
    let receive: ReceiveSet
    let output: OutputStage
    /// Guards device captures and the suspended flag.
    let deviceLock = Lock()
    var audioSuspended = false

    /// Why this client's calls failed (vc_last_error).
    private let errors = ErrorRecord()

    public init(config: ClientConfig = ClientConfig()) throws {
        guard config.maxRemoteStreams >= 1 && config.maxRemoteStreams <= 1024 else {
            throw ClientError.invalidArgument("max_remote_streams must be 1..1024 (got \(config.maxRemoteStreams))")
        }
        guard (1...65536).contains(config.eventQueueSize) else {
            throw ClientError.invalidArgument("event_queue_size must be 1..65536 (got \(config.eventQueueSize))")
        }
        guard config.talkHangoverMs <= 5000 else {
            throw ClientError.invalidArgument("talk_hangover_ms must be at most 5000 (got \(config.talkHangoverMs))")
        }
        if let p = RequestTextRules.clientNameProblem(config.clientName) { throw ClientError.invalidArgument(p) }
        guard config.keepaliveMs >= 50 else { throw ClientError.invalidArgument("keepalive_ms must be at least 50 (got \(config.keepaliveMs))") }
        guard FormatConverter.qualities.contains(config.resamplerQuality) else {
            throw ClientError.invalidArgument("resampler_quality must be within 0..10 (got \(config.resamplerQuality))")
        }
        self.config = config
        do { streams = try StreamTable() } catch {
            throw ClientError.noMemory("the send pacer's timer could not be created: \(error)")
        }
        Sodium.ensureInitialized()
        do {
            wake = try WakeEvent()
            cancel = try Canceller()
        } catch { throw ClientError.noMemory("\(error)") }
        receive = try ReceiveSet(capacity: config.maxRemoteStreams, networkWake: wake)
        events = EventHub(capacity: config.eventQueueSize, wake: wake)
        streams.events = events
        output = try OutputStage(receive: receive, streams: streams, events: events, backend: config.backend,
                                 external: config.externalPlayback, playbackDevice: config.playbackDevice,
                                 resamplerQuality: config.resamplerQuality)
        output.owner = self
    }

    deinit {
        shutdown()
        keepaliveScratch.deallocate()
    }

    /// Stops every thread and closes the session (destroy). Blocking calls in other
    /// threads return promptly (VC_ERR_STATE); afterwards nothing runs.
    public func shutdown() {
        events.queue.closing()
        cond.withLock {
            destroyed = true
            cond.broadcast()
        }
        // endSession cancels what waits (a connect, a reconnect's attempt or backoff)
        // once the session's end is recorded as the host's: cancelled first, a
        // reconnect attempt ended as if it had failed by itself (DISCONNECTED said
        // "reconnecting failed", VC_ERR_NETWORK, instead of "the client was destroyed").
        endSession(reason: VC_OK, text: "the client was destroyed")
        cancel.cancel()
        streams.pacer.stopAndJoin()
        output.shutdown()
        // A host thread waiting in vc_poll_event takes what was queued, then returns.
        events.queue.close()
    }

    // MARK: helpers

    /// The role the calling thread plays for this client, if it is one of its threads.
    var callerRole: ThreadRole? { ThreadIdentity.role(for: self).flatMap(ThreadRole.init(rawValue:)) }

    /// True on one of this client's own threads, or inside one of its callbacks (the
    /// per-speaker sink also runs on a host thread that pulls the mix, and the log
    /// callback, a callback of every client, on a host thread inside a failing call).
    public var onOwnThread: Bool {
        callerRole != nil || output.callingThreadIsInsideSpeakerSink || ClientLog.callingThreadIsInside
    }

    /// True where destroying this client could wait for the calling thread: on its own
    /// threads and callbacks, and inside any client's per-speaker sink (that thread holds
    /// a render lock which this client's event callback, pulling that mix, may wait for
    /// while destroy waits for the event callback).
    public var destroyWouldWaitForCaller: Bool { onOwnThread || OutputStage.insideSpeakerSink.isSet }

    /// True inside any callback of any client: on one of this client's threads or
    /// callbacks, on another client's thread (its event callback, its mixed sink), or
    /// inside any client's per-speaker sink. Callback-unsafe functions are refused
    /// there: a callback of one client that waits for another client's thread can
    /// deadlock with a callback of that client waiting for the first.
    public var insideAnyCallback: Bool {
        ThreadIdentity.isMarked || OutputStage.insideSpeakerSink.isSet || ClientLog.callingThreadIsInside
    }

    public func refuseInCallback(_ what: String) throws {
        if insideAnyCallback { throw fail(.state("\(what) cannot be called from inside a callback (of any client)")) }
    }

    public var isConnected: Bool { cond.withLock { phase == .connected } }

    /// Clears the event callback ahead of vc_client_destroy, waiting for a running call as
    /// vc_set_event_callback(NULL) does, also on another client's thread, where that
    /// refuses (the destroy waits for this client's threads anyway; it is not called
    /// where it would wait for the calling thread: destroyWouldWaitForCaller).
    public func clearEventHandlerForDestroy() { events.callback.set(nil) }

    /// Sets or clears the event callback; returns once a running call of the previous one
    /// has returned (at once from inside it).
    public func setEventHandler(_ h: ((ClientEvent) -> Void)?) throws {
        // Waiting for a running event callback is not possible where that callback may be
        // waiting for this thread: inside a per-speaker sink (of any client: it holds a
        // render lock an event callback's pull takes), inside the log callback (it may
        // run on such a thread, or an event callback may be waiting to replace it), or
        // on another client's thread (its event callback or mixed sink: that client's
        // event callback may be replacing this one's, each waiting for the other).
        let otherClientsThread = ThreadIdentity.isMarked && callerRole == nil
        if (OutputStage.insideSpeakerSink.isSet || ClientLog.callingThreadIsInside || otherClientsThread)
            && !events.callback.callingThreadIsInside {
            throw fail(.state("vc_set_event_callback cannot wait for the event callback from inside a per-speaker sink, "
                              + "the log callback or a callback of another client (the event callback may be waiting for this thread)"))
        }
        events.callback.set(h.map(EventHandlerBox.init))
    }
    public func pollEvent(timeoutMs: Int) -> ClientEvent? {
        if cond.withLock({ destroyed }) { return nil }
        return events.queue.pop(timeoutMs: timeoutMs)
    }

    /// The detailed message of the last failed call the calling thread made (of any
    /// thread's, when this one made none).
    public var lastError: String { errors.text }
    /// Records a failed call's message (every failing call records one).
    public func recordError(_ text: String) { errors.record(text) }

    /// Records a failed call's reason (vc_last_error) and logs it at debug level: the
    /// host gets the error code itself, so an expected failure is not a warning.
    @discardableResult
    func fail(_ e: ClientError) -> ClientError {
        recordError(e.description)
        ClientLog.log(3, e.description)
        return e
    }

    /// Runs `body`, recording a ClientError it throws as the last error.
    func failing<T>(_ body: () throws -> T) throws -> T {
        do { return try body() } catch let e as ClientError { throw fail(e) }
    }

    public var serverFingerprint: String? { cond.withLock { fingerprint } }
    public var currentChannelAudio: AudioConfig? { cond.withLock { channelAudio } }

    // MARK: connect

    /// Everything a connect needs, kept for automatic reconnects.
    struct ConnectTarget {
        var host: String
        var port: UInt16
        var username: String
        var password: String
        /// The fingerprint to insist on: the host's pin, or (reconnects) the one the
        /// first connect verified; and which of the two, for the error.
        var pinned: String?
        var pinnedWhat = "the pinned"
        /// The known-servers file to check and record in (nil: none).
        var storePath: String?
        /// The resume token of the last session established (reconnects name it, so
        /// the server ends that session if it still holds it instead of refusing the
        /// username; empty: none).
        var resumeToken: [UInt8] = []
    }

    /// One established session's connections and what the server said in Hello.
    struct Link {
        let conn: ControlConnection
        let udp: Socket
        let address: SocketAddress
        let hello: HelloResult
        /// Channel entries of the HelloResult (and roster records) that were left out, and why.
        let refused: [String]
        /// The roster the server sent after the HelloResult (nil: it sent none).
        var roster: [UInt32: UserPresence]? = nil
        /// The session's resume token, kept for the reconnects (one longer than 64
        /// bytes, which no server of this project sends, is not sent back).
        var resumeToken: [UInt8] { hello.resumeToken.count <= 64 ? hello.resumeToken : [] }
    }

    /// The known-servers file in force: nil when the host chose none ("") or no home
    /// directory exists for the per-user default.
    var knownServersFile: String? {
        guard let p = config.knownServersPath else { return KnownServers.defaultPath() }
        return p.isEmpty ? nil : p
    }

    public func connect(host: String, port: UInt16, username: String, password: String?, pinnedFingerprint: String?,
                        allowUnverified: Bool = false, timeoutMs: Int) throws {
        try refuseInCallback("vc_connect")
        if host.isEmpty { throw fail(.invalidArgument("host is empty: give the server's name or address")) }
        if let pin = pinnedFingerprint, pin.count != 64 || bytesFromHex(pin) == nil {
            throw fail(.invalidArgument("server_fingerprint must be 64 hex digits"))
        }
        if let p = NameRules.problem(username, what: "username") { throw fail(.invalidArgument(p)) }
        if let pw = password, let p = RequestTextRules.problem(pw, what: "password", maxBytes: RequestTextRules.maxPasswordBytes) {
            throw fail(.invalidArgument(p))
        }
        let store = pinnedFingerprint == nil ? knownServersFile : nil
        if pinnedFingerprint == nil && store == nil && !allowUnverified {
            throw fail(.auth("nothing to verify the server's identity with: pin server_fingerprint, use a known-servers file "
                             + "(vc_client_config.known_servers_path), or set allow_unverified to connect unverified"))
        }
        let oldThread = try failing {
            try cond.withLock { () throws -> SystemThread? in
                if destroyed { throw ClientError.state("the client is being destroyed") }
                guard phase == .idle else {
                    throw ClientError.state(phase == .connecting ? "a connect is already in progress" : "already connected")
                }
                phase = .connecting
                fingerprint = nil
                cancel.reset()
                let t = networkThread
                networkThread = nil
                return t
            }
        }
        oldThread?.join()
        let deadline = MonotonicClock.milliseconds() + UInt64(max(1, timeoutMs))
        var target = ConnectTarget(host: host, port: port == 0 ? ProtocolVersion.defaultPort : port, username: username,
                                   password: password ?? "", pinned: pinnedFingerprint?.lowercased(), storePath: store)
        // A host reconnecting by itself (to the same server, as the same user) names the
        // last session as an automatic reconnect does: the server may still hold it.
        target.resumeToken = cond.withLock {
            guard let last = self.target, last.host == target.host, last.port == target.port, last.username == username else { return [] }
            return last.resumeToken
        }
        var link: Link? = nil
        do {
            let l = try establish(target, deadlineMs: deadline)
            link = l
            // Reconnects insist on the identity verified now.
            target.pinned = l.conn.fingerprint
            target.resumeToken = l.resumeToken
            target.pinnedWhat = "the one this session was established with,"
            target.storePath = nil
            try cond.withLock {
                if destroyed || stopNetwork || cancel.isCancelled {
                    throw ClientError.state("the connect was cancelled (the client is being destroyed or disconnected)")
                }
                install(l)
                self.target = target
                channelID = 0
                channelName = ""
                channelAudio = nil
                usernames = [l.hello.userID: username]
                streamStates = [:]
                statesSetInGap = []
                replies = [:]
                stopNetwork = false
                phase = .connected
                networkReady = false
                // The network thread starts the session (send path, CONNECTED, the
                // output stage) and says when it is ready.
                startNetworkThread()
                while !networkReady && phase == .connected { cond.wait(untilMs: nil) }
                // The session may already have ended (the server closed it at once).
                if !networkReady { throw ClientError.network("the connection ended while connecting") }
            }
            ClientLog.log(2, "connected to \(l.address) as \(username) (user \(l.hello.userID)), server fingerprint \(l.conn.fingerprint)")
        } catch {
            let installed = cond.withLock { control === link?.conn && link != nil }
            if !installed { link?.conn.close(); link?.udp.close() }
            cond.withLock {
                if phase == .connecting { phase = .idle }
                stopNetwork = false
                cond.broadcast()
            }
            if let e = error as? ClientError { throw fail(e) }
            throw fail(.network("\(error)"))
        }
    }

    /// Makes `l` the session's connections (cond held).
    func install(_ l: Link) {
        let media = l.conn.keys.media(epoch: 0)
        control = l.conn
        udp = l.udp
        serverAddress = l.address
        hello = l.hello
        mediaReceiveKey = media.receive
        mediaSendKey = media.send
        epoch = 0
        refusedAtHello = l.refused
        roster = l.roster
    }

    /// TCP, handshake, the server's identity checked (pin or known-servers file)
    /// before anything else is sent, Hello, UDP binding. Any thread; every wait ends
    /// at the deadline or a cancel. Nothing of the session's state changes except the
    /// fingerprint seen.
    func establish(_ t: ConnectTarget, deadlineMs deadline: UInt64) throws -> Link {
        let address: SocketAddress
        do { address = try SocketAddress(host: t.host, port: t.port) } catch {
            throw ClientError.network("\(error)")   // "cannot resolve HOST: the resolver's reason"
        }
        var seen: String? = nil
        let c: ControlConnection
        do {
            c = try ControlConnection(address: address, pinned: t.pinned, pinnedWhat: t.pinnedWhat, deadlineMs: deadline, cancel: cancel,
                                      seenFingerprint: &seen)
        } catch {
            cond.withLock { fingerprint = seen }
            throw error
        }
        var sock: Socket? = nil
        do {
            cond.withLock { fingerprint = seen }
            if t.pinned == nil, let path = t.storePath {
                try KnownServers.verify(path: path, host: t.host, port: t.port, fingerprint: c.fingerprint)
            }
            try c.send(.hello(Hello(username: t.username, password: t.password, clientName: config.clientName,
                                    presence: config.presence, resumeToken: t.resumeToken)))
            var result: HelloResult
            let answer: ControlMessage
            do { answer = try c.receiveDecoded(deadlineMs: deadline) } catch let e as ClientError where e.code == VC_ERR_TIMEOUT {
                // A server holds its answer to an address that sent wrong passwords (0.5 s,
                // doubling): an honest client behind the same address waits too (helper-87
                // read only "the server did not answer in time").
                throw ClientError.timeout("the server did not answer the login (Hello) in time (a server also holds its "
                                          + "answer to an address that sent wrong passwords, up to 16 s by default: a longer "
                                          + "connect timeout waits that out)")
            }
            switch answer {
            case .helloResult(let r): result = r
            case .error(let e): throw VoiceClient.mapServerError(e)
            case let other: throw ClientError.protocolError("expected HelloResult, got \(other.type)")
            }
            // A long channel list continues in ChannelList parts; the whole list is judged.
            while result.moreChannels {
                guard case .channelList(let part) = try c.receiveDecoded(deadlineMs: deadline) else {
                    throw ClientError.protocolError("expected the rest of the server's channel list")
                }
                if let p = result.append(part) { throw ClientError.protocolError("refused the server's HelloResult: \(p)") }
            }
            if let p = ControlMessage.helloResult(result).serverMessageProblem {
                throw ClientError.protocolError("refused the server's HelloResult: \(p)")
            }
            var refused: [String] = []
            result.channels = result.channels.filter { ch in
                guard let p = ch.problem else { return true }
                refused.append("refused a channel of the server's HelloResult: \(p)")
                return false
            }
            result.serverName = ServerMessageLimits.sanitized(result.serverName, maxBytes: ServerMessageLimits.maxServerNameBytes)
            // The roster (asked for in Hello) follows in UserList parts; built whole before use.
            var roster: [UInt32: UserPresence]? = nil
            if result.presence {
                var users: [UserPresence] = []
                while true {
                    guard case .userList(let part) = try c.receiveDecoded(deadlineMs: deadline) else {
                        throw ClientError.protocolError("expected the server's user list after its HelloResult")
                    }
                    users += part.users
                    guard users.count <= ServerMessageLimits.maxUsers else {
                        throw ClientError.protocolError("refused the server's user list: over \(ServerMessageLimits.maxUsers) users")
                    }
                    if !part.more { break }
                }
                roster = VoiceClient.checkedRoster(users, refused: &refused)
            }
            do {
                sock = try Socket.udp(familyOf: address)
                try sock!.setNonBlocking()
                sock!.setReceiveBuffer(1 << 20)
                try? sock!.enableReceiveTimestamps()
            } catch {
                throw ClientError.network("cannot open the UDP socket: \(error)")
            }
            var binder = UDPBinder(sessionID: result.sessionID, bindingID: result.bindingID, epoch: 0, keys: c.keys.bind(epoch: 0))
            try bindUDP(sock!, to: address, binder: &binder, deadlineMs: deadline)
            return Link(conn: c, udp: sock!, address: address, hello: result, refused: refused, roster: roster)
        } catch {
            c.close()
            sock?.close()
            throw error
        }
    }

    static func mapServerError(_ e: ErrorMessage) -> ClientError {
        let text = "server: \(ServerMessageLimits.sanitized(e.message))"
        switch ProtocolErrorCode(rawValue: e.code) {
        case .authFailed, .forbidden: return .auth(text)   // forbidden: a wrong admin password
        case .versionMismatch: return .version(text)
        case .usernameTaken, .serverFull, .limitReached, .kicked: return .rejected(text)
        case .notFound: return .notFound(text)
        case .wrongState: return .state(text)
        case .shuttingDown: return .network(text)
        default: return .rejected(text)
        }
    }

    /// UDP_BINDING exchange (REQUEST, CHALLENGE, REQUEST with the cookie, BOUND): a
    /// REQUEST every 250 ms until bound (connect phase).
    func bindUDP(_ sock: Socket, to address: SocketAddress, binder: inout UDPBinder, deadlineMs: UInt64) throws {
        var buf = [UInt8](repeating: 0, count: 2048)
        while MonotonicClock.milliseconds() < deadlineMs {
            _ = try? binder.nextRequest().withUnsafeBytes { try sock.sendTo($0, address) }
            let until = min(deadlineMs, MonotonicClock.milliseconds() + 250)
            while MonotonicClock.milliseconds() < until {
                let ready: Bool
                do { ready = try cancel.wait(fd: sock.fd, events: Int16(POLLIN), deadlineMs: until) } catch is CancelledError {
                    throw ClientError.state("the connect was cancelled (the client is being destroyed or disconnected)")
                }
                guard ready else { break }
                guard let (n, _) = try? buf.withUnsafeMutableBytes({ try sock.receiveFrom(into: $0) }), n <= buf.count else { continue }
                switch buf.withUnsafeMutableBytes({ binder.handle(UnsafeMutableRawBufferPointer(rebasing: $0[0..<n])) }) {
                case .bound: return
                case .challenged: _ = try? binder.nextRequest().withUnsafeBytes { try sock.sendTo($0, address) }
                case .ignored: continue
                }
            }
        }
        throw ClientError.timeout("the server did not answer the UDP binding (is UDP to port \(address.port) blocked?)")
    }
    // MARK: disconnect

    public func disconnect() throws {
        try refuseInCallback("vc_disconnect")
        let wasUp = cond.withLock { phase != .idle }
        guard wasUp else {
            // A session that ended by itself may leave its network thread finishing.
            endSession(reason: VC_OK, text: "")
            throw fail(.state("not connected"))
        }
        endSession(reason: VC_OK, text: "disconnected by the host")
    }

    /// Ends the session from a host thread: cancels a connect in progress, or has the
    /// network thread tear the session down (it raises DISCONNECTED), and waits for
    /// it. Afterwards no thread of the session runs (its network thread is joined even
    /// when the session had already ended by itself).
    func endSession(reason: Int32, text: String) {
        let t: SystemThread? = cond.withLock {
            // A connect in progress is cut short; it may still have installed its
            // session (then it is torn down below like any other).
            while phase == .connecting {
                cancel.cancel()
                cond.wait(untilMs: nil)
            }
            if phase == .connected || phase == .reconnecting || phase == .closing {
                if !stopNetwork { disconnectReason = (reason, text) }
                stopNetwork = true
                cancel.cancel()   // a reconnect's waits end at once
            }
            let t = networkThread
            networkThread = nil
            return t
        }
        wake.wake()
        if let t { t.join() }
        // Another thread may be joining the same session's end: wait for it.
        cond.withLock { while phase != .idle { cond.wait(untilMs: nil) } }
    }

    /// Forgets the session (network thread, on its way out): streams, devices,
    /// sockets; raises DISCONNECTED and delivers every pending event.
    func teardown(reason: Int32, text: String) {
        cond.withLock {
            if phase == .connected || phase == .reconnecting { phase = .closing }
            channelEpoch &+= 1   // a stream start answered before this is retired by its starter
        }
        streams.sessionEnding(true)
        let lost = reason == VC_OK ? nil : text
        for s in streams.all { retire(s.streamID, why: "ended with the session (\(text))", lostSession: lost) }
        streams.pacer.stopThread()
        streams.publish(nil)
        output.setConnected(false)
        // Every received stream ends before the session does (TALK_STOP for one that
        // was talking, REMOTE_STREAM_REMOVED), so a host that follows the events is
        // left with nobody talking, as after a reconnect.
        removeAllRemote()
        receive.forgetLateness()
        voiceConnected.store(false, ordering: .relaxed)
        cond.withLock {
            control?.close()
            control = nil
            udp?.close()
            udp = nil
            channelID = 0
            channelName = ""
            channelAudio = nil
            stopNetwork = false
            phase = .idle
            cond.broadcast()
        }
        var e = ClientEvent(type: .disconnected)
        e.code = reason
        e.text = text
        events.raise(e)
        // Drains of the streams that ended with the session return once DISCONNECTED
        // is in the poll queue, not after the event callback has seen it (a callback
        // that waits for a thread in vc_stream_drain must not wait for itself).
        events.deliver(queued: { self.streams.sessionEnding(false) })
    }

    /// Takes a local stream out (stopped by the host, withdrawn by the server, or the
    /// session ended): its capture stops, later calls naming it are refused with `why`
    /// ("no stream 257: it " + why).
    func retire(_ id: UInt32, why: String, lostSession: String? = nil) {
        guard let s = streams.remove(id, why: why, lostSession: lostSession) else { return }
        cond.withLock { _ = streamStates.removeValue(forKey: id) }
        localStreamCount.wrappingSubtract(1, ordering: .relaxed)
        stopCapture(s)
        let hadAEC = s.slot.lock.withLock { () -> Bool in
            s.abandon()
            let aec = s.apm?.settings.echoCancellation == true
            s.apm = nil
            return aec
        }
        if hadAEC { streams.aecStreams.add(-1) }
    }

    // MARK: requests

    /// Sends a request and waits for the reply that carries its request id (a reply
    /// of type `expecting` the network thread refused ends the wait with its reason).
    /// A request that times out may still be applied by the server: its late reply is
    /// reconciled by the network thread (see handleControl).
    func request(_ make: (UInt32) -> ControlMessage, expecting: MessageType, timeoutMs: Int) throws -> ControlMessage {
        try answered(make, expecting: expecting, timeoutMs: timeoutMs).reply
    }

    /// As `request`, with the channel epoch at the reply (`channelEpoch` when the network
    /// thread handed it over): whether the session moved before or after the server
    /// answered.
    func answered(_ make: (UInt32) -> ControlMessage, expecting: MessageType,
                  timeoutMs: Int) throws -> (reply: ControlMessage, epoch: UInt64) {
        let (conn, rid) = try cond.withLock { () throws -> (ControlConnection, UInt32) in
            guard phase == .connected, let c = control else {
                throw ClientError.state(phase == .reconnecting ? "reconnecting to the server" : "not connected")
            }
            let r = nextRequestID
            nextRequestID &+= 1
            if nextRequestID == 0 { nextRequestID = 1 }
            replies[r] = .some(nil)
            expected[r] = expecting
            return (c, r)
        }
        let deadline = MonotonicClock.milliseconds() + UInt64(timeoutMs)
        do { try conn.send(make(rid)) } catch {
            cond.withLock { _ = replies.removeValue(forKey: rid); _ = expected.removeValue(forKey: rid) }
            throw error
        }
        return try cond.withLock {
            // Whatever happens, the request stops being outstanding here.
            defer {
                replies.removeValue(forKey: rid); expected.removeValue(forKey: rid); refusedReplies.removeValue(forKey: rid)
                replyEpochs.removeValue(forKey: rid)
            }
            while true {
                if case .some(.some(let m)) = replies[rid] { return (m, replyEpochs[rid] ?? channelEpoch) }
                if let why = refusedReplies[rid] { throw ClientError.protocolError(why) }
                if destroyed { throw ClientError.state("the client is being destroyed") }
                guard phase == .connected else { throw ClientError.network("the connection ended while waiting for the server") }
                if MonotonicClock.milliseconds() >= deadline { throw ClientError.timeout("the server did not answer in \(timeoutMs) ms") }
                cond.wait(untilMs: deadline)
            }
        }
    }

    public func joinChannel(_ name: String, timeoutMs: Int = 5000) throws {
        try refuseInCallback("vc_join_channel")
        if let p = NameRules.problem(name, what: "channel name") { throw fail(.invalidArgument(p)) }
        try failing {
            joinsPending.wrappingAdd(1, ordering: .relaxed)
            defer { joinsPending.wrappingSubtract(1, ordering: .relaxed) }
            let reply = try request({ .joinChannel(JoinChannel(name: name, requestID: $0)) }, expecting: .joinChannelResult,
                                    timeoutMs: timeoutMs)
            switch reply {
            case .joinChannelResult: return   // applied and announced by the network thread
            case .error(let err): throw VoiceClient.mapServerError(err)
            default: throw ClientError.protocolError("unexpected reply \(reply.type) to JoinChannel")
            }
        }
    }

    // MARK: streams

    public func startStream(kind: StreamKind, externalFeed: Bool, channels: Int, device: String? = nil,
                            maxQueueMs: Int = 0, sampleRate: Int = 0) throws -> UInt32 {
        try refuseInCallback("vc_stream_start")
        guard channels == 1 || channels == 2 else { throw fail(.invalidArgument("channels must be 1 or 2 (got \(channels))")) }
        let rate = sampleRate == 0 ? 48000 : sampleRate
        guard FormatConverter.rates.contains(rate) else {
            throw fail(.invalidArgument("sample_rate must be 0 (48000) or within 8000..192000 (got \(sampleRate))"))
        }
        guard maxQueueMs >= 0 && maxQueueMs <= 600_000 else {
            throw fail(.invalidArgument("max_queue_ms must be at most 600000 (got \(maxQueueMs))"))
        }
        return try failing {
            try cond.withLock {
                guard phase == .connected else { throw ClientError.state(phase == .reconnecting ? "reconnecting to the server" : "not connected") }
                guard channelAudio != nil else { throw ClientError.state("join a channel before starting a stream") }
            }
            let sid = try streams.reserve()
            var installed = false
            defer { if !installed { streams.unreserve(sid) } }
            // A device stream opens its device before the stream is announced: one that
            // cannot be opened is refused before the channel hears of the stream.
            let device = device ?? "default"
            var opened = try externalFeed ? nil : deviceLock.withLock { () throws -> CaptureWorker.Capture? in
                audioSuspended ? nil : try CaptureWorker.Capture.open(backend: config.backend, device: device, channels: channels,
                                                                        sampleRate: rate, quality: config.resamplerQuality)
            }
            defer { opened?.device.close() }   // not handed to the stream
            let (reply, epoch) = try answered({ .streamAnnounce(StreamAnnounce(streamID: sid, kind: kind, channels: UInt32(channels),
                                                                               requestID: $0)) },
                                              expecting: .streamAnnounceResult, timeoutMs: 5000)
            switch reply {
            case .streamAnnounceResult(let r):
                guard let slot = streams.slot(for: sid) else { throw ClientError.state("stream slot lost") }
                let opusLimit = MediaLimits.maxOpusBytes(serverLimit: cond.withLock { hello?.maxDatagramBytes ?? 0 })
                let s = try LocalStream(streamID: sid, ssrc: r.ssrc, kind: kind, externalFeed: externalFeed,
                                        inputChannels: channels, audio: r.effectiveAudio,
                                        maxQueueMs: maxQueueMs == 0 ? LocalStream.defaultMaxQueueMs : maxQueueMs,
                                        inputRate: rate, resamplerQuality: config.resamplerQuality, slot: slot, table: streams)
                if !externalFeed {
                    do {
                        try deviceLock.withLock {
                            if audioSuspended { s.device = device; return }
                            // Opened above (or, audio resumed since, now: that can still fail).
                            let capture = opened
                            opened = nil
                            try startCapture(s, device: device, channels: channels, opened: capture)
                        }
                    } catch {
                        // The server already announced it: withdraw it again.
                        cond.withLock { control }.map { try? $0.send(.streamStop(StreamStop(streamID: sid))) }
                        throw error
                    }
                }
                s.maxOpusBytes = opusLimit
                // Counted before it is installed: every retire of it uncounts it.
                localStreamCount.wrappingAdd(1, ordering: .relaxed)
                streams.install(s)
                // A vc_audio_suspend between its capture's start and now did not see it:
                // it is suspended too (vc_audio_restart reopens its device).
                if !externalFeed { deviceLock.withLock { if audioSuspended { endCapture(s) } } }
                // A move to another channel (a join from another thread) applied after
                // the server answered: the server announced the stream in the channel
                // left and withdrew it with the move, and the move's retiring may not
                // have seen it here yet. Installed first, checked after: a move counted
                // later retires it itself. (A move applied before the answer came
                // first on the server too: the stream is in the new channel.)
                if cond.withLock({ channelEpoch != epoch }) {
                    installed = true   // retire releases the slot
                    retire(sid, why: "ended when the session moved to another channel")
                    throw ClientError.state("the session moved to another channel while the stream was starting; start it again")
                }
                streams.pacer.start(owner: self, table: streams)
                wake.wake()   // the network thread probes the media path faster while streams run
                installed = true
                ClientLog.log(2, "stream \(sid) (\(kind)) started with ssrc \(r.ssrc)")
                return sid
            case .error(let err): throw VoiceClient.mapServerError(err)
            default: throw ClientError.protocolError("unexpected reply \(reply.type) to StreamAnnounce")
            }
        }
    }

    public func stopStream(_ id: UInt32) throws {
        try refuseInCallback("vc_stream_stop")
        try failing { try streams.withStream(id) { s, _ in s.finish() } }
        retire(id, why: "was stopped (vc_stream_stop)")
        try? cond.withLock { control }?.send(.streamStop(StreamStop(streamID: id)))
    }

    /// The ssrc the server assigned to a local stream.
    public func ssrc(ofStream id: UInt32) -> UInt32? { try? streams.withStream(id) { s, _ in s.ssrc } }

    /// vc_stream_feed_pcm: queues the PCM and sends what is due now; the pacer sends
    /// the rest at its time.
    public func feed(streamID: UInt32, pcm: UnsafePointer<Int16>, frames: Int, channels: Int) throws {
        try feeding(streamID, channels: channels) { s in try s.feed(pcm, frames: frames, channels: channels, clock: MonotonicClock.nanoseconds) }
    }

    /// vc_stream_feed_pcm_f32: float PCM (full scale ±1.0), otherwise as `feed`.
    public func feedFloat(streamID: UInt32, pcm: UnsafePointer<Float>, frames: Int, channels: Int) throws {
        try feeding(streamID, channels: channels) { s in try s.feedFloat(pcm, frames: frames, channels: channels, clock: MonotonicClock.nanoseconds) }
    }

    /// Runs a feed on a fed stream under its slot lock, then wakes the pacer and drain
    /// waiters as needed.
    private func feeding(_ streamID: UInt32, channels: Int, _ body: (LocalStream) throws -> Void) throws {
        guard channels == 1 || channels == 2 else { throw fail(.invalidArgument("channels must be 1 or 2 (got \(channels))")) }
        let due = try failing {
            try streams.withStream(streamID) { s, _ -> UInt64? in
                guard s.externalFeed else { throw ClientError.state("stream \(streamID) captures from a device; it cannot be fed") }
                try body(s)
                return s.deadline
            }
        }
        streams.rescheduled(due)
        streams.signalDrainWaiters()
    }

    /// vc_get_input_level: the level of a published stream's last frame after send
    /// processing, before the gate (the floor when no frame went through for 250 ms).
    public func inputLevel(streamID: UInt32) throws -> Level {
        let (l, at) = try failing { try streams.withStream(streamID) { s, _ in (s.level, s.levelAtNs) } }
        if at == 0 || at &+ 250_000_000 < MonotonicClock.nanoseconds() {
            return Level(rmsDBFS: BlockLevel.floorDBFS, peakDBFS: BlockLevel.floorDBFS)
        }
        return Level(rmsDBFS: BlockLevel.dbfs(l.rms), peakDBFS: BlockLevel.dbfs(l.peak))
    }

    /// vc_stream_queued_ms: audio fed to the stream and not sent yet.
    public func queuedMs(streamID: UInt32) throws -> UInt32 {
        try failing { try streams.withStream(streamID) { s, _ in s.queuedMs } }
    }

    /// vc_stream_drain: waits until everything fed to the stream has been sent.
    public func drain(streamID: UInt32, timeoutMs: Int) throws {
        if insideAnyCallback { throw fail(.state("vc_stream_drain cannot wait inside a callback (of any client)")) }
        try failing { try streams.drain(streamID, timeoutMs: timeoutMs) }
    }

    /// vc_stream_flush: drops what is queued and ends the talkspurt (barge-in).
    public func flush(streamID: UInt32) throws {
        let due = try failing { try streams.withStream(streamID) { s, _ -> UInt64? in
            s.flush()
            return s.deadline
        } }
        streams.rescheduled(due)
        streams.signalDrainWaiters()
    }

    // MARK: receive settings and stats

    public func setRemote(ssrc: UInt32, _ settings: RemoteSettings) throws {
        try failing { try receive.setSettings(ssrc: ssrc, settings) }
    }

    /// True while a noise-reduction state runs for the stream (tests, diagnostics).
    public func isNoiseReducing(ssrc: UInt32) throws -> Bool { try receive.withSlot(ssrc: ssrc) { $0.noiseReducer != nil } }

    public func remote(ssrc: UInt32) throws -> RemoteSettings { try failing { try receive.withSlot(ssrc: ssrc) { $0.settings } } }

    public func remoteStreams() -> [RemoteStreamInfo] { receive.infos() }

    public func streamStats(ssrc: UInt32) throws -> StreamStats { try failing { try receive.stats(ssrc: ssrc) } }

    public func connectionStats() -> ConnectionStats {
        var s = ConnectionStats()
        s.mediaRttMs = mediaRttMs.load(ordering: .relaxed)
        s.controlRttMs = controlRttMs.load(ordering: .relaxed)
        s.bytesIn = receive.input.bytesIn.load(ordering: .relaxed)
        s.packetsIn = receive.input.packetsIn.load(ordering: .relaxed)
        s.authFailures = receive.input.authFailures.load(ordering: .relaxed)
        s.voiceConnected = voiceConnected.load(ordering: .relaxed)
        s.keepalivesSent = keepalivesSent.load(ordering: .relaxed)
        s.keepalivesLost = keepalivesLost.load(ordering: .relaxed)
        (s.packetsOut, s.bytesOut) = streams.sendCounters()
        return s
    }

    /// vc_get_playback_stats.
    public func playbackStats() -> PlaybackStats {
        PlaybackStats(deviceUnderruns: UInt64(output.deviceUnderruns.load()), deviceFailures: UInt64(output.deviceFailures.load()),
                      deviceBufferedUs: UInt64(output.deviceHeldUs.load()))
    }

    // MARK: output

    /// Pull mode (vc_read_mixed_pcm): `frames` in the output format.
    public func readMixed(into out: UnsafeMutablePointer<Int16>, frames: Int) throws {
        try failing { try output.pull(into: out, frames: frames) }
    }

    /// vc_read_mixed_pcm_f32.
    public func readMixedFloat(into out: UnsafeMutablePointer<Float>, frames: Int) throws {
        try failing { try output.pullFloat(into: out, frames: frames) }
    }

    /// Sets or clears the mixed-output sink (pcm, frames; channels as the output
    /// format). Returns once a running call of the previous sink has returned.
    /// Refused from inside a callback of the client's render thread.
    public func setSink(_ fn: ((UnsafePointer<Int16>, Int) -> Void)?) throws {
        try setMixedSink(fn.map { f in { pcm, frames, _ in f(pcm, frames) } })
    }

    /// The same with the channel count (vc_set_mixed_output_sink).
    public func setMixedSink(_ fn: ((UnsafePointer<Int16>, Int, Int) -> Void)?) throws {
        if callerRole == .render || output.callingThreadIsInsideSpeakerSink {
            throw fail(.state("the sink cannot be set or cleared from inside a sink"))
        }
        output.setSink(fn.map(SinkBox.init))
    }

    /// vc_set_mixed_output_block_ms: the block the mixer thread renders in sink mode.
    public func setMixedOutputBlock(ms: Int) throws {
        try refuseInCallback("vc_set_mixed_output_block_ms")
        try failing { try output.setSinkBlock(ms: ms) }
    }

    /// vc_set_remote_stream_sink: each remote stream's decoded blocks (after the
    /// listener's NR, before gain, mute and mixing) in the output format.
    public func setSpeakerSink(_ fn: ((SpeakerBlock) -> Void)?) throws {
        try refuseInCallback("vc_set_remote_stream_sink")
        try failing { try output.setSpeakerSink(fn.map(SpeakerSinkBox.init)) }
    }

    /// vc_set_output_format.
    public func setOutputFormat(sampleRate: Int, channels: Int) throws {
        try refuseInCallback("vc_set_output_format")
        try failing { try output.setOutputFormat(OutputFormat(sampleRate: sampleRate, channels: channels)) }
    }

    public var outputFormat: OutputFormat { output.outputFormat }

    /// vc_start_recording: the mix (ssrc 0) or one remote stream to a WAV file.
    public func startRecording(path: String, ssrc: UInt32) throws {
        try refuseInCallback("vc_start_recording")
        try failing { try output.startRecording(path: path, ssrc: ssrc) }
    }

    /// vc_stop_recording.
    public func stopRecording(ssrc: UInt32) throws {
        try refuseInCallback("vc_stop_recording")
        try failing { try output.stopRecording(ssrc: ssrc) }
    }
}
