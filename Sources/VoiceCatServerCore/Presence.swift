// The roster (presence): every session, the channel it is in, its server mute state and
// its published streams, told to the sessions that asked for it in Hello.
//
// What a change costs: the changed session's record is encoded once (the whole record,
// cached on the session) and appended to one list of pending changes shared by every
// subscriber. The list goes out as PresenceUpdate messages (split at the frame limit),
// to each subscriber from where it stopped: at the latest `intervalMs` after the first
// pending change (so a burst of changes, a login storm, costs each subscriber one
// message per interval, not one per change), at once when the list passes `flushBytes`,
// and before anything else the server sends a subscriber (so a reply such as
// JoinChannelResult is never ahead of the roster change it caused). A pass over the
// subscribers seals at most `ServerConfig.presenceBytesPerTurn` per loop turn and goes
// on in the next turns, so telling thousands of subscribers does not hold up the relay
// for a long turn. Sessions that did not ask cost nothing; the relay path is not
// involved.
import VoiceCatProtocol
import VoiceCatSystem

/// Pending roster changes and the sessions that receive them (the loop thread's).
struct PresenceState {
    /// At most this long between a change and the message that tells it.
    static let intervalMs: UInt64 = 100
    /// Pending changes past this size go out at the end of the turn.
    static let flushBytes = 32 * 1024

    var subscribers: [Session] = []
    /// Encoded changes not yet told to every subscriber: user records (field 1), channels
    /// added (5) and retired (6).
    var pending = EntryList()
    /// The number of changes ever dropped from the front of `pending` (all subscribers had
    /// them): a subscriber's position is counted from the first change ever.
    var base = 0
    /// When the pending changes go out to everyone (nil: nothing is waiting).
    var flushAtMs: UInt64?
    /// The next subscriber of the pass under way (0: none is).
    var passIndex = 0
    /// `PresenceUpdate` with no entries: every part starts with it.
    static let head = ControlMessage.presenceUpdate(PresenceUpdate()).encode()
}

extension Server {
    // MARK: changes

    /// `s`'s record changed (login, channel, mute, streams): every subscriber hears of it.
    func notePresence(_ s: Session) {
        s.refreshPresenceEntry()
        appendPresence(s.presenceEntry)
    }

    /// `s`'s session ended.
    func notePresenceGone(_ s: Session) {
        appendPresence(UserPresence(userID: s.userID, username: "", gone: true).encoded(asField: UserList.usersField))
    }

    /// A reload added and retired channels.
    func noteChannelsChanged(added: [Channel], retired: [UInt32]) {
        for ch in added { appendPresence(ch.info.encoded(asField: HelloResult.channelsField)) }
        for id in retired { appendPresence(PresenceUpdate.removedChannelEntry(id)) }
    }

    private func appendPresence(_ entry: [UInt8]) {
        guard !stopping, !presence.subscribers.isEmpty else { return }
        presence.pending.append(entry)
        if presence.pending.size(0..<presence.pending.count) >= PresenceState.flushBytes {
            presence.flushAtMs = now
        } else if presence.flushAtMs == nil {
            presence.flushAtMs = now + PresenceState.intervalMs
        }
    }

    // MARK: telling

    /// Tells `s` the pending changes it has not been told yet (if it subscribed); returns
    /// the bytes of changes that took.
    @discardableResult
    func deliverPresence(to s: Session) -> Int {
        guard s.presence else { return 0 }
        let from = max(s.presenceSeen, presence.base) - presence.base, count = presence.pending.count
        guard from < count else { return 0 }
        s.presenceSeen = presence.base + count
        let c = s.connection
        guard !c.closed, c.phase == .active else { return 0 }
        let before = counters.controlFramesOut
        let head = PresenceState.head
        sendEntries(c, presence.pending, from..<count, first: { _ in head }, next: { _ in head })
        counters.presenceUpdatesSent += counters.controlFramesOut - before
        return presence.pending.size(from..<count)
    }

    /// A pass over the subscribers telling each what it has not been told, within this
    /// turn's budget (`presenceBytesPerTurn`); it goes on next turn where it stopped.
    /// When a pass is done, the changes every subscriber has are dropped; what came in
    /// meanwhile (a send that fails can close a session, whose departure is then pending
    /// too) waits for the next pass.
    func flushPresence() {
        var budget = live.presenceBytesPerTurn
        while presence.passIndex < presence.subscribers.count && budget > 0 {
            let s = presence.subscribers[presence.passIndex]
            presence.passIndex += 1
            budget -= max(1, deliverPresence(to: s))
        }
        if presence.passIndex < presence.subscribers.count {
            presence.flushAtMs = now   // the rest of the pass in the next turn
            return
        }
        presence.passIndex = 0
        var told = presence.base + presence.pending.count
        var i = 0
        while i < presence.subscribers.count { told = min(told, presence.subscribers[i].presenceSeen); i += 1 }
        let drop = told - presence.base
        if drop > 0 {
            presence.pending.removeFirst(drop)
            presence.base += drop
        }
        presence.flushAtMs = presence.pending.count == 0 ? nil : now + PresenceState.intervalMs
    }

    // MARK: subscribers

    /// Sends `s` the roster (after its HelloResult) and subscribes it to the changes.
    func subscribePresence(_ s: Session) {
        var roster = EntryList()
        for other in sessionsByUserID.values { roster.append(other.presenceEntry) }
        sendEntries(s.connection, roster, 0..<roster.count,
                    first: { more in ControlMessage.userList(UserList(users: [], more: more)).encode() },
                    next: { more in ControlMessage.userList(UserList(users: [], more: more)).encode() })
        s.presence = true
        s.presenceIndex = presence.subscribers.count
        presence.subscribers.append(s)
        // The roster already holds every change made so far.
        s.presenceSeen = presence.base + presence.pending.count
    }

    func unsubscribePresence(_ s: Session) {
        guard s.presence else { return }
        s.presence = false
        let i = s.presenceIndex
        let last = presence.subscribers.removeLast()
        if last !== s {
            presence.subscribers[i] = last
            last.presenceIndex = i
        }
        if presence.subscribers.isEmpty {
            presence.base += presence.pending.count
            presence.pending.removeAll()
            presence.flushAtMs = nil
            presence.passIndex = 0
        }
    }
}
