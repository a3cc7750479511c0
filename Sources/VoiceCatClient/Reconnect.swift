// Automatic reconnect (vc_client_config.auto_reconnect), on the network thread.
//
// When the control connection is lost (closed, failed, or silent past its ping
// timeout) the session enters the gap: the send path is unpublished (feeding goes
// on as usual and each frame that comes due is dropped, not held for later; no
// error is raised; the stream keeps its id), the old sockets close, every remote stream is removed, and
// VC_EVENT_RECONNECTING is raised once. Then connects are tried with backoff
// (0.25 s doubling to 5 s), each insisting on the identity the first connect
// verified. Once one succeeds, the channel is joined again and each local stream
// is announced again under its stream id; the server's new ssrc is swapped into
// the stream under its slot lock and the send path published again;
// VC_EVENT_RECONNECTED follows. A refusal that retrying cannot change (wrong
// password, changed fingerprint, version) ends the session instead.
import VoiceCatABI
import VoiceCatProtocol
import VoiceCatSystem

extension VoiceClient {
    static let reconnectFirstDelayMs: UInt64 = 250
    static let reconnectMaxDelayMs: UInt64 = 5000
    static let reconnectAttemptMs: UInt64 = 5000

    /// Reconnects after the connection was lost. Returns the new link, or nil when the
    /// host ended the session or reconnecting cannot succeed (`lastReconnectFailure`).
    func reconnect(after code: Int32, _ text: String) -> Link? {
        streams.publish(nil)
        voiceConnected.store(false, ordering: .relaxed)
        removeAllRemote()
        // Nothing is sent in the gap: an open gate closes (GATE_CLOSED, as when the
        // session ends) and opens again with the first frame sent after it.
        for s in streams.all { s.slot.lock.withLock { s.abandon() } }
        receive.forgetLateness()   // the new session's path may not be the old one's
        guard case (var target, let channel)? = cond.withLock({ () -> (ConnectTarget, String)? in
            guard !stopNetwork, let t = target else { return nil }
            phase = .reconnecting
            control?.close(); control = nil
            udp?.close(); udp = nil
            cond.broadcast()   // requests waiting end ("the connection ended")
            return (t, channelName)
        }) else { return nil }
        var e = ClientEvent(type: .reconnecting)
        e.code = code
        e.text = text
        events.raise(e)
        events.deliver()

        var delay = VoiceClient.reconnectFirstDelayMs
        var attempt = 0
        while true {
            if cond.withLock({ stopNetwork }) { return nil }
            attempt += 1
            var link: Link? = nil
            // What the gap keeps of the channel, put back if this attempt fails after
            // its join was applied (the next attempt compares the channel's audio).
            let kept = cond.withLock { (channelID, channelName, channelAudio) }
            /// A failed attempt that got a link: its remote streams go (their events
            /// with the rest of the attempt's), the channel state is as before it, and
            /// of its held events only a stopped stream's ERROR goes out (that stream
            /// stays stopped).
            func abandonAttempt(_ l: Link) {
                removeAllRemote()
                cond.withLock {
                    (channelID, channelName, channelAudio) = kept
                    if control === l.conn { control = nil; udp = nil }
                }
                events.releaseHeld { $0.type == .error && $0.streamID != 0 }
                l.conn.close(); l.udp.close()
            }
            do {
                let l = try establish(target, deadlineMs: MonotonicClock.milliseconds() + VoiceClient.reconnectAttemptMs)
                link = l
                // The next attempt (this one may still fail) names this session, which
                // the server may hold if its close does not reach it.
                target.resumeToken = l.resumeToken
                cond.withLock { self.target?.resumeToken = l.resumeToken }
                // Events of the new session (its join, the users and streams it hears of,
                // what could not be restored) are raised from here on, on this thread:
                // held, so that RECONNECTED goes ahead of them (as CONNECTED goes ahead of
                // a first session's) and a failed attempt's are not delivered.
                events.holdOwnEvents()
                try cond.withLock {
                    if stopNetwork { throw ClientError.state("the host ended the session") }
                    install(l)
                    usernames = [l.hello.userID: target.username]
                    replies = [:]
                    channelID = 0
                }
                for text in l.refused { raiseRefusal(text) }
                try restore(l, channel: channel)
                cond.withLock { afterRestoreForTests }?()
                let resumed = cond.withLock { () -> Bool in
                    guard !stopNetwork else { return false }
                    phase = .connected
                    cond.broadcast()
                    return true
                }
                guard resumed else {
                    events.releaseHeld { _ in false }
                    return nil
                }
                publishStatesSetInGap(l.conn)
                var ok = ClientEvent(type: .reconnected)
                ok.userID = l.hello.userID
                ok.channelID = cond.withLock { channelID }   // 0: in no channel (see restore)
                ok.text = l.hello.serverName
                events.releaseHeld(first: ok)
                publishSendPath(l)   // after it: a gate opening with the first frame sent follows it
                voiceConnected.store(true, ordering: .relaxed)
                events.deliver()
                ClientLog.log(2, "reconnected after \(attempt) attempt(s)")
                return link
            } catch let err as ClientError {
                if let l = link { abandonAttempt(l) }
                if cond.withLock({ stopNetwork }) { return nil }
                switch err {
                case .auth, .version:
                    lastReconnectFailure = .lost(err.code, "reconnecting failed: \(err.description)")
                    return nil
                default:
                    ClientLog.log(1, "reconnect attempt \(attempt) failed: \(err.description)")
                }
            } catch {
                if let l = link { abandonAttempt(l) }
                ClientLog.log(1, "reconnect attempt \(attempt) failed: \(error)")
            }
            events.deliver()
            do { try cancel.sleep(untilMs: MonotonicClock.milliseconds() + delay) } catch { return nil }
            delay = min(delay * 2, VoiceClient.reconnectMaxDelayMs)
        }
    }

