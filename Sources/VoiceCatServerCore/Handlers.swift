// Control message handling: session setup, channels, streams, rebind, server mute; lists
// split over frames; membership changes coalesced per loop turn.
import VoiceCatProtocol
import VoiceCatSystem

extension Server {
    func handle(_ c: Connection, _ msg: ControlMessage) {
        guard let s = c.session else {
            guard case .hello(let h) = msg else {
                counters.controlProtocolErrors += 1
                send(c, .error(ErrorMessage(code: .wrongState, message: "the first message must be Hello")))
                closeAfterFlush(c, reason: "sent \(msg.type) before Hello")
                return
            }
            hello(c, h, held: false)
            return
        }
        switch msg {
        case .ping(let p):
            send(c, .pong(Pong(timestamp: p.timestamp)))
        case .pong:
            break
        case .joinChannel(let j):
            join(s, name: j.name, requestID: j.requestID)
        case .streamAnnounce(let a):
            announce(s, a)
        case .streamStop(let stop):
            let sid = stop.streamID
            guard let st = s.streams[sid] else {
                send(c, .error(ErrorMessage(code: .notFound, message: "no stream \(sid) to stop")))
                return
            }
            removeStream(st)
            notePresence(s)
        case .streamStateUpdate(let u):
            guard let st = streamsBySSRC[u.ssrc], st.owner === s else {
                send(c, .error(ErrorMessage(code: .notFound, message: "ssrc \(u.ssrc) is not one of your streams")))
                return
            }
            // Kept for members who join later and for the roster.
            st.muted = u.muted
            st.hold = u.hold
            notePresence(s)
            broadcast(s.channel, except: s, .streamStateUpdate(u))
        case .rebind(let r):
            let epoch = r.epoch
            guard epoch > s.epoch else {
                send(c, .error(ErrorMessage(code: .badRequest, message: "rebind epoch \(epoch) must exceed the current \(s.epoch)")))
                return
            }
            s.epoch = epoch
            s.media = s.keys.media(epoch: epoch)
            s.bind = s.keys.bind(epoch: epoch)
            s.bindReplay = ReplayWindow()
            if let a = s.udpAddress, sessionsByAddress[a] === s { sessionsByAddress[a] = nil }
            s.udpAddress = nil
            send(c, .rebindResult(RebindResult(epoch: epoch)))
        case .setServerMute(let m):
            setServerMute(s, m, held: false)
        case .kickUser(let k):
            kick(s, k, held: false)
        case .receiverReport(let r):
            receiverReport(s, r)
        case .hello:
            send(c, .error(ErrorMessage(code: .wrongState, message: "already authenticated")))
        default:
            send(c, .error(ErrorMessage(code: .badRequest, message: "\(msg.type) is not a client request")))
        }
    }

