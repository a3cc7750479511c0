// The network thread (vc-network): starts and ends each session, reads control
// messages and media datagrams, runs the keepalive / media RTT / rebinding timers
// and the control connection's liveness, reconnects when the host asked for it
// (Reconnect.swift), and delivers every event of the client (Events.swift), so the
// host's event callback always runs here, in protocol order.
//
// Everything the server sends is checked before it is used (Validation.swift for
// the rules of a message alone; order and known ids here): a message that breaks
// them is refused with a VC_EVENT_ERROR naming it, and the session goes on.
import Glibc
import VoiceCatABI
import VoiceCatAudio
import VoiceCatProtocol
import VoiceCatSystem

/// Network-thread state of the media path.
struct MediaPathState {
    /// While streams are active the path is probed every 0.5 s and declared lost
    /// 2.5 s after its last echo; idle, every keepalive_ms and after 3.5 periods.
    static let activeKeepaliveMs: UInt64 = 500
    static let activeLostMs: UInt64 = 2500
    /// Binding attempts while rebinding (so a path that returns is bound within ~0.1 s).
    static let rebindRetryMs: UInt64 = 100
    /// A keepalive whose echo has not come after this is counted lost.
    static let echoWindowMs: UInt64 = 2000

    var nextKeepaliveMs: UInt64 = 0
    var lastKeepaliveMs: UInt64 = 0
    var lastEchoMs: UInt64 = 0
    var keepaliveSeq: UInt64 = 0
    var voiceConnected = true
    /// Streams are active (local or remote), and since when.
    var active = false
    var activeSinceMs: UInt64 = 0
    /// Rebind requested at this time for this epoch (awaiting RebindResult), or nil.
    var rebindRequestedMs: UInt64?
    var rebindEpoch: UInt32 = 0
    /// After RebindResult: the binding being made, and when to send its next REQUEST.
    var binder: UDPBinder?
    var nextBindMs: UInt64 = 0
    /// A JoinChannelResult whose member list is still arriving in MemberList parts.
    var pendingJoin: JoinChannelResult?
    /// The server ended the session for good (an admin kicked it): why; no reconnect.
    var finalEnd: (code: Int32, text: String)?
    /// The server said it is shutting down: the close that follows is reported with
    /// this (a reconnect, when on, goes on trying).
    var closingReason: String?
    /// When the next loss report is due (LossFeedback.swift), and whether no stream
    /// was received at the last look (the timer then stands).
    var nextLossReportMs: UInt64 = 0
    var lossReportsIdle = true
    /// When the media path was last found lost (VC_EVENT_VOICE_DISCONNECTED).
    var voiceLostAtMs: UInt64 = 0
    /// The reports being gathered, kept between reports so they allocate nothing once
    /// the array has grown to the streams received.
    var lossReports: [ReceptionReport] = []
    /// Keepalives awaiting their echo (a fixed ring: seq, time sent; .max = free).
    var pendingSeq = [UInt64](repeating: .max, count: 16)
    var pendingSentMs = [UInt64](repeating: 0, count: 16)

    init(nowMs: UInt64) {
        nextKeepaliveMs = nowMs
        lastEchoMs = nowMs
        lossReports.reserveCapacity(64)
    }

    /// An echo came back: a sign of life, and one keepalive fewer awaiting.
    mutating func echoed(seq: UInt64, nowMs: UInt64) {
        lastEchoMs = nowMs
        for i in pendingSeq.indices where pendingSeq[i] == seq { pendingSeq[i] = .max }
    }

    /// Records a keepalive sent; returns how many awaiting ones it pushed out unanswered.
    mutating func sent(seq: UInt64, nowMs: UInt64) -> UInt64 {
        let i = Int(seq % UInt64(pendingSeq.count))
        let lost: UInt64 = pendingSeq[i] != .max ? 1 : 0
        pendingSeq[i] = seq
        pendingSentMs[i] = nowMs
        return lost
    }

    /// Counts (and forgets) keepalives unanswered for the echo window.
    mutating func expire(nowMs: UInt64) -> UInt64 {
        var lost: UInt64 = 0
        for i in pendingSeq.indices where pendingSeq[i] != .max && nowMs &- pendingSentMs[i] > MediaPathState.echoWindowMs {
            pendingSeq[i] = .max
            lost += 1
        }
        return lost
    }

    /// The last sign of life of the path (an echo, or when probing started).
    var lastSignMs: UInt64 { active ? max(lastEchoMs, activeSinceMs) : lastEchoMs }

    func keepalivePeriod(_ configured: UInt64) -> UInt64 { active ? min(configured, MediaPathState.activeKeepaliveMs) : configured }
    /// A round trip longer than this is not one (a forged or stale stamp): neither the
    /// media keepalive's nor the control Ping's RTT takes it.
    static let maxRoundTripMs: UInt32 = 60_000

    func lostAfter(_ configured: UInt64) -> UInt64 {
        active ? min(MediaPathState.activeLostMs, 3 * configured + configured / 2) : 3 * configured + configured / 2
    }
}

/// Network-thread state of the control connection's liveness.
struct ControlLiveness {
    var lastHeardMs: UInt64
    var nextPingMs: UInt64
    init(nowMs: UInt64) { lastHeardMs = nowMs; nextPingMs = nowMs }
    /// Nothing heard for this long: the connection is dead.
    static func timeoutMs(keepaliveMs: UInt64) -> UInt64 { max(3 * keepaliveMs, 3000) }
}

/// Refusal events are rate-limited (a hostile server cannot make an event storm):
/// 20 at once, then 5 a second, the rest counted and reported in the next one.
final class RefusalGate {
    private var tokens = 20.0
    private var lastMs: UInt64 = 0
    private var suppressed = 0

