// The media plane: UDP_BINDING, KEEPALIVE echo and the VOICE relay with
// per-listener reseal (PROTOCOL.md §3). Works in preallocated buffers.
import VoiceCatProtocol
import VoiceCatSystem

extension Server {
    /// Bytes of a UDP_BINDING payload: u64 session_id | u32 epoch.
    static let bindingPayloadSize = 12

    func drainUDP() {
        // Bounded so a flood cannot starve the TCP side of the loop.
        for _ in 0..<1024 {
            let r: (Int, SocketAddress)?
            do { r = try udp.receiveFrom(into: rxBuffer) } catch {
                log("recvfrom failed: \(error)")
                return
            }
            guard let (n, from) = r else { return }
            counters.udpIn += 1
            guard n <= config.maxDatagramBytes, n <= rxBuffer.count else {
                counters.dropOversize += 1
                noticeOversize(n, from: from)
                continue
            }
            handleDatagram(UnsafeMutableRawBufferPointer(rebasing: rxBuffer[0..<n]), from: from)
        }
    }

    /// An oversize drop is never silent to a bound sender: an Error, at most one per 5 s.
    func noticeOversize(_ n: Int, from: SocketAddress) {
        guard let s = sessionsByAddress[from] else { return }
        let now = MonotonicClock.milliseconds()
        if let last = s.oversizeNoticeMs, now &- last < 5000 { return }
        s.oversizeNoticeMs = now
        send(s.connection, .error(ErrorMessage(code: .limitReached, message: "a datagram of \(n) bytes from this session was dropped: "
                                               + "it exceeds max_datagram_bytes \(config.maxDatagramBytes)")))
    }

    func handleDatagram(_ d: UnsafeMutableRawBufferPointer, from: SocketAddress) {
        let header: FrameHeader
        do { header = try FrameHeader.parse(UnsafeRawBufferPointer(d)) } catch {
            counters.dropMalformed += 1
            return
        }
        let now = MonotonicClock.milliseconds()
        switch header.type {
        case .udpBinding:
            guard let s = sessionsByBinding[header.ssrc] else { counters.dropUnbound += 1; return }
            let opened: (header: FrameHeader, length: Int)
            do { opened = try MediaCrypto.open(d, key: s.bind.receive) } catch {
                counters.dropAuthFailed += 1
                return
            }
            guard opened.length == Server.bindingPayloadSize else { counters.dropMalformed += 1; return }
            let p = UnsafeRawBufferPointer(rebasing: d[FrameHeader.size..<(FrameHeader.size + opened.length)])
            let sid = p.loadUnaligned(fromByteOffset: 0, as: UInt64.self).bigEndian
            let epoch = p.loadUnaligned(fromByteOffset: 8, as: UInt32.self).bigEndian
            guard sid == s.id, epoch == s.epoch else { counters.dropMalformed += 1; return }
            guard s.bindReplay.accept(header.seq) == .fresh else { counters.dropReplay += 1; return }
            if let old = s.udpAddress, old != from { sessionsByAddress[old] = nil }
            if let other = sessionsByAddress[from], other !== s { other.udpAddress = nil }
            s.udpAddress = from
            sessionsByAddress[from] = s
            s.lastSeenMs = now
            counters.bindingsAccepted += 1
            let reply = FrameHeader(type: .udpBinding, ssrc: s.bindingID, seq: s.bindSendSeq, timestamp: header.timestamp)
            s.bindSendSeq += 1
            let n = MediaCrypto.seal(header: reply, payload: p, key: s.bind.send, into: txBuffer)
            sendDatagram(UnsafeRawBufferPointer(rebasing: txBuffer[0..<n]), to: from)

        case .keepalive:
            guard let s = sessionsByAddress[from], s.bindingID == header.ssrc else { counters.dropUnbound += 1; return }
            s.lastSeenMs = now
            counters.keepalivesEchoed += 1
            sendDatagram(UnsafeRawBufferPointer(rebasing: d[0..<FrameHeader.size]), to: from)

        case .voice:
            guard let s = sessionsByAddress[from] else { counters.dropUnbound += 1; return }
            guard let st = streamsBySSRC[header.ssrc], st.owner === s else { counters.dropSpoofedSSRC += 1; return }
            let opened: (header: FrameHeader, length: Int)
            do { opened = try MediaCrypto.open(d, key: s.media.receive) } catch {
                counters.dropAuthFailed += 1
                return
            }
            guard st.replay.accept(header.seq) == .fresh else { counters.dropReplay += 1; return }
            s.lastSeenMs = now
            guard st.take(rate: config.maxPacketsPerSecond, nowMs: now) else { counters.dropRateLimited += 1; return }
            guard !s.serverMuted else { counters.dropServerMuted += 1; return }
            counters.voiceRelayedIn += 1
            guard let ch = s.channel else { return }
            let opus = UnsafeRawBufferPointer(rebasing: d[FrameHeader.size..<(FrameHeader.size + opened.length)])
            for listener in ch.members where listener !== s && !listener.deafened {
                guard let to = listener.udpAddress else { continue }
                let n = MediaCrypto.seal(header: header, payload: opus, key: listener.media.send, into: txBuffer)
                sendDatagram(UnsafeRawBufferPointer(rebasing: txBuffer[0..<n]), to: to)
                counters.voiceRelayedOut += 1
            }
        }
    }

    func sendDatagram(_ bytes: UnsafeRawBufferPointer, to: SocketAddress) {
        do {
            if try udp.sendTo(bytes, to) == nil { counters.dropSendFailed += 1 } else { counters.udpOut += 1 }
        } catch {
            counters.dropSendFailed += 1
        }
    }
}