    /// `held`: the request already waited out its address's backoff.
    func hello(_ c: Connection, _ h: Hello, held: Bool) {
        func refuse(_ code: ProtocolErrorCode, _ text: String) {
            counters.authRejected += 1
            send(c, .error(ErrorMessage(code: code, message: text)))
            closeAfterFlush(c, reason: text)
        }
        if !held && holdForBackoff(c, .hello(h), serverPasswordFailures) { return }
        guard h.protoVersion == UInt32(ProtocolVersion.current) else {
            return refuse(.versionMismatch, "protocol version \(h.protoVersion) is not supported (server speaks \(ProtocolVersion.current))")
        }
        if let pw = live.password, !pw.isEmpty {
            guard Sodium.equal(Array(h.password.utf8), Array(pw.utf8)) else {
                return wrongPassword(c, admin: false, reply: ErrorMessage(code: .authFailed, message: "wrong server password"))
            }
            serverPasswordFailures.clear(c.peer.host)
        }
        let name = h.username
        if let p = NameRules.problem(name, what: "username") {
            return refuse(.badRequest, "\(p): a username is 1 to 64 bytes of UTF-8 without control characters")
        }
        if let old = sessionsByUsername[name] {
            // The same client reconnecting (its old connection died without the server
            // noticing, e.g. a path that stopped carrying TCP): it names the old session's
            // resume token, and that session ends now instead of when the reaper finds it
            // silent. Anyone else is refused the name.
            guard h.resumeToken.count == Session.resumeTokenBytes, Sodium.equal(h.resumeToken, old.resumeToken) else {
                return refuse(.usernameTaken, "username \(name) is already connected")
            }
            counters.sessionsResumed += 1
            close(old.connection, reason: "replaced by a new connection of the same client (from \(c.peer), with its resume token)")
        }
        guard sessionsByUsername.count < live.maxUsers else { return refuse(.serverFull, "server is full (\(live.maxUsers) users)") }
        var binding: UInt32
        repeat { binding = Sodium.randomUInt32() } while binding == 0 || sessionsByBinding[binding] != nil
        var sid: UInt64 = 0
        Sodium.randomBytes(8).forEach { sid = sid << 8 | UInt64($0) }
        let s = Session(id: sid, userID: nextUserID, bindingID: binding, username: name, keys: c.keys!, connection: c, now: now)
        nextUserID += 1
        c.session = s
        c.phase = .active
        forgetUnauthenticated(c)
        sessionsByUsername[name] = s
        sessionsByUserID[s.userID] = s
        sessionsByBinding[binding] = s
        counters.sessionsOpened += 1
        counters.sessionsActive += 1
        log("session \(name) (user \(s.userID)) from \(c.peer)")
        notePresence(s)
        let serverName = live.serverName
        let limit = UInt32(clamping: live.maxDatagramBytes)
        let roster = h.presence
        sendList(c, channelList, 0..<channelList.count,
                 first: { more in
                     ControlMessage.helloResult(HelloResult(sessionID: sid, userID: s.userID, bindingID: binding, serverName: serverName,
                                                            channels: [], maxDatagramBytes: limit, moreChannels: more,
                                                            presence: roster, resumeToken: s.resumeToken)).encode()
                 },
                 next: { more in ControlMessage.channelList(ChannelList(channels: [], more: more)).encode() })
        if roster { subscribePresence(s) }
        schedule(c)
    }

    // MARK: lists

    /// Sends `entries[range]` as a list message `first(more)` followed by as many
    /// `next(more)` as needed, each within one frame (`more`: another part follows).
    /// Pending membership changes of the session go out first.
    func sendList(_ c: Connection, _ entries: EntryList, _ range: Range<Int>,
                  first: (Bool) -> [UInt8], next: (Bool) -> [UInt8]) {
        if let s = c.session { deliverNotices(to: s) }
        sendEntries(c, entries, range, first: first, next: next)
    }

    func sendEntries(_ c: Connection, _ entries: EntryList, _ range: Range<Int>,
                     first: (Bool) -> [UInt8], next: (Bool) -> [UInt8]) {
        var start = range.lowerBound
        var isFirst = true
        repeat {
            let head = isFirst ? first(true) : next(true)
            let end = start < range.upperBound
                ? entries.pageEnd(from: start, upTo: range.upperBound, budget: ControlFraming.maxPlaintext - head.count)
                : start
            let more = end < range.upperBound
            let h = more ? head : (isFirst ? first(false) : next(false))
            let length = h.count + entries.size(start..<end)
            if length <= scratch.count {
                h.withUnsafeBytes { scratch.baseAddress!.copyMemory(from: $0.baseAddress!, byteCount: h.count) }
                entries.withBytes(start..<end) { e in
                    if e.count > 0 { (scratch.baseAddress! + h.count).copyMemory(from: e.baseAddress!, byteCount: e.count) }
                }
                seal(c, UnsafeRawBufferPointer(rebasing: scratch[0..<length]))
            } else {
                counters.controlOversize += 1  // one entry larger than a frame: cannot happen with validated names
            }
            if !isFirst { counters.listPartsSent += 1 }
            isFirst = false
            start = end
        } while start < range.upperBound && !c.closed
    }

    func ensureMemberList(_ ch: Channel) {
        guard !ch.memberListValid else { return }
        ch.memberList.removeAll()
        for m in ch.members { ch.memberList.append(m.memberEntry) }
        ch.memberListValid = true
    }