    /// The text to raise now, or nil (suppressed).
    func admit(_ text: String, nowMs: UInt64) -> String? {
        tokens = min(20, tokens + Double(nowMs &- lastMs) / 200)
        lastMs = nowMs
        guard tokens >= 1 else { suppressed += 1; return nil }
        tokens -= 1
        defer { suppressed = 0 }
        return suppressed == 0 ? text : text + " (and \(suppressed) more refusals not reported)"
    }
}

/// Why the loop of one connection ended.
enum LinkEnd {
    /// The host asked (disconnect or destroy): (code, text) for DISCONNECTED.
    case host(Int32, String)
    /// The connection was lost or failed.
    case lost(Int32, String)
    /// The server ended the session in a way a reconnect would not change (a kick).
    case final(Int32, String)
}

extension VoiceClient {

    /// Starts the network thread (cond held by the caller).
    func startNetworkThread() {
        networkThread = SystemThread(name: "vc-network") { [unowned self] in self.networkLoop() }
    }

    func networkLoop() {
        ThreadIdentity.mark(owner: self, role: ThreadRole.network.rawValue)
        defer { ThreadIdentity.clear() }
        guard var link = cond.withLock({ () -> Link? in
            guard let c = control, let u = udp, let h = hello else { return nil }
            return Link(conn: c, udp: u, address: serverAddress, hello: h, refused: refusedAtHello)
        }) else {
            teardown(reason: VC_ERR_NETWORK, text: "the session ended before it started")
            return
        }

        // Start the session: the send path, CONNECTED, the output stage.
        receive.input.packetsIn.store(0, ordering: .relaxed); receive.input.bytesIn.store(0, ordering: .relaxed)
        receive.input.authFailures.store(0, ordering: .relaxed); mediaRttMs.store(0, ordering: .relaxed)
        controlRttMs.store(0, ordering: .relaxed); voiceConnected.store(true, ordering: .relaxed)
        keepalivesSent.store(0, ordering: .relaxed); keepalivesLost.store(0, ordering: .relaxed)
        streams.resetCounters()
        publishSendPath(link)
        events.discardPending()
        var connected = ClientEvent(type: .connected)
        connected.userID = link.hello.userID
        connected.text = link.hello.serverName
        events.raise(connected)
        for text in link.refused { raiseRefusal(text) }
        // A playback device that cannot be opened is reported (VC_EVENT_ERROR) and
        // retried on the backoff by the output stage.
        output.setConnected(true)
        events.deliver()
        cond.withLock { networkReady = true; cond.broadcast() }

        var end: LinkEnd
        while true {
            end = run(link)
            guard case .lost(let code, let text) = end, config.autoReconnect else { break }
            ClientLog.log(1, "connection lost (\(text)); reconnecting")
            guard let next = reconnect(after: code, text) else {
                end = cond.withLock { stopNetwork } ? .host(disconnectReason.0, disconnectReason.1) : lastReconnectFailure
                break
            }
            link = next
        }
        let (code, text): (Int32, String)
        switch end {
        case .host(let c, let t): (code, text) = (c, t)
        case .lost(let c, let t), .final(let c, let t): (code, text) = (c, t)
        }
        if code != VC_OK { ClientLog.log(1, "disconnected: \(text)") }
        teardown(reason: code, text: text)
    }

    /// Publishes what sending needs for `link` (media key of its epoch 0, socket, address).
    func publishSendPath(_ link: Link) {
        guard let key = cond.withLock({ mediaSendKey }) else { return }
        streams.publish(SendSnapshot(key: key, socket: link.udp, address: link.address, serverMuted: false))
    }

