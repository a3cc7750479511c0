// The network thread (vc-network): starts and ends each session, reads control
// messages and media datagrams, runs the keepalive / media RTT / rebinding timers,
// and delivers every event of the client (Events.swift), so the host's event
// callback always runs here, in protocol order.
import Glibc
import VoiceCatABI
import VoiceCatAudio
import VoiceCatProtocol
import VoiceCatSystem

/// Network-thread state of the media path.
struct MediaPathState {
    var nextKeepaliveMs: UInt64 = 0
    var lastEchoMs: UInt64 = 0
    var keepaliveSeq: UInt64 = 0
    var voiceConnected = true
    /// Rebind requested at this time (awaiting RebindResult), or nil.
    var rebindRequestedMs: UInt64?
    /// After RebindResult: binding keys being tried, and when to try next.
    var rebindKeys: DirectionalKeys?
    var bindSeq: UInt64 = 0
    var nextBindMs: UInt64 = 0
}

extension VoiceClient {

    /// Starts the network thread (cond held by the caller).
    func startNetworkThread() {
        networkThread = SystemThread(name: "vc-network") { [unowned self] in self.networkLoop() }
    }

    func networkLoop() {
        ThreadIdentity.mark(owner: self, role: ThreadRole.network.rawValue)
        defer { ThreadIdentity.clear() }
        guard let (conn, sock, address, result, sendKey) = cond.withLock({ () -> (ControlConnection, Socket, SocketAddress, HelloResult, SymmetricKey)? in
            guard let c = control, let u = udp, let h = hello, let k = mediaSendKey else { return nil }
            return (c, u, serverAddress, h, k)
        }) else { return }

        // Start the session: the send path, CONNECTED, the output stage.
        packetsIn.store(0, ordering: .relaxed); bytesIn.store(0, ordering: .relaxed)
        authFailures.store(0, ordering: .relaxed); mediaRttMs.store(0, ordering: .relaxed)
        controlRttMs.store(0, ordering: .relaxed); voiceConnected.store(true, ordering: .relaxed)
        streams.resetCounters()
        streams.publish(SendSnapshot(key: sendKey, socket: sock, address: address, serverMuted: false))
        events.discardPending()
        var connected = ClientEvent(type: .connected)
        connected.userID = result.userID
        connected.text = result.serverName
        events.raise(connected)
        if let err = output.setConnected(true) { reportDevice(err.description) }
        events.deliver()
        cond.withLock { networkReady = true; cond.broadcast() }

        let rx = UnsafeMutableRawBufferPointer.allocate(byteCount: 2048, alignment: 16)
        defer { rx.deallocate() }
        var media = MediaPathState()
        let now0 = MonotonicClock.milliseconds()
        media.nextKeepaliveMs = now0
        media.lastEchoMs = now0
        var pollSet = PollSet()
        var endReason: (Int32, String)? = nil
        while endReason == nil {
            if let r = cond.withLock({ stopNetwork ? disconnectReason : nil }) { endReason = r; break }
            let timeout = Int32(clamping: max(0, Int64(nextTimerMs(media)) - Int64(MonotonicClock.milliseconds())))
            pollSet.removeAll()
            pollSet.add(wake.readFD, events: Int16(POLLIN))
            pollSet.add(conn.socket.fd, events: Int16(POLLIN))
            pollSet.add(sock.fd, events: Int16(POLLIN))
            _ = try? pollSet.wait(timeoutMs: timeout)
            if pollSet.fds[0].revents != 0 { wake.drain() }
            if let r = cond.withLock({ stopNetwork ? disconnectReason : nil }) { endReason = r; break }
            if pollSet.fds[1].revents != 0 {
                do {
                    let open = try conn.readAvailable()
                    while let m = try conn.nextBuffered() { handleControl(m, conn: conn, media: &media) }
                    if !open { endReason = (VC_ERR_NETWORK, "the server closed the connection") }
                } catch let e as ClientError {
                    endReason = (e.code, e.description)
                } catch {
                    endReason = (VC_ERR_NETWORK, "\(error)")
                }
            }
            if pollSet.fds[2].revents != 0 { drainUDP(sock, rx, media: &media) }
            timers(conn: conn, sock: sock, media: &media)
            events.deliver()
        }
        let (code, text) = endReason ?? (VC_ERR_NETWORK, "the session ended")
        if code != VC_OK { ClientLog.log(1, "disconnected: \(text)") }
        teardown(reason: code, text: text)
    }