    /// Joins `channel` again and announces every local stream again under its id.
    /// What cannot be restored (the channel is gone or its audio changed, a stream
    /// refused) is reported with an ERROR event and dropped; the session goes on.
    func restore(_ link: Link, channel: String) throws {
        let deadline = MonotonicClock.milliseconds() + VoiceClient.reconnectAttemptMs
        guard !channel.isEmpty else {
            for s in streams.all { retire(s.streamID, why: "ended: the session was in no channel when it reconnected") }
            return
        }
        let oldAudio = cond.withLock { channelAudio }
        switch try exchange(link.conn, deadlineMs: deadline, { .joinChannel(JoinChannel(name: channel, requestID: $0)) }) {
        case .joinChannelResult(let r):
            let listed = link.hello.channels.contains(where: { $0.id == r.channelID })
            if let p = ControlMessage.joinChannelResult(r).serverMessageProblem ?? (listed ? nil : "channel \(r.channelID) is not listed") {
                return channelLost("could not join \(channel) again after reconnecting: the server's answer broke the rules (\(p))",
                                   code: VC_ERR_PROTOCOL)
            }
            let same = r.audio == oldAudio
            if !same {
                lostStreams("the channel \(channel)'s audio configuration changed across the reconnect")
            }
            applyJoin(r, keepStreams: same)
        case .error(let e):
            return channelLost("could not join \(channel) again after reconnecting: \(ServerMessageLimits.sanitized(e.message))",
                               code: VoiceClient.mapServerError(e).code)
        case let other:
            throw ClientError.protocolError("unexpected reply \(other.type) to JoinChannel")
        }
        for s in streams.all {
            let channels = s.slot.lock.withLock { s.inputChannels }
            let reply = try exchange(link.conn, deadlineMs: deadline) {
                .streamAnnounce(StreamAnnounce(streamID: s.streamID, kind: s.kind, channels: UInt32(channels), requestID: $0))
            }
            var why: String? = nil
            // The server made the stream, or may have (this client refuses its answer):
            // it is stopped there too. A refused one the server never made: a stop would be answered
            // with "no stream", an ERROR that names no stream.
            var madeByServer = false
            switch reply {
            case .streamAnnounceResult(let r):
                madeByServer = true
                if let p = reply.serverMessageProblem { why = p } else if r.effectiveAudio != s.audio {
                    why = "its effective audio configuration changed"
                } else {
                    let limit = MediaLimits.maxOpusBytes(serverLimit: link.hello.maxDatagramBytes)
                    s.slot.lock.withLock { s.ssrc = r.ssrc; s.maxOpusBytes = limit }
                    republishStreamState(link.conn, streamID: s.streamID, ssrc: r.ssrc)
                    ClientLog.log(2, "stream \(s.streamID) announced again with ssrc \(r.ssrc)")
                }
            case .error(let e): why = "the server refused it: \(ServerMessageLimits.sanitized(e.message))"
            default: why = "unexpected reply \(reply.type)"; madeByServer = true   // it may have made it
            }
            if let why {
                retire(s.streamID, why: "could not be announced again after reconnecting: \(why)")
                if madeByServer { try? link.conn.send(.streamStop(StreamStop(streamID: s.streamID))) }
                var ev = ClientEvent(type: .error)
                ev.code = VC_ERR_REJECTED
                ev.streamID = s.streamID
                ev.text = "stream \(s.streamID) could not be announced again after reconnecting: \(why); it is stopped"
                events.raise(ev)
            }
        }
    }