    /// Runs one connection until the host ends the session or the connection is lost.
    func run(_ link: Link) -> LinkEnd {
        let conn = link.conn, sock = link.udp
        // Datagrams are read in batches (recvmmsg), each with the kernel's receive
        // time, so the jitter statistics do not depend on when they were read: by the
        // renderer before each render while it renders, else by this thread.
        receive.input.attach(socket: sock, key: cond.withLock { mediaReceiveKey }, bindingID: link.hello.bindingID)
        defer { receive.input.attach(socket: nil, key: nil, bindingID: 0) }
        let now0 = MonotonicClock.milliseconds()
        var media = MediaPathState(nowMs: now0)
        var control = ControlLiveness(nowMs: now0)
        var pollSet = PollSet()
        func hostEnd() -> LinkEnd? { cond.withLock { stopNetwork ? LinkEnd.host(disconnectReason.0, disconnectReason.1) : nil } }
        // With several streams coming in, datagrams are collected for a few ms after
        // each drain rather than waking for every one (their arrival times come from
        // the kernel, so the jitter statistics are unaffected).
        var udpQuietUntilMs: UInt64 = 0
        while true {
            if let e = hostEnd() { return e }
            let nowMs = MonotonicClock.milliseconds()
            let byRenderer = rendererReadsMedia(media)
            let watchUDP = !byRenderer && nowMs >= udpQuietUntilMs
            var until = nextTimerMs(media, control, byRenderer: byRenderer)
            if !byRenderer && !watchUDP { until = min(until, udpQuietUntilMs) }
            let timeout = Int32(clamping: max(0, Int64(until) - Int64(nowMs)))
            pollSet.removeAll()
            pollSet.add(wake.fd, events: Int16(POLLIN))
            pollSet.add(conn.socket.fd, events: Int16(POLLIN))
            if watchUDP { pollSet.add(sock.fd, events: Int16(POLLIN)) }
            // While the renderer reads, its lease says when it stopped (MediaInput).
            let leaseIndex = pollSet.fds.count
            if byRenderer { pollSet.add(receive.input.lease.fd, events: Int16(POLLIN)) }
            _ = try? pollSet.wait(timeoutMs: timeout)
            if pollSet.fds[0].revents != 0 { wake.drain() }
            if byRenderer && pollSet.fds[leaseIndex].revents != 0 { receive.input.leaseExpired() }
            if let e = hostEnd() { return e }
            if pollSet.fds[1].revents != 0 {
                do {
                    let open = try conn.readAvailable()
                    try dispatchBuffered(conn, media: &media, control: &control)
                    if let f = media.finalEnd {
                        events.deliver()
                        return .final(f.code, f.text)
                    }
                    if !open {
                        events.deliver()
                        return .lost(VC_ERR_NETWORK, media.closingReason ?? conn.brokenReason.map { "the control connection is lost: \($0)" }
                                     ?? "the server closed the connection")
                    }
                } catch let e as ClientError {
                    events.deliver()
                    if let why = media.closingReason { return .lost(VC_ERR_NETWORK, why) }
                    if let why = conn.brokenReason { return .lost(VC_ERR_NETWORK, "the control connection is lost: \(why)") }
                    return .lost(e.code, e.description)
                } catch {
                    events.deliver()
                    return .lost(VC_ERR_NETWORK, "\(error)")
                }
            }
            let readNow: Bool
            if watchUDP {
                readNow = pollSet.fds[2].revents != 0
            } else if byRenderer {
                readNow = !rendererReadsMedia(media)   // the renderer stopped: read here
            } else {
                readNow = MonotonicClock.milliseconds() >= udpQuietUntilMs
            }
            if readNow {
                drainUDP(sock, media: &media)
                if receive.count > 1 { udpQuietUntilMs = MonotonicClock.milliseconds() + VoiceClient.receiveCoalesceMs }
            }
            takeRendererEchoes(media: &media)
            if let dead = timers(conn: conn, sock: sock, media: &media, control: &control) {
                events.deliver()
                return dead
            }
            events.deliver()
        }
    }

    /// Handles every complete message read so far; an undecodable one is refused
    /// and the rest go on. Frame errors (authentication) end the connection.
    /// Stops early once the host ends the session (checked every 64 messages): a backlog
    /// a server sent at once must not hold up vc_disconnect / vc_client_destroy.
    func dispatchBuffered(_ conn: ControlConnection, media: inout MediaPathState, control: inout ControlLiveness) throws {
        var handled = 0
        while true {
            handled += 1
            if handled % 64 == 0 && cond.withLock({ stopNetwork }) { return }
            do {
                guard let m = try conn.nextBuffered() else { return }
                control.lastHeardMs = MonotonicClock.milliseconds()
                handleControl(m, sender: conn, media: &media)
            } catch let u as UndecodableMessage {
                control.lastHeardMs = MonotonicClock.milliseconds()
                refuseUndecodable(u)
            }
        }
    }

    /// When the next timer of the network thread is due (ms, monotonic).
    func nextTimerMs(_ media: MediaPathState, _ control: ControlLiveness, byRenderer: Bool) -> UInt64 {
        let configured = UInt64(config.keepaliveMs)
        // The keepalive at the period in force (timers() shortens it when streams
        // become active; anything that makes them active also wakes this thread).
        var t = min(media.nextKeepaliveMs, media.lastKeepaliveMs + media.keepalivePeriod(configured))
        if media.voiceConnected { t = min(t, media.lastSignMs + media.lostAfter(configured) + 1) }
        if media.binder != nil { t = min(t, media.nextBindMs) }
        t = min(t, control.nextPingMs, control.lastHeardMs + ControlLiveness.timeoutMs(keepaliveMs: configured) + 1)
        t = min(t, nextLossReportMs(media))
        return min(t, nextTalkLookMs(byRenderer: byRenderer))
    }

    // MARK: control messages

