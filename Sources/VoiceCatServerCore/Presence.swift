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
// JoinChannelResult is never ahead of the roster change it caused). Sessions that did
// not ask cost nothing; the relay path is not involved.
import VoiceCatProtocol
import VoiceCatSystem

/// Pending roster changes and the sessions that receive them (the loop thread's).
struct PresenceState {
    /// At most this long between a change and the message that tells it.
    static let intervalMs: UInt64 = 100
    /// Pending changes past this size go out at the end of the turn.
    static let flushBytes = 32 * 1024

    var subscribers: [Session] = []
    /// Encoded changes: user records (field 1), channels added (5) and retired (6).
    var pending = EntryList()
    /// Bumped each time the pending changes have been told to every subscriber.
    var generation: UInt64 = 0
    /// When the pending changes go out to everyone (nil: none pending).
    var flushAtMs: UInt64?
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

    /// Tells `s` the pending changes it has not been told yet (if it subscribed).
    func deliverPresence(to s: Session) {
        guard s.presence, let untold = s.presenceCursor.untold(count: presence.pending.count, generation: presence.generation) else {
            return
        }
        let c = s.connection
        guard !c.closed, c.phase == .active else { return }
        let before = counters.controlFramesOut
        let head = PresenceState.head
        sendEntries(c, presence.pending, untold, first: { _ in head }, next: { _ in head })
        counters.presenceUpdatesSent += counters.controlFramesOut - before
    }

    /// Tells every subscriber everything pending and starts a new generation. A send that
    /// fails can close a session (whose departure is then pending too): passes repeat
    /// until one adds nothing.
    func flushPresence() {
        presence.flushAtMs = nil
        while true {
            let end = presence.pending.count
            let list = presence.subscribers
            var i = 0
            while i < list.count { deliverPresence(to: list[i]); i += 1 }
            if presence.pending.count == end { break }
        }
        presence.pending.removeAll()
        presence.generation &+= 1
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
        s.presenceCursor.skip(count: presence.pending.count, generation: presence.generation)
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
            presence.pending.removeAll()
            presence.generation &+= 1
            presence.flushAtMs = nil
        }
    }
}
