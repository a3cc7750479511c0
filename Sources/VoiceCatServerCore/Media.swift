// The media plane: UDP_BINDING with its return-routability cookie, KEEPALIVE echo and
// the VOICE relay with a per-listener reseal (PROTOCOL.md §3). Datagrams come in by
// recvmmsg batches and go out by sendmmsg batches, resealed straight into preallocated
// slots: nothing on this path allocates.
import VoiceCatProtocol
import VoiceCatSystem

extension Server {
    /// Cookies are valid in the window they were made in and the one after (30 to 60 s).
    static let cookieWindowMs: UInt64 = 30_000

    func drainUDP() {
        // Bounded so a flood cannot starve the TCP side of the loop.
        for _ in 0..<Server.udpBatchesPerTurn {
            let n: Int
            do { n = try rx.receive(from: udp) } catch {
                log("recvmmsg failed: \(error)")
                return
            }
            for i in 0..<n {
                counters.udpIn += 1
                let d = rx.datagram(i)
                guard !rx.wasTruncated(i), d.count <= live.maxDatagramBytes else {
                    counters.dropOversize += 1
                    noticeOversize(d.count, truncated: rx.wasTruncated(i), from: rx.source(i))
                    continue
                }
                handleDatagram(d, from: rx.source(i))
            }
            flushDatagrams()
            if n < rx.capacity { return }
        }
    }

    /// An oversize drop is never silent to a bound sender: an Error, at most one per 5 s.
    func noticeOversize(_ n: Int, truncated: Bool, from: SocketAddress) {
        guard let s = sessionsByAddress[from] else { return }
        if let last = s.oversizeNoticeMs, now &- last < 5000 { return }
        s.oversizeNoticeMs = now
        send(s.connection, .error(ErrorMessage(code: .limitReached, message: "a datagram of \(truncated ? "over " : "")\(n) bytes from this session "
                                               + "was dropped: it exceeds max_datagram_bytes \(live.maxDatagramBytes)")))
    }

    func flushDatagrams() {
        let r = tx.send(on: udp)
        counters.udpOut += UInt64(r.sent)
        counters.dropSendFailed += UInt64(r.failed)
    }

    /// The next free send slot (sending the batch first when it is full).
    func sendSlot() -> UnsafeMutableRawBufferPointer {
        if tx.isFull { flushDatagrams() }
        return tx.nextSlot()
    }

    func handleDatagram(_ d: UnsafeMutableRawBufferPointer, from: SocketAddress) {
        let header: FrameHeader
        do { header = try FrameHeader.parse(UnsafeRawBufferPointer(d)) } catch {
            counters.dropMalformed += 1
            return
        }
        switch header.type {
        case .udpBinding:
            binding(d, header, from: from)

        case .keepalive:
            guard let s = sessionsByAddress[from], s.bindingID == header.ssrc else { counters.dropUnbound += 1; return }
            s.lastSeenMs = now
            counters.keepalivesEchoed += 1
            let slot = sendSlot()
            slot.baseAddress!.copyMemory(from: d.baseAddress!, byteCount: FrameHeader.size)
            tx.commit(length: FrameHeader.size, to: from)

        case .voice:
            guard let s = sessionsByAddress[from] else { counters.dropUnbound += 1; return }
            guard let st = streamsBySSRC[header.ssrc], st.owner === s else {
                // A frame of a stream this session just removed, still in flight, if it
                // opens with the session's key; anything else names an ssrc not its own.
                if s.endedStreams.contains(header.ssrc, nowMs: now), (try? MediaCrypto.open(d, key: s.media.receive)) != nil {
                    counters.dropEndedStream += 1
                } else {
                    counters.dropSpoofedSSRC += 1
                }
                return
            }
            let opened: (header: FrameHeader, length: Int)
            do { opened = try MediaCrypto.open(d, key: s.media.receive) } catch {
                counters.dropAuthFailed += 1
                return
            }
            guard st.replay.accept(header.seq) == .fresh else { counters.dropReplay += 1; return }
            s.lastSeenMs = now
            switch st.take(bytes: d.count, rate: live.maxPacketsPerSecond, bitrateFactor: live.maxStreamBitrateFactor, nowMs: now) {
            case .admitted: break
            case .overPacketRate: counters.dropRateLimited += 1; return
            case .overBitrate: counters.dropBitrate += 1; return
            }
            guard !s.serverMuted else { counters.dropServerMuted += 1; return }
            counters.voiceRelayedIn += 1
            guard let ch = s.channel else { return }
            let opus = UnsafeRawBufferPointer(rebasing: d[FrameHeader.size..<(FrameHeader.size + opened.length)])
            // An index loop: a for-in over the array allocates an iterator frame per packet in a debug build.
            let members = ch.members
            var i = 0
            while i < members.count {
                let listener = members[i]
                i += 1
                guard listener !== s, !listener.deafened, let to = listener.udpAddress else { continue }
                let n = MediaCrypto.seal(header: header, payload: opus, key: listener.media.send, into: sendSlot())
                tx.commit(length: n, to: to)
                counters.voiceRelayedOut += 1
            }
        }
    }