    func handleControl(_ m: ControlMessage, sender: ControlSender, media: inout MediaPathState) {
        let now = MonotonicClock.milliseconds()
        if let p = m.serverMessageProblem { return refuse(m, p) }
        switch m {
        case .helloResult:
            refuse(m, "out of order: the session has started already")
        case .joinChannelResult(let r):
            let listed = cond.withLock { hello?.channels.contains(where: { $0.id == r.channelID }) == true }
            guard listed else { return refuse(m, "channel \(r.channelID) is not one the server listed") }
            // A long member list continues in MemberList parts: the join is applied once it is whole.
            if r.moreMembers { media.pendingJoin = r; return }
            applyJoin(r)
            reply(r.requestID, m)
        case .memberList(let part):
            // Taken out of `media` and appended to in place: the list is not copied per part.
            guard var whole = media.pendingJoin else {
                return refuse(m, "out of order: no split member list is being received for channel \(part.channelID)")
            }
            media.pendingJoin = nil
            if let p = whole.append(part) { return refuse(m, p) }
            if whole.moreMembers { media.pendingJoin = whole; return }
            applyJoin(whole)
            reply(whole.requestID, .joinChannelResult(whole))
        case .channelList:
            refuse(m, "out of order: the session has started already")
        case .streamAnnounceResult(let r):
            // A stream whose request timed out is one the host does not know: withdraw it.
            if !reply(r.requestID, m) { try? sender.send(.streamStop(StreamStop(streamID: r.streamID))) }
        case .error(let e):
            if e.code == ProtocolErrorCode.kicked.rawValue && e.requestID == 0 {
                media.finalEnd = (VoiceClient.mapServerError(e).code, "server: \(ServerMessageLimits.sanitized(e.message))")
                return
            }
            if e.code == ProtocolErrorCode.shuttingDown.rawValue && e.requestID == 0 {
                media.closingReason = "server: \(ServerMessageLimits.sanitized(e.message))"
                return
            }
            if !reply(e.requestID, m) {
                var ev = ClientEvent(type: .error)
                ev.code = VoiceClient.mapServerError(e).code
                ev.text = "server: \(ServerMessageLimits.sanitized(e.message))"
                events.raise(ev)
            }
        case .ping(let p):
            try? sender.send(.pong(Pong(timestamp: p.timestamp)))
        case .pong(let p):
            // Whole milliseconds, at least 1 once measured: 0 means none yet. A stamp
            // that is not one of this client's recent pings (a forged or stale one, over
            // a minute old) is not a round trip.
            if p.timestamp <= now && now - p.timestamp < UInt64(MediaPathState.maxRoundTripMs) {
                controlRttMs.store(max(1, UInt32(now - p.timestamp)), ordering: .relaxed)
            }
        case .userJoined(let u):
            if let p = joinProblem(u.member) { return refuse(m, p) }
            memberJoined(u.member, channelID: u.channelID)
        case .usersJoined(let u):
            // Several joins told at once: judged as a whole, then one event each.
            if let p = u.members.lazy.compactMap(joinProblem).first { return refuse(m, p) }
            for member in u.members { memberJoined(member, channelID: u.channelID) }
        case .userLeft(let u):
            if let p = leaveProblem(u.userID) { return refuse(m, p) }
            memberLeft(u.userID, channelID: u.channelID)
        case .usersLeft(let u):
            if let p = u.userIDs.lazy.compactMap(leaveProblem).first { return refuse(m, p) }
            for id in u.userIDs { memberLeft(id, channelID: u.channelID) }
        case .remoteStreamAdded(let r):
            let (inChannel, own, known) = cond.withLock { (channelID != 0, r.userID == hello?.userID, usernames[r.userID] != nil) }
            if !inChannel { return refuse(m, "out of order: no channel joined") }
            if own { return refuse(m, "ssrc \(r.ssrc) is announced as this session's own") }
            if !known { return refuse(m, "user \(r.userID) is not a member this client was told of") }
            if receive.slotIndex(ssrc: r.ssrc) != nil || isUnheard(ssrc: r.ssrc) { return refuse(m, "ssrc \(r.ssrc) is already received") }
            addRemote(r)
        case .remoteStreamRemoved(let r):
            let own = cond.withLock { r.userID == hello?.userID }
            var removedKind: UInt32 = 0
            if own {
                guard let kind = try? streams.withStream(r.streamID, { s, _ in s.kind.rawValue }) else {
                    // A stream still being started (its announce answered, not yet
                    // installed: a move crossed it): its starter retires it.
                    if streams.isReserved(r.streamID) { return }
                    return refuse(m, "names no stream of this session (\(r.streamID))")
                }
                removedKind = kind
                retire(r.streamID, why: joinsPending.load(ordering: .relaxed) > 0
                       ? "ended when the session moved to another channel" : "was withdrawn by the server")
            } else {
                // One never played (no slot was free): forgotten without an event (the
                // host had no REMOTE_STREAM_ADDED for it, only the ERROR saying so).
                if forgetUnheard(ssrc: r.ssrc) { return }
                guard let who = remoteIdentity(ssrc: r.ssrc) else { return refuse(m, "ssrc \(r.ssrc) is not received") }
                removedKind = who.kind.rawValue
                removeRemote(ssrc: r.ssrc)
            }
            var e = ClientEvent(type: .remoteStreamRemoved)
            e.userID = r.userID; e.streamID = r.streamID; e.ssrc = r.ssrc
            e.text = cond.withLock { usernames[r.userID] } ?? ""
            e.kind = removedKind
            events.raise(e)
            // After its REMOTE_STREAM_REMOVED: the host never counts more streams
            // than there are slots.
            if !own { takeUpWaitingRemote() }
        case .streamStateUpdate(let u):
            if keepUnheardState(u) { return }     // not played: told when it is taken up
            guard let who = remoteIdentity(ssrc: u.ssrc) else { return refuse(m, "ssrc \(u.ssrc) is not received") }
            raiseStreamState(u, userID: who.userID, streamID: who.streamID, kind: who.kind, username: who.username)
        case .serverMuteState(let s):
            if s.userID == cond.withLock({ hello?.userID }), let snap = streams.snapshot, snap.serverMuted != s.muted {
                streams.publish(snap.with(serverMuted: s.muted))
            }
            var e = ClientEvent(type: .serverMuteState)
            e.userID = s.userID; e.muted = s.muted; e.deafened = s.deafened
            events.raise(e)
        case .rebindResult(let r):
            guard media.rebindRequestedMs != nil, r.epoch == media.rebindEpoch else {
                return refuse(m, "epoch \(r.epoch) was not asked for")
            }
            let keys = sender.keys.media(epoch: r.epoch)
            cond.withLock { epoch = r.epoch; mediaReceiveKey = keys.receive; mediaSendKey = keys.send }
            receive.input.setKey(keys.receive)
            if let snap = streams.snapshot { streams.publish(snap.with(key: keys.send)) }
            media.binder = cond.withLock { hello.map { UDPBinder(sessionID: $0.sessionID, bindingID: $0.bindingID, epoch: r.epoch,
                                                                 keys: sender.keys.bind(epoch: r.epoch)) } }
            media.rebindRequestedMs = nil
            media.nextBindMs = now
            receive.input.stopRendererReads()   // the binding's replies are read here
            ClientLog.log(2, "media keys renewed (epoch \(r.epoch)); binding again")
        case .userList:
            refuse(m, "out of order: the session has started already")
        case .presenceUpdate(let u):
            applyPresence(m, u)
        case .adminResult(let r):
            reply(r.requestID, m)
        case .lossFeedback(let f):
            applyLossFeedback(f)
        case .hello, .joinChannel, .streamAnnounce, .streamStop, .rebind, .setServerMute, .kickUser, .receiverReport:
            break   // refused above (serverMessageProblem)
        }
    }