    /// When the next timer of the network thread is due (ms, monotonic).
    func nextTimerMs(_ media: MediaPathState) -> UInt64 {
        var t = media.nextKeepaliveMs
        let period = UInt64(config.keepaliveMs)
        if media.voiceConnected { t = min(t, media.lastEchoMs + 3 * period + period / 2 + 1) }
        if media.rebindKeys != nil { t = min(t, media.nextBindMs) }
        if let r = media.rebindRequestedMs { t = min(t, r + 3 * period + 1) }
        // While someone talks, look at the playout every 50 ms for the end of it.
        var anyTalking = false
        receive.forEachStream { _, s in if s.talking { anyTalking = true } }
        if anyTalking { t = min(t, MonotonicClock.milliseconds() + 50) }
        return t
    }

    func handleControl(_ m: ControlMessage, conn: ControlConnection, media: inout MediaPathState) {
        let now = MonotonicClock.milliseconds()
        switch m {
        case .joinChannelResult(let r):
            applyJoin(r)
            reply(r.requestID, m)
        case .streamAnnounceResult(let r):
            // A stream whose request timed out is one the host does not know: withdraw it.
            if !reply(r.requestID, m) { try? conn.send(.streamStop(StreamStop(streamID: r.streamID))) }
        case .error(let e):
            if !reply(e.requestID, m) {
                var ev = ClientEvent(type: .error)
                ev.code = VoiceClient.mapServerError(e).code
                ev.text = "server: \(e.message)"
                events.raise(ev)
            }
        case .ping(let p):
            try? conn.send(.pong(Pong(timestamp: p.timestamp)))
        case .pong(let p):
            controlRttMs.store(UInt32(clamping: now &- p.timestamp), ordering: .relaxed)
        case .userJoined(let u):
            cond.withLock { usernames[u.member.userID] = u.member.username }
            var e = ClientEvent(type: .userJoined)
            e.userID = u.member.userID; e.channelID = u.channelID; e.text = u.member.username
            e.muted = u.member.muted; e.deafened = u.member.deafened
            events.raise(e)
        case .userLeft(let u):
            var e = ClientEvent(type: .userLeft)
            e.userID = u.userID; e.channelID = u.channelID
            e.text = cond.withLock { usernames[u.userID] ?? "" }
            events.raise(e)
        case .remoteStreamAdded(let r):
            addRemote(r)
        case .remoteStreamRemoved(let r):
            let own = cond.withLock { r.userID == hello?.userID }
            if own { retire(r.streamID) } else { removeRemote(ssrc: r.ssrc) }
            var e = ClientEvent(type: .remoteStreamRemoved)
            e.userID = r.userID; e.streamID = r.streamID; e.ssrc = r.ssrc
            events.raise(e)
        case .streamStateUpdate(let u):
            var e = ClientEvent(type: .streamStateUpdate)
            e.ssrc = u.ssrc; e.muted = u.muted; e.hold = u.hold
            e.userID = (try? receive.withSlot(ssrc: u.ssrc) { $0.userID }) ?? 0
            events.raise(e)
        case .serverMuteState(let s):
            if s.userID == cond.withLock({ hello?.userID }), let snap = streams.snapshot, snap.serverMuted != s.muted {
                streams.publish(snap.with(serverMuted: s.muted))
            }
            var e = ClientEvent(type: .serverMuteState)
            e.userID = s.userID; e.muted = s.muted; e.deafened = s.deafened
            events.raise(e)
        case .rebindResult(let r):
            let keys = conn.keys.media(epoch: r.epoch)
            cond.withLock { epoch = r.epoch; mediaReceiveKey = keys.receive; mediaSendKey = keys.send }
            if let snap = streams.snapshot { streams.publish(snap.with(key: keys.send)) }
            media.rebindKeys = conn.keys.bind(epoch: r.epoch)
            media.rebindRequestedMs = nil
            media.nextBindMs = now
            ClientLog.log(2, "media keys renewed (epoch \(r.epoch)); binding again")
        default:
            break
        }
    }

