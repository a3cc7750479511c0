// The network thread: control messages, UDP receive, keepalive and media RTT,
// voice-disconnect detection and rebinding, talk state.
import Glibc
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
    static let talkHangoverMs: UInt64 = 300

    func startNetworkThread() {
        let t = SystemThread(name: "vc-network") { [unowned self] in self.networkLoop() }
        cond.withLock { networkThread = t }
    }

    func networkLoop() {
        cond.withLock { networkThreadID = currentThreadID() }
        defer { cond.withLock { networkThreadID = nil } }
        guard let (conn, sock) = cond.withLock({ () -> (ControlConnection, Socket)? in
            guard let c = control, let u = udp else { return nil }
            return (c, u)
        }) else { return }
        let rx = UnsafeMutableRawBufferPointer.allocate(byteCount: 2048, alignment: 16)
        defer { rx.deallocate() }
        var media = MediaPathState()
        let now0 = MonotonicClock.milliseconds()
        media.nextKeepaliveMs = now0
        media.lastEchoMs = now0
        var pollSet = PollSet()
        while true {
            if cond.withLock({ stopNetwork || !connected }) { return }
            pollSet.removeAll()
            pollSet.add(wake.readFD, events: Int16(POLLIN))
            pollSet.add(conn.socket.fd, events: Int16(POLLIN))
            pollSet.add(sock.fd, events: Int16(POLLIN))
            _ = try? pollSet.wait(timeoutMs: 20)
            if pollSet.fds[0].revents != 0 { wake.drain() }
            if cond.withLock({ stopNetwork }) { return }
            if pollSet.fds[1].revents != 0 {
                do {
                    let open = try conn.readAvailable()
                    while let m = try conn.nextBuffered() { handleControl(m, conn: conn, media: &media) }
                    if !open {
                        teardown(reason: -4, text: "the server closed the connection")
                        return
                    }
                } catch {
                    teardown(reason: (error as? ClientError).map(VoiceClient.code) ?? -4, text: "\(error)")
                    return
                }
            }
            if pollSet.fds[2].revents != 0 { drainUDP(sock, rx, media: &media) }
            timers(conn: conn, sock: sock, media: &media)
        }
    }

    /// VC_ERR_* code for an error (mirrors the C layer's mapping).
    public static func code(_ e: ClientError) -> Int32 {
        switch e {
        case .invalidArgument: return -1
        case .state: return -2
        case .notFound: return -3
        case .network: return -4
        case .timeout: return -5
        case .protocolError: return -6
        case .version: return -7
        case .auth: return -8
        case .rejected: return -9
        case .device: return -10
        case .codec: return -11
        case .noMemory: return -12
        case .unsupported: return -13
        }
    }

    func handleControl(_ m: ControlMessage, conn: ControlConnection, media: inout MediaPathState) {
        let now = MonotonicClock.milliseconds()
        switch m {
        case .joinChannelResult(let r) where r.requestID != 0:
            reply(r.requestID, m)
        case .streamAnnounceResult(let r) where r.requestID != 0:
            reply(r.requestID, m)
        case .error(let e):
            if !reply(e.requestID, m) {
                var ev = ClientEvent(type: .error)
                ev.code = VoiceClient.code(VoiceClient.mapServerError(e))
                ev.text = e.message
                emit(ev)
            }
        case .ping(let p):
            try? conn.send(.pong(Pong(timestamp: p.timestamp)))
        case .pong(let p):
            statsLock.withLock { connStats.controlRttMs = UInt32(clamping: now &- p.timestamp) }
        case .userJoined(let u):
            let member = u.member, ch = u.channelID
            cond.withLock { usernames[member.userID] = member.username }
            var e = ClientEvent(type: .userJoined)
            e.userID = member.userID; e.channelID = ch; e.text = member.username
            e.muted = member.muted; e.deafened = member.deafened
            emit(e)
        case .userLeft(let u):
            let uid = u.userID, ch = u.channelID
            var e = ClientEvent(type: .userLeft)
            e.userID = uid; e.channelID = ch
            e.text = cond.withLock { usernames[uid] ?? "" }
            emit(e)
        case .remoteStreamAdded(let r):
            addRemote(r)
        case .remoteStreamRemoved(let r):
            let uid = r.userID, sid = r.streamID, ssrc = r.ssrc
            let (own, withdrawn) = cond.withLock { () -> (Bool, LocalStream?) in
                guard uid == hello?.userID else { return (false, nil) }
                return (true, localStreams.removeValue(forKey: sid))
            }
            if let w = withdrawn { retire(w) }
            if !own { removeRemote(ssrc: ssrc) }
            var e = ClientEvent(type: .remoteStreamRemoved)
            e.userID = uid; e.streamID = sid; e.ssrc = ssrc
            emit(e)
        case .streamStateUpdate(let u):
            let ssrc = u.ssrc, muted = u.muted, hold = u.hold
            var e = ClientEvent(type: .streamStateUpdate)
            e.ssrc = ssrc; e.muted = muted; e.hold = hold
            e.userID = (try? withSlot(ssrc: ssrc) { $0.userID }) ?? 0
            emit(e)
        case .serverMuteState(let s):
            if s.userID == cond.withLock({ hello?.userID }) { keyLock.withLock { selfMuted = s.muted } }
            var e = ClientEvent(type: .serverMuteState)
            e.userID = s.userID; e.muted = s.muted; e.deafened = s.deafened
            emit(e)
        case .rebindResult(let r):
            let ep = r.epoch
            let keys = conn.keys
            cond.withLock { epoch = ep; mediaReceiveKey = keys.media(epoch: ep).receive }
            keyLock.withLock { mediaSend?.key = keys.media(epoch: ep).send }
            media.rebindKeys = keys.bind(epoch: ep)
            media.rebindRequestedMs = nil
            media.nextBindMs = now
            ClientLog.log(2, "media keys renewed (epoch \(ep)); binding again")
        default:
            break
        }
    }

    /// Hands a reply to the request waiting for it; false when none waits (a late
    /// reply after a timeout, or an unsolicited message), so nothing piles up.
    @discardableResult
    func reply(_ rid: UInt32, _ m: ControlMessage) -> Bool {
        cond.withLock {
            guard replies.keys.contains(rid) else { return false }
            replies[rid] = m
            cond.broadcast()
            return true
        }
    }

    func addRemote(_ r: RemoteStream) {
        guard ssrcToSlot[r.ssrc] == nil else { return }
        guard let idx = slots.indices.first(where: { i in slots[i].lock.withLock { !slots[i].active } }) else {
            var e = ClientEvent(type: .error)
            e.code = -12
            e.ssrc = r.ssrc
            e.text = "all \(slots.count) receive slots are in use; ssrc \(r.ssrc) is not played (raise max_remote_streams)"
            emit(e)
            return
        }
        let name = cond.withLock { usernames[r.userID] ?? "" }
        slots[idx].lock.withLock { slots[idx].configure(r, username: name) }
        ssrcToSlot[r.ssrc] = idx
        var e = ClientEvent(type: .remoteStreamAdded)
        e.userID = r.userID; e.streamID = r.streamID; e.ssrc = r.ssrc; e.kind = r.kind.rawValue
        e.channels = UInt32(r.audio.channels); e.text = name
        emit(e)
    }

    func removeRemote(ssrc: UInt32) {
        guard let idx = ssrcToSlot.removeValue(forKey: ssrc) else { return }
        let s = slots[idx]
        let (wasTalking, uid) = s.lock.withLock { () -> (Bool, UInt32) in
            s.active = false
            return (s.talking, s.userID)
        }
        if wasTalking {
            s.lock.withLock { s.talking = false }
            var e = ClientEvent(type: .talkStop)
            e.ssrc = ssrc; e.userID = uid
            emit(e)
        }
    }

    func drainUDP(_ sock: Socket, _ rx: UnsafeMutableRawBufferPointer, media: inout MediaPathState) {
        let (rxKey, bindingID) = cond.withLock { (mediaReceiveKey, hello?.bindingID ?? 0) }
        for _ in 0..<256 {
            guard let (n, _) = try? sock.receiveFrom(into: rx) else { return }
            guard n <= rx.count else { continue }
            let d = UnsafeMutableRawBufferPointer(rebasing: rx[0..<n])
            guard let h = try? FrameHeader.parse(UnsafeRawBufferPointer(d)) else { continue }
            let now = MonotonicClock.milliseconds()
            statsLock.withLock { connStats.packetsIn += 1; connStats.bytesIn += UInt64(n) }
            switch h.type {
            case .voice:
                guard let idx = ssrcToSlot[h.ssrc], let key = rxKey else { continue }
                let opened: (header: FrameHeader, length: Int)
                do { opened = try MediaCrypto.open(d, key: key) } catch {
                    statsLock.withLock { connStats.authFailures += 1 }
                    continue
                }
                let slot = slots[idx]
                let verdict = slot.replay.accept(h.seq)
                let payload = UnsafeRawBufferPointer(rebasing: d[FrameHeader.size..<(FrameHeader.size + opened.length)])
                slot.lock.withLock {
                    if verdict == .fresh {
                        slot.jitter.insert(seq: h.seq, timestamp: h.timestamp, flags: h.flags.rawValue, payload: payload,
                                           arrivalMs: Double(MonotonicClock.nanoseconds()) / 1e6)
                    } else {
                        slot.duplicates += 1
                    }
                }
                guard verdict == .fresh else { continue }
                slot.lastPacketMs = now
                if !slot.talking {
                    slot.lock.withLock { slot.talking = true }
                    var e = ClientEvent(type: .talkStart)
                    e.ssrc = h.ssrc; e.userID = slot.userID
                    emit(e)
                }
            case .keepalive:
                guard h.ssrc == bindingID else { continue }
                let rtt = UInt32(truncatingIfNeeded: now) &- h.timestamp
                if rtt < 60_000 { statsLock.withLock { connStats.mediaRttMs = rtt } }
                media.lastEchoMs = now
            case .udpBinding:
                guard let keys = media.rebindKeys, (try? MediaCrypto.open(d, key: keys.receive)) != nil else { continue }
                media.rebindKeys = nil
                media.lastEchoMs = now
                if !media.voiceConnected {
                    media.voiceConnected = true
                    statsLock.withLock { connStats.voiceConnected = true }
                    emit(ClientEvent(type: .voiceReconnected))
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
            statsLock.withLock { connStats.voiceConnected = false }
            emit(ClientEvent(type: .voiceDisconnected))
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
        // Talk state: frames stopped arriving for the hangover.
        for (ssrc, idx) in ssrcToSlot {
            let s = slots[idx]
            if s.talking && now &- s.lastPacketMs > VoiceClient.talkHangoverMs {
                s.lock.withLock { s.talking = false }
                var e = ClientEvent(type: .talkStop)
                e.ssrc = ssrc; e.userID = s.userID
                emit(e)
            }
        }
    }
}