    func joinProblem(_ member: MemberInfo) -> String? {
        let own = cond.withLock { member.userID == hello?.userID }
        return own || member.userID == 0 ? "user id \(member.userID) is not another user" : nil
    }

    func memberJoined(_ member: MemberInfo, channelID: UInt32) {
        cond.withLock { usernames[member.userID] = member.username }
        var e = ClientEvent(type: .userJoined)
        e.userID = member.userID; e.channelID = channelID; e.text = member.username
        e.muted = member.muted; e.deafened = member.deafened
        events.raise(e)
    }

    func leaveProblem(_ userID: UInt32) -> String? {
        cond.withLock { usernames[userID] } == nil ? "user \(userID) is not known" : nil
    }

    func memberLeft(_ userID: UInt32, channelID: UInt32) {
        cond.withLock { unheardRemotes.removeAll { $0.stream.userID == userID } }
        var e = ClientEvent(type: .userLeft)
        e.userID = userID; e.channelID = channelID
        // Forgotten as it leaves: the table holds the channel's members (and this
        // session's own name), not everyone ever announced, and a stream announced for
        // a user who left is refused.
        e.text = cond.withLock { () -> String in
            guard userID != hello?.userID else { return usernames[userID] ?? "" }
            return usernames.removeValue(forKey: userID) ?? ""
        }
        events.raise(e)
    }

    /// Refuses a message that broke the rules: an ERROR event naming it (rate-limited),
    /// the request waiting for it (if any) fails with the reason, and what the server
    /// already did on its side is undone where it matters.
    func refuse(_ m: ControlMessage, _ why: String) {
        let text = "refused a \(m.type) message from the server: \(why)"
        ClientLog.log(1, text)
        switch m {
        case .joinChannelResult(let r):
            // The server put us in a channel we cannot use: be in none.
            leaveChannelLocally()
            failRequest(r.requestID, text)
        case .streamAnnounceResult(let r):
            failRequest(r.requestID, text)
            if let c = cond.withLock({ control }) { try? c.send(.streamStop(StreamStop(streamID: r.streamID))) }
        default:
            break
        }
        raiseRefusal(text)
    }

    /// An authenticated message that did not decode: refused; requests waiting for a
    /// message of its type fail (their reply may be the one lost).
    func refuseUndecodable(_ u: UndecodableMessage) {
        ClientLog.log(1, u.description)
        cond.withLock {
            for (rid, t) in expected where t == u.type && replies[rid] == .some(nil) { refusedReplies[rid] = u.description }
            cond.broadcast()
        }
        if u.type == .joinChannelResult { leaveChannelLocally() }
        raiseRefusal(u.description)
    }

    func failRequest(_ rid: UInt32, _ text: String) {
        guard rid != 0 else { return }
        cond.withLock {
            guard replies.keys.contains(rid) else { return }
            refusedReplies[rid] = text
            cond.broadcast()
        }
    }

    func raiseRefusal(_ text: String) {
        guard let t = refusals.admit(text, nowMs: MonotonicClock.milliseconds()) else { return }
        var e = ClientEvent(type: .error)
        e.code = VC_ERR_PROTOCOL
        e.text = t
        events.raise(e)
    }

    /// In no channel any more (a refused join): streams retired (`why`: the reason a
    /// later call naming one gives), remote streams removed.
    func leaveChannelLocally(why: String = "ended when the session left its channel") {
        cond.withLock { channelID = 0; channelName = ""; channelAudio = nil; channelEpoch &+= 1 }
        for s in streams.all { retire(s.streamID, why: why) }
        removeAllRemote()
    }

    /// Removes every received stream, raising TALK_STOP / REMOTE_STREAM_REMOVED (and
    /// forgets those waiting for a slot).
    func removeAllRemote() {
        cond.withLock { unheardRemotes.removeAll() }
        for ssrc in receive.ssrcs {
            let who = remoteIdentity(ssrc: ssrc)
            let gone = receive.remove(ssrc: ssrc)
            output.recorders.sourceRemoved(ssrc: ssrc)
            if gone?.wasTalking == true {
                var e = ClientEvent(type: .talkStop)
                e.ssrc = ssrc; e.userID = gone!.userID; e.text = gone!.username
                e.kind = who?.kind.rawValue ?? 0
                events.raise(e)
            }
            var e = ClientEvent(type: .remoteStreamRemoved)
            e.ssrc = ssrc; e.userID = gone?.userID ?? 0; e.text = gone?.username ?? ""
            e.streamID = who?.streamID ?? 0; e.kind = who?.kind.rawValue ?? 0
            events.raise(e)
        }
    }

