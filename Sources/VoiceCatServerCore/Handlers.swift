// Control message handling: session setup, channels, streams, rebind, server mute.
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
            hello(c, h)
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
        case .streamStateUpdate(let u):
            guard let st = streamsBySSRC[u.ssrc], st.owner === s else {
                send(c, .error(ErrorMessage(code: .notFound, message: "ssrc \(u.ssrc) is not one of your streams")))
                return
            }
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
            if let a = s.udpAddress { sessionsByAddress[a] = nil }
            s.udpAddress = nil
            send(c, .rebindResult(RebindResult(epoch: epoch)))
        case .setServerMute(let m):
            setServerMute(s, m)
        case .hello:
            send(c, .error(ErrorMessage(code: .wrongState, message: "already authenticated")))
        default:
            send(c, .error(ErrorMessage(code: .badRequest, message: "\(msg.type) is not a client request")))
        }
    }

    func hello(_ c: Connection, _ h: Hello) {
        func refuse(_ code: ProtocolErrorCode, _ text: String) {
            counters.authRejected += 1
            send(c, .error(ErrorMessage(code: code, message: text)))
            closeAfterFlush(c, reason: text)
        }
        guard h.protoVersion == UInt32(ProtocolVersion.current) else {
            return refuse(.versionMismatch, "protocol version \(h.protoVersion) is not supported (server speaks \(ProtocolVersion.current))")
        }
        if let pw = config.password, !pw.isEmpty {
            guard Sodium.equal(Array(h.password.utf8), Array(pw.utf8)) else { return refuse(.authFailed, "wrong server password") }
        }
        let name = h.username
        if let p = NameRules.problem(name, what: "username") {
            return refuse(.badRequest, "\(p): a username is 1 to 64 bytes of UTF-8 without control characters")
        }
        guard sessionsByUsername[name] == nil else { return refuse(.usernameTaken, "username \(name) is already connected") }
        guard sessionsByUsername.count < config.maxUsers else { return refuse(.serverFull, "server is full (\(config.maxUsers) users)") }
        var binding: UInt32
        repeat { binding = Sodium.randomUInt32() } while binding == 0 || sessionsByBinding[binding] != nil
        var sid: UInt64 = 0
        Sodium.randomBytes(8).forEach { sid = sid << 8 | UInt64($0) }
        let s = Session(id: sid, userID: nextUserID, bindingID: binding, username: name, keys: c.keys!, connection: c,
                        now: MonotonicClock.milliseconds())
        nextUserID += 1
        c.session = s
        c.phase = .active
        sessionsByUsername[name] = s
        sessionsByUserID[s.userID] = s
        sessionsByBinding[binding] = s
        counters.sessionsOpened += 1
        counters.sessionsActive += 1
        log("session \(name) (user \(s.userID)) from \(c.peer)")
        send(c, .helloResult(HelloResult(sessionID: sid, userID: s.userID, bindingID: binding, serverName: config.serverName,
                                         channels: channels.map { ChannelInfo(id: $0.id, name: $0.name, audio: $0.audio) },
                                         maxDatagramBytes: UInt32(clamping: config.maxDatagramBytes))))
    }

    func broadcast(_ ch: Channel?, except: Session?, _ m: ControlMessage) {
        guard let ch else { return }
        // A send can fail and detach a member mid-loop; skip members no longer attached.
        for member in ch.members where member !== except && member.connection.session === member {
            send(member.connection, m)
        }
    }

    func remoteStream(_ st: Stream) -> RemoteStream {
        RemoteStream(userID: st.owner.userID, streamID: st.streamID, ssrc: st.ssrc, kind: st.kind,
                     audio: st.owner.channel?.audio ?? AudioConfig())
    }

    func leaveChannel(_ s: Session) {
        guard let ch = s.channel else { return }
        ch.members.removeAll { $0 === s }
        s.channel = nil
        for st in s.streams.values.sorted(by: { $0.ssrc < $1.ssrc }) {
            broadcast(ch, except: s, .remoteStreamRemoved(RemoteStreamRemoved(userID: s.userID, streamID: st.streamID, ssrc: st.ssrc)))
        }
        broadcast(ch, except: s, .userLeft(UserLeft(userID: s.userID, channelID: ch.id)))
    }

    func join(_ s: Session, name: String, requestID: UInt32) {
        guard let ch = channels.first(where: { $0.name == name }) else {
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
            s.channel = ch
            broadcast(ch, except: nil, .userJoined(UserJoined(member: s.memberInfo, channelID: ch.id)))
            ch.members.append(s)
        }
        let others = ch.members.filter { $0 !== s }
        send(s.connection, .joinChannelResult(JoinChannelResult(channelID: ch.id, audio: ch.audio,
                                                                members: others.map { $0.memberInfo }, requestID: requestID)))
        for o in others {
            for st in o.streams.values.sorted(by: { $0.ssrc < $1.ssrc }) { send(s.connection, .remoteStreamAdded(remoteStream(st))) }
            if o.serverMuted || o.deafened { send(s.connection, .serverMuteState(ServerMuteState(userID: o.userID, muted: o.serverMuted, deafened: o.deafened))) }
        }
    }

    func announce(_ s: Session, _ a: StreamAnnounce) {
        let rid = a.requestID
        func refuse(_ code: ProtocolErrorCode, _ text: String) {
            send(s.connection, .error(ErrorMessage(code: code, message: text, requestID: rid)))
        }
        guard let ch = s.channel else { return refuse(.wrongState, "join a channel before announcing a stream") }
        guard s.streams[a.streamID] == nil else { return refuse(.badRequest, "stream id \(a.streamID) is already announced") }
        guard s.streams.count < config.maxStreamsPerUser else {
            return refuse(.limitReached, "at most \(config.maxStreamsPerUser) streams per user")
        }
        guard a.channels == 1 || a.channels == 2 else { return refuse(.badRequest, "channels must be 1 or 2, got \(a.channels)") }
        var ssrc = nextSSRC
        while ssrc == 0 || streamsBySSRC[ssrc] != nil || sessionsByBinding[ssrc] != nil { ssrc &+= 1 }
        nextSSRC = ssrc &+ 1
        let st = Stream(streamID: a.streamID, ssrc: ssrc, kind: a.kind, channels: a.channels, owner: s,
                        rate: config.maxPacketsPerSecond, now: MonotonicClock.milliseconds())
        s.streams[a.streamID] = st
        streamsBySSRC[ssrc] = st
        send(s.connection, .streamAnnounceResult(StreamAnnounceResult(streamID: a.streamID, ssrc: ssrc, effectiveAudio: ch.audio,
                                                                      requestID: rid)))
        broadcast(ch, except: s, .remoteStreamAdded(remoteStream(st)))
    }

    func removeStream(_ st: Stream) {
        let s = st.owner
        s.streams[st.streamID] = nil
        streamsBySSRC[st.ssrc] = nil
        broadcast(s.channel, except: s, .remoteStreamRemoved(RemoteStreamRemoved(userID: s.userID, streamID: st.streamID, ssrc: st.ssrc)))
    }

    func setServerMute(_ s: Session, _ m: SetServerMute) {
        guard let admin = config.adminPassword, !admin.isEmpty,
              Sodium.equal(Array(m.adminPassword.utf8), Array(admin.utf8)) else {
            send(s.connection, .error(ErrorMessage(code: .forbidden, message: "server mute needs the admin password", requestID: m.requestID)))
            return
        }
        guard let target = sessionsByUserID[m.userID] else {
            send(s.connection, .error(ErrorMessage(code: .notFound, message: "no user \(m.userID)", requestID: m.requestID)))
            return
        }
        target.serverMuted = m.muted
        target.deafened = m.deafened
        let state = ControlMessage.serverMuteState(ServerMuteState(userID: target.userID, muted: m.muted, deafened: m.deafened))
        if let ch = target.channel { broadcast(ch, except: nil, state) } else { send(target.connection, state) }
        if target.channel == nil || target.channel !== s.channel, target !== s { send(s.connection, state) }
    }
}