    /// The server put this session in a channel: streams published elsewhere are
    /// withdrawn, the old channel's remote streams go away, CHANNEL_JOINED is raised
    /// (before the new channel's REMOTE_STREAM_ADDED, which follow on the wire).
    /// Applied whether or not the request that asked for it is still waiting.
    func applyJoin(_ r: JoinChannelResult) {
        let name = cond.withLock { () -> String in
            channelID = r.channelID
            channelAudio = r.audio
            for m in r.members { usernames[m.userID] = m.username }
            channelName = hello?.channels.first(where: { $0.id == r.channelID })?.name ?? ""
            return channelName
        }
        for s in streams.all { retire(s.streamID) }
        for ssrc in receive.ssrcs {
            let gone = receive.remove(ssrc: ssrc)
            if gone?.wasTalking == true {
                var e = ClientEvent(type: .talkStop)
                e.ssrc = ssrc; e.userID = gone!.userID
                events.raise(e)
            }
            var e = ClientEvent(type: .remoteStreamRemoved)
            e.ssrc = ssrc; e.userID = gone?.userID ?? 0
            events.raise(e)
        }
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
            cond.broadcast()
            return true
        }
    }

    func addRemote(_ r: RemoteStream) {
        let name = cond.withLock { usernames[r.userID] ?? "" }
        guard receive.add(r, username: name) else {
            var e = ClientEvent(type: .error)
            e.code = VC_ERR_NO_MEMORY
            e.ssrc = r.ssrc
            e.text = "all \(receive.slots.count) receive slots are in use; ssrc \(r.ssrc) is not played (raise max_remote_streams)"
            events.raise(e)
            return
        }
        var e = ClientEvent(type: .remoteStreamAdded)
        e.userID = r.userID; e.streamID = r.streamID; e.ssrc = r.ssrc; e.kind = r.kind.rawValue
        e.channels = UInt32(r.audio.channels); e.text = name
        events.raise(e)
    }

    func removeRemote(ssrc: UInt32) {
        guard let gone = receive.remove(ssrc: ssrc), gone.wasTalking else { return }
        var e = ClientEvent(type: .talkStop)
        e.ssrc = ssrc; e.userID = gone.userID
        events.raise(e)
    }

    func drainUDP(_ sock: Socket, _ rx: UnsafeMutableRawBufferPointer, media: inout MediaPathState) {
        let (rxKey, bindingID) = cond.withLock { (mediaReceiveKey, hello?.bindingID ?? 0) }
        for _ in 0..<256 {
            guard let (n, _) = try? sock.receiveFrom(into: rx) else { return }
            guard n <= rx.count else { continue }
            let d = UnsafeMutableRawBufferPointer(rebasing: rx[0..<n])
            guard let h = try? FrameHeader.parse(UnsafeRawBufferPointer(d)) else { continue }
            let now = MonotonicClock.milliseconds()
            packetsIn.wrappingAdd(1, ordering: .relaxed)
            bytesIn.wrappingAdd(UInt64(n), ordering: .relaxed)
            switch h.type {
            case .voice:
                guard let idx = receive.slotIndex(ssrc: h.ssrc), let key = rxKey else { continue }
                let opened: (header: FrameHeader, length: Int)
                do { opened = try MediaCrypto.open(d, key: key) } catch {
                    authFailures.wrappingAdd(1, ordering: .relaxed)
                    continue
                }
                let slot = receive.slots[idx]
                guard slot.replay.accept(h.seq) == .fresh else {
                    slot.duplicates.wrappingAdd(1, ordering: .relaxed)
                    continue
                }
                let payload = UnsafeRawBufferPointer(rebasing: d[FrameHeader.size..<(FrameHeader.size + opened.length)])
                // Handed to the renderer through the slot's ring: no lock per frame.
                slot.inbox.push(seq: h.seq, timestamp: h.timestamp, flags: h.flags, arrivalMs: Double(MonotonicClock.nanoseconds()) / 1e6,
                                payload: payload)
                slot.lastPacketMs = now
            case .keepalive:
                guard h.ssrc == bindingID else { continue }
                let rtt = UInt32(truncatingIfNeeded: now) &- h.timestamp
                if rtt < 60_000 { mediaRttMs.store(rtt, ordering: .relaxed) }
                media.lastEchoMs = now
            case .udpBinding:
                guard let keys = media.rebindKeys, (try? MediaCrypto.open(d, key: keys.receive)) != nil else { continue }
                media.rebindKeys = nil
                media.lastEchoMs = now
                if !media.voiceConnected {
                    media.voiceConnected = true
                    voiceConnected.store(true, ordering: .relaxed)
                    events.raise(ClientEvent(type: .voiceReconnected))
                    ClientLog.log(2, "voice reconnected")
                }
            }
        }
    }

    func timers(conn: ControlConnection, sock: Socket, media: inout MediaPathState) {
        let now = MonotonicClock.milliseconds()
        let period = UInt64(config.keepaliveMs)
        let (bindingID, sessionID, addr, curEpoch) = cond.withLock { (hello?.bindingID ?? 0, hello?.sessionID ?? 0, serverAddress, epoch) }
        if now >= media.nextKeepaliveMs {
            media.nextKeepaliveMs = now + period
            let ka = FrameHeader(type: .keepalive, ssrc: bindingID, seq: media.keepaliveSeq, timestamp: UInt32(truncatingIfNeeded: now))
            media.keepaliveSeq += 1
            var bytes = ka.bytes
            _ = try? bytes.withUnsafeMutableBytes { try sock.sendTo(UnsafeRawBufferPointer($0), addr) }
            try? conn.send(.ping(Ping(timestamp: now)))
        }
        // No echo for three periods: the media path is gone. Ask for new keys and rebind.
        if media.voiceConnected && now &- media.lastEchoMs > 3 * period + period / 2 {
            media.voiceConnected = false
            voiceConnected.store(false, ordering: .relaxed)
            events.raise(ClientEvent(type: .voiceDisconnected))
            ClientLog.log(1, "voice disconnected: no keepalive echo for \(now &- media.lastEchoMs) ms")
        }
        if !media.voiceConnected && media.rebindKeys == nil {
            if media.rebindRequestedMs == nil || now &- media.rebindRequestedMs! > 3 * period {
                media.rebindRequestedMs = now
                try? conn.send(.rebind(Rebind(epoch: curEpoch &+ 1)))
            }
        }
        if let keys = media.rebindKeys, now >= media.nextBindMs {
            media.nextBindMs = now + 250
            var payload = [UInt8](repeating: 0, count: 12)
            payload.withUnsafeMutableBytes { p in
                p.storeBytes(of: sessionID.bigEndian, toByteOffset: 0, as: UInt64.self)
                p.storeBytes(of: curEpoch.bigEndian, toByteOffset: 8, as: UInt32.self)
            }
            let d = MediaCrypto.seal(header: FrameHeader(type: .udpBinding, ssrc: bindingID, seq: media.bindSeq, timestamp: 0),
                                     payload: payload, key: keys.send)
            media.bindSeq += 1
            _ = try? d.withUnsafeBytes { try sock.sendTo($0, addr) }
        }
        updateTalkState(now: now)
    }

    /// Talk state follows what is played: TALK_START when the first frame of a
    /// talkspurt was played, TALK_STOP the hangover after the last one was. While
    /// nothing plays the mix (pull mode without pulls), it follows arrivals instead.
    func updateTalkState(now: UInt64) {
        let hang = UInt64(config.talkHangoverMs)
        let playing = output.lastRenderMs.load(ordering: .relaxed) + 200 > now
        receive.forEachStream { ssrc, s in
            var change: vc_event_type? = nil
            s.lock.withLock {
                if playing {
                    if s.spurtsStarted != s.seenStarted {
                        s.seenStarted = s.spurtsStarted
                        if !s.talking { s.talking = true; change = .talkStart }
                    }
                    s.seenEnded = s.spurtsEnded
                    if s.talking && s.seenEnded == s.seenStarted && now >= s.spurtEndNs / 1_000_000 + hang {
                        s.talking = false
                        change = .talkStop
                    }
                } else {
                    s.seenStarted = s.spurtsStarted
                    s.seenEnded = s.spurtsEnded
                    let recent = s.lastPacketMs != 0 && now < s.lastPacketMs + hang
                    if recent && !s.talking { s.talking = true; change = .talkStart }
                    if !recent && s.talking { s.talking = false; change = .talkStop }
                }
            }
            if let type = change {
                var e = ClientEvent(type: type)
                e.ssrc = ssrc; e.userID = s.userID
                e.text = s.username
                events.raise(e)
            }
        }
    }
}