    /// The server put this session in a channel: streams published elsewhere are
    /// withdrawn, the old channel's remote streams go away, CHANNEL_JOINED is raised
    /// (before the new channel's REMOTE_STREAM_ADDED, which follow on the wire).
    /// Applied whether or not the request that asked for it is still waiting: a join
    /// that timed out and was applied by the server late is reconciled here (the
    /// host sees CHANNEL_JOINED, and vc_get_channel_audio names the new channel).
    /// `keepStreams`: a reconnect re-joining the same channel keeps its streams.
    func applyJoin(_ r: JoinChannelResult, keepStreams: Bool = false) {
        let (name, stayed) = cond.withLock { () -> (String, Bool) in
            // The channel the session is in already: the server keeps its streams.
            let stayed = channelAudio != nil && channelID == r.channelID
            if !stayed { channelEpoch &+= 1 }
            channelID = r.channelID
            channelAudio = r.audio
            // Another channel: its members replace the last one's (this session's own name stays).
            if !stayed { usernames = usernames.filter { $0.key == hello?.userID } }
            for m in r.members { usernames[m.userID] = m.username }
            channelName = hello?.channels.first(where: { $0.id == r.channelID })?.name ?? ""
            return (channelName, stayed)
        }
        if !keepStreams && !stayed { for s in streams.all { retire(s.streamID, why: "ended when the session moved to another channel") } }
        // The server lists the channel's streams again after its answer: each is added anew.
        removeAllRemote()
        var e = ClientEvent(type: .channelJoined)
        e.channelID = r.channelID
        e.text = name
        events.raise(e)
    }

    /// Hands a reply to the request waiting for it; false when none waits (a late
    /// reply after a timeout, or an unsolicited message), so nothing piles up.
    @discardableResult
    func reply(_ rid: UInt32, _ m: ControlMessage) -> Bool {
        guard rid != 0 else { return false }
        return cond.withLock {
            guard replies.keys.contains(rid) else { return false }
            replies[rid] = m
            replyEpochs[rid] = channelEpoch
            cond.broadcast()
            return true
        }
    }

    /// `state`: the mute / hold state the server sent while the stream waited for a
    /// slot (nil: none), told after REMOTE_STREAM_ADDED.
    func addRemote(_ r: RemoteStream, state: StreamStateUpdate? = nil) {
        let name = cond.withLock { usernames[r.userID] ?? "" }
        guard receive.add(r, username: name) else {
            // Kept to be played later, up to a bound (a hostile server announcing
            // streams without end costs no more than that).
            cond.withLock {
                if unheardRemotes.count < VoiceClient.maxUnheardRemotes { unheardRemotes.append(UnheardRemote(stream: r, state: state)) }
            }
            var e = ClientEvent(type: .error)
            e.code = VC_ERR_NO_MEMORY
            e.ssrc = r.ssrc
            e.text = "all \(receive.slots.count) receive slots are in use; ssrc \(r.ssrc) is not played until one frees "
                + "(raise max_remote_streams)"
            events.raise(e)
            return
        }
        var e = ClientEvent(type: .remoteStreamAdded)
        e.userID = r.userID; e.streamID = r.streamID; e.ssrc = r.ssrc; e.kind = r.kind.rawValue
        e.channels = UInt32(r.audio.channels); e.text = name
        events.raise(e)
        if let u = state { raiseStreamState(u, userID: r.userID, streamID: r.streamID, kind: r.kind, username: name) }
    }

    /// STREAM_STATE_UPDATE: a remote stream's publisher muted, held or resumed it.
    func raiseStreamState(_ u: StreamStateUpdate, userID: UInt32, streamID: UInt32, kind: StreamKind, username: String) {
        var e = ClientEvent(type: .streamStateUpdate)
        e.ssrc = u.ssrc; e.muted = u.muted; e.hold = u.hold
        e.userID = userID; e.streamID = streamID; e.kind = kind.rawValue; e.text = username
        events.raise(e)
    }

    func removeRemote(ssrc: UInt32) {
        let kind = remoteIdentity(ssrc: ssrc)?.kind.rawValue ?? 0
        let removed = receive.remove(ssrc: ssrc)
        output.recorders.sourceRemoved(ssrc: ssrc)
        if let gone = removed, gone.wasTalking {
            var e = ClientEvent(type: .talkStop)
            e.ssrc = ssrc; e.userID = gone.userID; e.text = gone.username; e.kind = kind
            events.raise(e)
        }
    }

    /// A slot is free: the oldest stream still waiting for one is played from now
    /// (REMOTE_STREAM_ADDED), if its user is still a member.
    func takeUpWaitingRemote() {
        while let next = cond.withLock({ unheardRemotes.isEmpty ? nil : unheardRemotes.removeFirst() }) {
            guard cond.withLock({ usernames[next.stream.userID] != nil }) else { continue }
            addRemote(next.stream, state: next.state)
            break
        }
    }

    /// Whether `ssrc` is a remote stream announced while no receive slot was free.
    func isUnheard(ssrc: UInt32) -> Bool { cond.withLock { unheardRemotes.contains { $0.stream.ssrc == ssrc } } }

    /// Keeps the state the server sent for a stream waiting for a slot; false if
    /// `u.ssrc` is not one.
    func keepUnheardState(_ u: StreamStateUpdate) -> Bool {
        cond.withLock {
            guard let i = unheardRemotes.firstIndex(where: { $0.stream.ssrc == u.ssrc }) else { return false }
            unheardRemotes[i].state = u
            return true
        }
    }

    /// Forgets a stream waiting for a slot; false if `ssrc` is not one.
    func forgetUnheard(ssrc: UInt32) -> Bool {
        cond.withLock {
            guard let i = unheardRemotes.firstIndex(where: { $0.stream.ssrc == ssrc }) else { return false }
            unheardRemotes.remove(at: i)
            return true
        }
    }

    /// A remote stream announced while every receive slot was in use, and the last
    /// mute / hold state the server sent for it (nil: none since the announce).
    struct UnheardRemote {
        let stream: RemoteStream
        var state: StreamStateUpdate?
    }

    /// With more than one stream coming in and nothing rendering, how long the UDP
    /// socket is left to collect datagrams after a read.
    static let receiveCoalesceMs: UInt64 = 3