    func sendMemberList(_ s: Session, _ ch: Channel, _ entries: EntryList, requestID: UInt32) {
        let id = ch.id, audio = ch.audio
        sendList(s.connection, entries, 0..<entries.count,
                 first: { more in
                     ControlMessage.joinChannelResult(JoinChannelResult(channelID: id, audio: audio, members: [], requestID: requestID,
                                                                        moreMembers: more)).encode()
                 },
                 next: { more in ControlMessage.memberList(MemberList(channelID: id, members: [], requestID: requestID, more: more)).encode() })
    }

    // MARK: membership changes, coalesced per turn

    /// Tells `s` the pending membership changes of its channel it has not been told yet.
    /// Roster changes pending for `s` go first.
    func deliverNotices(to s: Session) {
        deliverPresence(to: s)
        guard let ch = s.channel, let n = ch.notice,
              let untold = s.noticeCursor.untold(count: n.entries.count, generation: ch.noticeGeneration) else { return }
        let from = untold.lowerBound, count = untold.upperBound
        let c = s.connection
        guard !c.closed, c.phase == .active else { return }
        if count - from == 1 {
            let m: ControlMessage = n.kind == .joined
                ? .userJoined(UserJoined(member: n.members[from], channelID: ch.id))
                : .userLeft(UserLeft(userID: n.userIDs[from], channelID: ch.id))
            m.encode().withUnsafeBytes { seal(c, $0) }
            return
        }
        let head = n.kind == .joined
            ? ControlMessage.usersJoined(UsersJoined(channelID: ch.id, members: [])).encode()
            : ControlMessage.usersLeft(UsersLeft(channelID: ch.id, userIDs: [])).encode()
        sendEntries(c, n.entries, from..<count, first: { _ in head }, next: { _ in head })
    }

    /// Tells every member of `ch` its pending changes and starts a new generation.
    func flushNotices(_ ch: Channel) {
        guard ch.notice != nil else { return }
        for m in ch.members { deliverNotices(to: m) }
        ch.notice = nil
        ch.noticeGeneration &+= 1
    }

    func pendingNotice(_ ch: Channel, _ kind: PendingNotice.Kind) {
        if let n = ch.notice, n.kind != kind { flushNotices(ch) }
        if ch.notice == nil {
            ch.notice = PendingNotice(kind: kind)
            noticeChannels.append(ch)
        }
    }

    /// `s` joins `ch` (before it is added to the members): the others hear of it at the end
    /// of the turn; `s` itself is counted as told.
    func noteJoined(_ ch: Channel, _ s: Session) {
        pendingNotice(ch, .joined)
        ch.notice!.entries.append(s.memberEntry)
        ch.notice!.members.append(s.memberInfo)
        s.noticeCursor.skip(count: ch.notice!.entries.count, generation: ch.noticeGeneration)
    }

    /// `s` has left `ch` (already removed from the members).
    func noteLeft(_ ch: Channel, _ s: Session) {
        pendingNotice(ch, .left)
        ch.notice!.entries.append(UsersLeft.encodedEntry(s.userID))
        ch.notice!.userIDs.append(s.userID)
    }

    /// Sends `m` to every attached member of `ch` but `except` (encoded once).
    func broadcast(_ ch: Channel?, except: Session?, _ m: ControlMessage) {
        guard let ch else { return }
        let plain = m.encode()
        plain.withUnsafeBytes { p in
            // A send can fail and detach a member mid-loop; skip members no longer attached.
            for member in ch.members where member !== except && member.connection.session === member {
                sendPlaintext(member.connection, p)
            }
        }
    }

    // MARK: channels and streams

    func remoteStream(_ st: Stream) -> RemoteStream {
        RemoteStream(userID: st.owner.userID, streamID: st.streamID, ssrc: st.ssrc, kind: st.kind,
                     audio: st.owner.channel?.audio ?? AudioConfig())
    }

    func leaveChannel(_ s: Session) {
        guard let ch = s.channel else { return }
        let i = s.memberIndex
        let last = ch.members.removeLast()
        if last !== s {
            ch.members[i] = last
            last.memberIndex = i
        }
        ch.memberListValid = false
        if s.serverMuted || s.deafened { ch.flagged.removeAll { $0 === s } }
        if !s.streams.isEmpty { ch.streams.removeAll { $0.owner === s } }
        forgetLossReports(of: s, in: ch)
        s.channel = nil
        guard !stopping else { return }
        for st in s.streams.values.sorted(by: { $0.ssrc < $1.ssrc }) {
            broadcast(ch, except: s, .remoteStreamRemoved(RemoteStreamRemoved(userID: s.userID, streamID: st.streamID, ssrc: st.ssrc)))
        }
        noteLeft(ch, s)
    }