    /// The channel could not be joined again: the session is in none, its streams end
    /// saying `why`, and an ERROR (after RECONNECTED) says it.
    private func channelLost(_ why: String, code: Int32) {
        let hadStreams = !streams.all.isEmpty
        leaveChannelLocally(why: "ended: the session \(why)")
        var ev = ClientEvent(type: .error)
        ev.code = code
        ev.text = why + (hadStreams ? "; the local streams are stopped" : "")
        events.raise(ev)
    }

    /// Every local stream ends (reported once, with the reason).
    func lostStreams(_ why: String) {
        for s in streams.all {
            retire(s.streamID, why: "is stopped: \(why)")
            var ev = ClientEvent(type: .error)
            ev.code = VC_ERR_REJECTED
            ev.streamID = s.streamID
            ev.text = "stream \(s.streamID) is stopped: \(why)"
            events.raise(ev)
        }
    }

    /// Sends a request on `conn` and reads until its reply (network thread, no other
    /// reader); messages that come first are handled as usual.
    func exchange(_ conn: ControlConnection, deadlineMs: UInt64, _ make: (UInt32) -> ControlMessage) throws -> ControlMessage {
        let rid = cond.withLock { () -> UInt32 in
            let r = nextRequestID
            nextRequestID &+= 1
            if nextRequestID == 0 { nextRequestID = 1 }
            return r
        }
        try conn.send(make(rid))
        var media = MediaPathState(nowMs: MonotonicClock.milliseconds())
        while true {
            let m: ControlMessage
            do { m = try conn.receive(deadlineMs: deadlineMs) } catch let u as UndecodableMessage {
                refuseUndecodable(u)
                continue
            }
            switch m {
            case .joinChannelResult(var r) where r.requestID == rid:
                // A long member list continues in MemberList parts: the reply is the whole list.
                while r.moreMembers {
                    guard case .memberList(let part) = try conn.receive(deadlineMs: deadlineMs) else {
                        throw ClientError.protocolError("expected the rest of the member list of channel \(r.channelID)")
                    }
                    if let p = ControlMessage.memberList(part).serverMessageProblem ?? r.append(part) {
                        throw ClientError.protocolError("refused the member list of channel \(r.channelID): \(p)")
                    }
                }
                return .joinChannelResult(r)
            case .streamAnnounceResult(let r) where r.requestID == rid: return m
            case .error(let e) where e.requestID == rid: return m
            default: handleControl(m, sender: conn, media: &media)
            }
        }
    }
}