    /// Whether the renderer reads the media socket now (and whether it may: streams
    /// are received and no binding is under way).
    func rendererReadsMedia(_ media: MediaPathState) -> Bool {
        receive.input.rendererMayRead.store(receive.count > 0 && media.binder == nil, ordering: .relaxed)
        return receive.input.rendererReads(nowNs: MonotonicClock.nanoseconds())
    }

    /// Reads what is waiting on the media socket (network thread).
    func drainUDP(_ sock: Socket, media: inout MediaPathState) {
        let server = cond.withLock { serverAddress }
        receive.input.take()
        defer { receive.input.give() }
        let bindingID = receive.input.bindingID
        receive.readHeld { d, h, arrivalNs in
            handleDatagram(d, h, sock: sock, bindingID: bindingID, server: server, media: &media)
        }
    }

    /// Keepalive echoes the renderer read.
    func takeRendererEchoes(media: inout MediaPathState) {
        receive.input.takeEchoes { seq, stamp, atMs in keepaliveEchoed(seq: seq, stamp: stamp, atMs: atMs, media: &media) }
    }

    func keepaliveEchoed(seq: UInt64, stamp: UInt32, atMs: UInt64, media: inout MediaPathState) {
        let rtt = UInt32(truncatingIfNeeded: atMs) &- stamp
        if rtt < MediaPathState.maxRoundTripMs { mediaRttMs.store(max(1, rtt), ordering: .relaxed) }   // 0 means none yet
        media.echoed(seq: seq, nowMs: max(atMs, media.lastEchoMs))
    }

    /// One received datagram other than voice (network thread, reading).
    func handleDatagram(_ d: UnsafeMutableRawBufferPointer, _ h: FrameHeader, sock: Socket, bindingID: UInt32,
                        server: SocketAddress, media: inout MediaPathState) {
        do {
            let now = MonotonicClock.milliseconds()
            switch h.type {
            case .voice:
                return
            case .keepalive:
                guard h.ssrc == bindingID else { return }
                keepaliveEchoed(seq: h.seq, stamp: h.timestamp, atMs: now, media: &media)
            case .udpBinding:
                guard media.binder != nil else { return }
                switch media.binder!.handle(d) {
                case .ignored: return
                case .challenged:
                    _ = try? media.binder!.nextRequest().withUnsafeBytes { try sock.sendTo($0, server) }
                    return
                case .bound: break
                }
                media.binder = nil
                media.lastEchoMs = now
                if !media.voiceConnected {
                    media.voiceConnected = true
                    voiceConnected.store(true, ordering: .relaxed)
                    if let snap = streams.snapshot, snap.pathLost { streams.publish(snap.with(pathLost: false)) }
                    var e = ClientEvent(type: .voiceReconnected)
                    e.text = "media path back after \(now &- media.voiceLostAtMs) ms"
                    events.raise(e)
                    ClientLog.log(2, "voice reconnected: \(e.text)")
                }
            }
        }
    }

    /// Keepalives and the media path's liveness, rebinding, the control connection's
    /// ping and liveness, talk state. Returns why the connection is dead, if it is.
    func timers(conn: ControlConnection, sock: Socket, media: inout MediaPathState, control: inout ControlLiveness) -> LinkEnd? {
        // A control write that failed ended the connection: that is why it ends, not the
        // ping timeout that may also have come due by now.
        if let why = conn.brokenReason {
            events.deliver()
            return .lost(VC_ERR_NETWORK, "the control connection is lost: \(why)")
        }
        let now = MonotonicClock.milliseconds()
        let configured = UInt64(config.keepaliveMs)
        let (bindingID, addr, curEpoch) = cond.withLock { (hello?.bindingID ?? 0, serverAddress, epoch) }
        // Streams active: probe faster, and count the quiet time from when probing began.
        var remote = false
        receive.forEachStream { _, _ in remote = true }
        let active = remote || localStreamCount.load(ordering: .relaxed) > 0
        if active != media.active {
            media.active = active
            if active { media.activeSinceMs = now }
        }
        let period = media.keepalivePeriod(configured)
        media.nextKeepaliveMs = min(media.nextKeepaliveMs, media.lastKeepaliveMs + period)
        if now >= media.nextKeepaliveMs {
            media.nextKeepaliveMs = now + period
            media.lastKeepaliveMs = now
            let ka = FrameHeader(type: .keepalive, ssrc: bindingID, seq: media.keepaliveSeq, timestamp: UInt32(truncatingIfNeeded: now))
            keepalivesLost.wrappingAdd(media.sent(seq: media.keepaliveSeq, nowMs: now), ordering: .relaxed)
            keepalivesSent.wrappingAdd(1, ordering: .relaxed)
            media.keepaliveSeq += 1
            ka.write(to: keepaliveScratch)   // no allocation: sent every 0.5 s while streams are active
            _ = try? sock.sendTo(UnsafeRawBufferPointer(keepaliveScratch), addr)
        }
        keepalivesLost.wrappingAdd(media.expire(nowMs: now), ordering: .relaxed)
        // No sign of life for too long: the media path is gone. Ask for new keys and rebind.
        if media.voiceConnected && now &- media.lastSignMs > media.lostAfter(configured) {
            media.voiceConnected = false
            voiceConnected.store(false, ordering: .relaxed)
            // Frames go on being sent (the path may work one way), counted as most
            // likely unheard until the path is back.
            if let snap = streams.snapshot, !snap.pathLost { streams.publish(snap.with(pathLost: true)) }
            media.voiceLostAtMs = now
            var e = ClientEvent(type: .voiceDisconnected)
            e.code = VC_ERR_TIMEOUT
            e.text = "no keepalive echo from the server for \(now &- media.lastEchoMs) ms; rebinding"
            events.raise(e)
            ClientLog.log(1, "voice disconnected: \(e.text)")
        }
        // One Rebind per loss (TCP delivers it; a control connection that stalls is
        // caught by its own liveness), then bindings every 0.1 s until one is answered.
        if !media.voiceConnected && media.binder == nil && media.rebindRequestedMs == nil {
            media.rebindRequestedMs = now
            media.rebindEpoch = curEpoch &+ 1
            try? conn.send(.rebind(Rebind(epoch: media.rebindEpoch)))
        }
        if media.binder != nil, now >= media.nextBindMs {
            media.nextBindMs = now + MediaPathState.rebindRetryMs
            _ = try? media.binder!.nextRequest().withUnsafeBytes { try sock.sendTo($0, addr) }
        }
        // The control connection: a Ping every keepalive_ms; dead when nothing came for the timeout.
        if now >= control.nextPingMs {
            control.nextPingMs = now + configured
            try? conn.send(.ping(Ping(timestamp: now)))
        }
        let silentMs = now &- control.lastHeardMs
        if silentMs > ControlLiveness.timeoutMs(keepaliveMs: configured) {
            return .lost(VC_ERR_TIMEOUT, "ping timeout: nothing came on the control connection for \(silentMs) ms")
        }
        updateTalkState(now: now)
        reportLosses(conn, media: &media, now: now)
        return nil
    }