    func join(_ s: Session, name: String, requestID: UInt32) {
        // A name no channel can have is refused without echoing it: a 64 KB one made
        // an answer too large to send (no reply, a log line per request).
        if let problem = NameRules.problem(name, what: "the channel name") {
            send(s.connection, .error(ErrorMessage(code: .badRequest, message: problem, requestID: requestID)))
            return
        }
        guard let ch = channelsByName[name] else {
            send(s.connection, .error(ErrorMessage(code: .notFound, message: "no channel named \(name)", requestID: requestID)))
            return
        }
        if s.channel !== ch {
            leaveChannel(s)
            // Streams announced for another channel's AudioConfig cannot be carried over.
            for st in Array(s.streams.values).sorted(by: { $0.ssrc < $1.ssrc }) {
                removeStream(st)
                send(s.connection, .remoteStreamRemoved(RemoteStreamRemoved(userID: s.userID, streamID: st.streamID, ssrc: st.ssrc)))
            }
            ensureMemberList(ch)
            s.channel = ch
            notePresence(s)
            noteJoined(ch, s)
            sendMemberList(s, ch, ch.memberList, requestID: requestID)
            s.memberIndex = ch.members.count
            ch.members.append(s)
            ch.memberList.append(s.memberEntry)
            if s.serverMuted || s.deafened { ch.flagged.append(s) }
        } else {
            var others = EntryList()
            for m in ch.members where m !== s { others.append(m.memberEntry) }
            sendMemberList(s, ch, others, requestID: requestID)
        }
        for st in ch.streams where st.owner !== s {
            send(s.connection, .remoteStreamAdded(remoteStream(st)))
            if st.muted || st.hold { send(s.connection, .streamStateUpdate(StreamStateUpdate(ssrc: st.ssrc, muted: st.muted, hold: st.hold))) }
        }
        for o in ch.flagged where o !== s {
            send(s.connection, .serverMuteState(ServerMuteState(userID: o.userID, muted: o.serverMuted, deafened: o.deafened)))
        }
    }

    func announce(_ s: Session, _ a: StreamAnnounce) {
        let rid = a.requestID
        func refuse(_ code: ProtocolErrorCode, _ text: String) {
            send(s.connection, .error(ErrorMessage(code: code, message: text, requestID: rid)))
        }
        guard let ch = s.channel else { return refuse(.wrongState, "join a channel before announcing a stream") }
        guard s.streams[a.streamID] == nil else { return refuse(.badRequest, "stream id \(a.streamID) is already announced") }
        guard s.streams.count < live.maxStreamsPerUser else {
            return refuse(.limitReached, "at most \(live.maxStreamsPerUser) streams per user")
        }
        guard a.channels == 1 || a.channels == 2 else { return refuse(.badRequest, "channels must be 1 or 2, got \(a.channels)") }
        var ssrc = nextSSRC
        while ssrc == 0 || streamsBySSRC[ssrc] != nil || sessionsByBinding[ssrc] != nil { ssrc &+= 1 }
        nextSSRC = ssrc &+ 1
        let st = Stream(streamID: a.streamID, ssrc: ssrc, kind: a.kind, channels: a.channels, owner: s, audio: ch.audio,
                        rate: live.maxPacketsPerSecond, bitrateFactor: live.maxStreamBitrateFactor, now: now)
        s.streams[a.streamID] = st
        streamsBySSRC[ssrc] = st
        ch.streams.append(st)
        notePresence(s)
        send(s.connection, .streamAnnounceResult(StreamAnnounceResult(streamID: a.streamID, ssrc: ssrc, effectiveAudio: ch.audio,
                                                                      requestID: rid)))
        broadcast(ch, except: s, .remoteStreamAdded(remoteStream(st)))
    }

