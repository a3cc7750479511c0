// Abuse limits: connections not yet logged in are capped per source address and in all
// (the oldest is evicted first), and wrong passwords (server and admin) slow down the
// answers to the address they came from, then cost the connection.
import VoiceCatProtocol
import VoiceCatSystem

extension Server {
    /// How long wrong passwords from an address are remembered.
    var authForgetMs: UInt64 { max(600_000, UInt64(live.authBackoffMaxSeconds * 4_000)) }

    // MARK: connections not logged in

    func trackUnauthenticated(_ c: Connection) {
        c.unauthenticated = true
        unauthenticatedByHost[c.peer.host, default: []].append(c)
        unauthenticatedQueue.append(c)
        unauthenticatedCount += 1
        compactUnauthenticatedQueue()
    }

    func forgetUnauthenticated(_ c: Connection) {
        guard c.unauthenticated else { return }
        c.unauthenticated = false
        unauthenticatedCount -= 1
        let host = c.peer.host
        if var list = unauthenticatedByHost[host] {
            list.removeAll { $0 === c }
            unauthenticatedByHost[host] = list.isEmpty ? nil : list
        }
        compactUnauthenticatedQueue()
    }

    /// The global queue drops entries lazily (evicted ones stay before its head, ones
    /// that logged in or left stay where they were); it is compacted once it is mostly
    /// stale, counting both, so it holds at most about twice the connections waiting.
    /// (Counting only those after the head, a flood from many addresses, evicted by the
    /// global cap, grew it without end: 349 MB in 30 s, helper-87.)
    private func compactUnauthenticatedQueue() {
        guard unauthenticatedQueue.count > 2 * unauthenticatedCount + 64 else { return }
        unauthenticatedQueue = unauthenticatedQueue[unauthenticatedQueueHead...].filter { $0.unauthenticated }
        unauthenticatedQueueHead = 0
    }

    /// Before accepting a connection from `host`: the oldest connection not logged in from
    /// that address goes when the address is at its cap (the oldest that has not finished
    /// its handshake, if any: one that has is a login's round trip from done, and a flood
    /// of stalled connections from a shared address evicted honest clients midway,
    /// helper-87), and the oldest of all when the server is at its global cap.
    func makeRoomForUnauthenticated(from host: SocketAddress) {
        while let list = unauthenticatedByHost[host], list.count >= live.maxUnauthenticatedPerAddress {
            counters.unauthenticatedEvicted += 1
            let victim = list.first { $0.phase == .awaitingClientHello } ?? list[0]
            close(victim, reason: "evicted: \(list.count) connections from \(host) not logged in")
        }
        while unauthenticatedCount >= live.maxUnauthenticated {
            guard evictOldestUnauthenticated(reason: "evicted: \(unauthenticatedCount) connections not logged in") else { break }
        }
    }

    @discardableResult
    func evictOldestUnauthenticated(reason: String) -> Bool {
        while unauthenticatedQueueHead < unauthenticatedQueue.count {
            let c = unauthenticatedQueue[unauthenticatedQueueHead]
            unauthenticatedQueueHead += 1
            guard c.unauthenticated, !c.closed else { continue }
            counters.unauthenticatedEvicted += 1
            close(c, reason: reason)
            return true
        }
        return false
    }

    // MARK: wrong passwords

    /// The hold before answering a request from an address with `failures` recent wrong
    /// passwords: 0, then base, 2 base, 4 base, ... up to the maximum.
    func backoffMs(failures f: Int) -> UInt64 {
        guard f > 0 else { return 0 }
        let seconds = min(live.authBackoffMaxSeconds, live.authBackoffBaseSeconds * Double(1 << min(f - 1, 30)))
        return UInt64(seconds * 1000)
    }

    /// Holds `msg` (a Hello, SetServerMute or KickUser) when its address has recent wrong passwords:
    /// every such request waits, right or wrong, so the wait says nothing about the
    /// password. The connection is not read meanwhile. True when held.
    func holdForBackoff(_ c: Connection, _ msg: ControlMessage, _ failures: AuthFailures) -> Bool {
        let wait = backoffMs(failures: failures.failures(c.peer.host, now: now, forgetMs: authForgetMs))
        guard wait > 0 else { return false }
        counters.authDelayed += 1
        c.heldMessage = msg
        c.heldUntilMs = now + wait
        updateInterest(c)
        schedule(c)
        return true
    }

    /// The hold is over: answer the held request and read the connection again.
    func releaseHeld(_ c: Connection) {
        let m = c.heldMessage
        c.heldMessage = nil
        c.heldUntilMs = nil
        updateInterest(c)
        addToBacklog(c)
        switch m {
        case .hello(let h)?: hello(c, h, held: true)
        case .setServerMute(let x)?: if let s = c.session { setServerMute(s, x, held: true) }
        case .kickUser(let k)?: if let s = c.session { kick(s, k, held: true) }
        default: break
        }
    }

    /// A wrong password on `c`: remembered for its address, answered with `reply`, and
    /// after `max_auth_failures` on one connection the connection is closed.
    func wrongPassword(_ c: Connection, admin: Bool, reply: ErrorMessage) {
        if admin {
            counters.adminRejected += 1
            adminPasswordFailures.record(c.peer.host, now: now, forgetMs: authForgetMs)
        } else {
            counters.authRejected += 1
            serverPasswordFailures.record(c.peer.host, now: now, forgetMs: authForgetMs)
            // Another try is allowed on this connection: it gets a fresh login deadline.
            c.loginDeadlineMs = now + loginMs
        }
        c.authFailures += 1
        send(c, .error(reply))
        if c.authFailures >= live.maxAuthFailures {
            counters.authDisconnected += 1
            closeAfterFlush(c, reason: "\(c.authFailures) wrong passwords")
        }
    }
}