    /// Talk state looks at most this often (playout moves in 20 ms blocks: looking
    /// more often finds nothing new).
    static let talkLookMs: UInt64 = 20
    /// The mix counts as playing while it rendered this recently; talk state follows
    /// arrivals otherwise, looked at this often while anyone talks.
    static let mixPlayingMs: UInt64 = 200
    static let talkArrivalLookMs: UInt64 = 50

    /// When updateTalkState must look next (ms; .max: nothing to time). While the mix
    /// plays, the renderer wakes this thread when a talkspurt starts or ends, so what is
    /// left to time is an edge not looked at yet (looks are 20 ms apart), each ended
    /// talkspurt's hangover and, unless the renderer reads the media socket (its lease
    /// then wakes this thread when the renders stop), the mix stopping (talk state then
    /// follows arrivals). While nothing plays: every 50 ms while anyone talks.
    func nextTalkLookMs(byRenderer: Bool) -> UInt64 {
        let now = MonotonicClock.milliseconds()
        let hang = UInt64(config.talkHangoverMs)
        let lastRender = output.lastRenderMs.load(ordering: .relaxed)
        let playing = lastRender + VoiceClient.mixPlayingMs > now
        let soonest = talkCheckedMs + VoiceClient.talkLookMs
        var t = UInt64.max
        receive.forEachStream { _, s in
            guard playing else {
                if s.talking { t = min(t, now + VoiceClient.talkArrivalLookMs) }
                return
            }
            let started = s.spurtsStarted.load(ordering: .acquiring)
            let ended = s.spurtsEnded.load(ordering: .acquiring)
            if started != s.seenStarted || ended != s.seenEnded {
                t = min(t, soonest)
            } else if s.talking {
                if ended == started { t = min(t, max(soonest, s.spurtEndNs.load(ordering: .relaxed) / 1_000_000 + hang)) }
                if !byRenderer { t = min(t, lastRender + VoiceClient.mixPlayingMs) }
            }
        }
        return t
    }

    /// Talk state follows what is played: TALK_START when the first frame of a
    /// talkspurt was played, TALK_STOP the hangover after the last one was. While
    /// nothing plays the mix (pull mode without pulls), it follows arrivals instead.
    func updateTalkState(now: UInt64) {
        guard now >= talkCheckedMs + VoiceClient.talkLookMs else { return }
        talkCheckedMs = now
        let hang = UInt64(config.talkHangoverMs)
        let playing = output.lastRenderMs.load(ordering: .relaxed) + VoiceClient.mixPlayingMs > now
        receive.forEachStream { ssrc, s in
            // The counts are the renderer's (atomics), `talking` is written only here:
            // the slot's lock is taken only to change it (host threads read it under
            // the lock), never to look.
            let was = s.talking
            var talking = was
            var started = false, stopped = false
            if playing {
                let count = s.spurtsStarted.load(ordering: .acquiring)
                if count != s.seenStarted {
                    s.seenStarted = count
                    if !talking { talking = true; started = true }
                }
                s.seenEnded = s.spurtsEnded.load(ordering: .acquiring)
                // A talkspurt begun and ended (hangover included) since the last look
                // is reported as both.
                if talking && s.seenEnded == s.seenStarted && now >= s.spurtEndNs.load(ordering: .relaxed) / 1_000_000 + hang {
                    talking = false
                    stopped = true
                }
            } else {
                s.seenStarted = s.spurtsStarted.load(ordering: .acquiring)
                s.seenEnded = s.spurtsEnded.load(ordering: .acquiring)
                let last = s.lastVoiceFrameMs.load(ordering: .relaxed)
                let recent = last != 0 && now < last + hang
                if recent && !talking { talking = true; started = true }
                if !recent && talking { talking = false; stopped = true }
            }
            if talking != was { s.lock.withLock { s.talking = talking } }
            func raise(_ type: vc_event_type) {
                var e = ClientEvent(type: type)
                e.ssrc = ssrc; e.userID = s.userID
                e.text = s.username; e.kind = s.kind.rawValue
                events.raise(e)
            }
            if started { raise(.talkStart) }
            if stopped { raise(.talkStop) }
        }
    }
}