    func removeStream(_ st: Stream) {
        let s = st.owner
        s.streams[st.streamID] = nil
        streamsBySSRC[st.ssrc] = nil
        s.endedStreams.note(st.ssrc, nowMs: now)
        s.channel?.streams.removeAll { $0 === st }
        broadcast(s.channel, except: s, .remoteStreamRemoved(RemoteStreamRemoved(userID: s.userID, streamID: st.streamID, ssrc: st.ssrc)))
    }

    /// The session an admin request (`msg`) names, once its address's backoff hold is over
    /// (`held`: it was) and its admin password checked out; nil when the request was held,
    /// or refused and answered (a wrong password, remembered for the backoff; a server
    /// without an admin password; no such user).
    func adminTarget(_ s: Session, _ msg: ControlMessage, userID: UInt32, password: String, requestID: UInt32,
                     held: Bool, what: String) -> Session? {
        let c = s.connection
        if !held && holdForBackoff(c, msg, adminPasswordFailures) { return nil }
        guard let admin = live.adminPassword, !admin.isEmpty, !password.isEmpty else {
            // Nothing to judge (admin requests off, or no password given): refused, and
            // not taken for a guess, so a user who tries a few times is not disconnected
            // for "wrong passwords" and their address is not slowed down. Say which.
            let why = live.adminPassword?.isEmpty ?? true
                ? "\(what) needs the admin password, and this server has none set (admin requests are off)"
                : "\(what) needs the admin password (none was given)"
            counters.adminRejected += 1
            send(c, .error(ErrorMessage(code: .forbidden, message: why, requestID: requestID)))
            return nil
        }
        guard Sodium.equal(Array(password.utf8), Array(admin.utf8)) else {
            wrongPassword(c, admin: true, reply: ErrorMessage(code: .forbidden, message: "\(what) needs the admin password (the one given is wrong)",
                                                               requestID: requestID))
            return nil
        }
        adminPasswordFailures.clear(c.peer.host)
        guard let target = sessionsByUserID[userID] else {
            send(c, .error(ErrorMessage(code: .notFound, message: "no user \(userID)", requestID: requestID)))
            return nil
        }
        return target
    }

    /// `held`: the request already waited out its address's backoff.
    func setServerMute(_ s: Session, _ m: SetServerMute, held: Bool) {
        let c = s.connection
        guard let target = adminTarget(s, .setServerMute(m), userID: m.userID, password: m.adminPassword, requestID: m.requestID,
                                       held: held, what: "server mute") else { return }
        let wasFlagged = target.serverMuted || target.deafened
        target.serverMuted = m.muted
        target.deafened = m.deafened
        target.refreshMemberEntry()
        if let ch = target.channel {
            ch.memberListValid = false
            let flagged = m.muted || m.deafened
            if flagged && !wasFlagged { ch.flagged.append(target) }
            if !flagged && wasFlagged { ch.flagged.removeAll { $0 === target } }
        }
        notePresence(target)
        let state = ControlMessage.serverMuteState(ServerMuteState(userID: target.userID, muted: m.muted, deafened: m.deafened))
        if let ch = target.channel { broadcast(ch, except: nil, state) } else { send(target.connection, state) }
        if target.channel == nil || target.channel !== s.channel, target !== s { send(c, state) }
        send(c, .adminResult(AdminResult(requestID: m.requestID, userID: target.userID)))
    }

    /// Removes a session (KickUser): it is told why, then closed; the admin gets AdminResult.
    /// `held`: the request already waited out its address's backoff.
    func kick(_ s: Session, _ k: KickUser, held: Bool) {
        let c = s.connection
        guard let target = adminTarget(s, .kickUser(k), userID: k.userID, password: k.adminPassword, requestID: k.requestID,
                                       held: held, what: "kicking a user") else { return }
        guard target !== s else {
            send(c, .error(ErrorMessage(code: .badRequest, message: "a session cannot kick itself", requestID: k.requestID)))
            return
        }
        let reason = ServerMessageLimits.sanitized(k.reason, maxBytes: 256)
        let text = "kicked by \(s.username)" + (reason.isEmpty ? "" : ": \(reason)")
        counters.kicks += 1
        send(target.connection, .error(ErrorMessage(code: .kicked, message: text)))
        closeAfterFlush(target.connection, reason: text)
        send(c, .adminResult(AdminResult(requestID: k.requestID, userID: k.userID)))
    }
}