    /// UDP_BINDING REQUEST: an address is bound (or moved) only with a cookie proving the
    /// client receives datagrams there; otherwise the address gets a CHALLENGE carrying one.
    func binding(_ d: UnsafeMutableRawBufferPointer, _ header: FrameHeader, from: SocketAddress) {
        guard let s = sessionsByBinding[header.ssrc] else { counters.dropUnbound += 1; return }
        let opened: (header: FrameHeader, length: Int)
        do { opened = try MediaCrypto.open(d, key: s.bind.receive) } catch {
            counters.dropAuthFailed += 1
            return
        }
        let request: UDPBindingPayload
        do { request = try UDPBindingPayload.parse(UnsafeRawBufferPointer(rebasing: d[FrameHeader.size..<(FrameHeader.size + opened.length)])) } catch {
            counters.dropMalformed += 1
            return
        }
        guard request.kind == .request, request.sessionID == s.id, request.epoch == s.epoch else { counters.dropMalformed += 1; return }
        guard s.bindReplay.accept(header.seq) == .fresh else { counters.dropReplay += 1; return }
        s.lastSeenMs = now
        let window = now / Server.cookieWindowMs
        var answer = UDPBindingPayload(sessionID: s.id, epoch: s.epoch, kind: .bound, cookie: request.cookie)
        if s.udpAddress == from {
            // Already bound there: a retry whose answer was lost.
        } else if request.cookie != .none,
                  request.cookie == cookie(s, from, window: window) || request.cookie == cookie(s, from, window: window &- 1) {
            if let old = s.udpAddress, sessionsByAddress[old] === s { sessionsByAddress[old] = nil }
            if let other = sessionsByAddress[from], other !== s { other.udpAddress = nil }
            s.udpAddress = from
            sessionsByAddress[from] = s
            counters.bindingsAccepted += 1
        } else {
            if request.cookie != .none { counters.dropBindingCookie += 1 }
            counters.bindingChallenges += 1
            answer.kind = .challenge
            answer.cookie = cookie(s, from, window: window)
        }
        let n = answer.seal(bindingID: s.bindingID, seq: s.bindSendSeq, key: s.bind.send, into: sendSlot())
        s.bindSendSeq += 1
        tx.commit(length: n, to: from)
    }

    /// The cookie for `s` at `address` in a time window: keyed BLAKE2b over the session,
    /// its epoch, the window and the address bytes.
    func cookie(_ s: Session, _ address: SocketAddress, window: UInt64) -> BindingCookie {
        var m = [UInt8]()
        m.reserveCapacity(20 + 28)
        for shift in stride(from: 56, through: 0, by: -8) { m.append(UInt8(truncatingIfNeeded: s.id >> UInt64(shift))) }
        for shift in stride(from: 24, through: 0, by: -8) { m.append(UInt8(truncatingIfNeeded: s.epoch >> UInt32(shift))) }
        for shift in stride(from: 56, through: 0, by: -8) { m.append(UInt8(truncatingIfNeeded: window >> UInt64(shift))) }
        address.withRawBytes { m.append(contentsOf: $0) }
        return BindingCookie(bytes: blake2b256(m, key: cookieSecret))
    }
}
