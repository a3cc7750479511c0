// The control plane beyond joining: the server's roster (every user, the channel each
// is in, server mute state, published streams) and channel list, kept up to date by the
// server's presence messages; publishing one's own stream state; admin requests (server
// mute, kick); jitter-buffer bounds per remote stream.
//
// The roster lives in the session state (under `cond`): the connect reads the server's
// UserList before it returns, the network thread applies each PresenceUpdate (checked
// first: a hostile server's message is refused whole, never half applied) and raises
// one event per changed user, in the order the server told them. The server tells a
// client the roster change its own request caused before the reply, so when a join,
// stream start or admin request returns, the lists already show its effect.
import VoiceCatABI
import VoiceCatAudio
import VoiceCatProtocol
import VoiceCatSystem

/// One user of the server as the roster says (vc_user_info).
public struct UserInfo: Equatable {
    public var userID: UInt32
    public var username: String
    /// The channel the user is in; 0 = none.
    public var channelID: UInt32
    public var serverMuted: Bool
    public var serverDeafened: Bool
    public var streams: [StreamPresence]
    /// This client's own session.
    public var isSelf: Bool
}

/// One channel of the server (vc_channel_info).
public struct ChannelListing: Equatable {
    public var id: UInt32
    public var name: String
    public var audio: AudioConfig
    /// Users in it, as the roster says (0 when the server sends no roster).
    public var memberCount: Int
    /// The channel this client is in.
    public var isCurrent: Bool
}

/// Bounds on a remote stream's target playout depth (vc_set_jitter_bounds), in ms; 0 = none.
public struct JitterBounds: Equatable {
    public var minMs: UInt32
    public var maxMs: UInt32
    public static let none = JitterBounds(minMs: 0, maxMs: 0)
    /// The largest bound accepted (the buffer holds at most 62 frames, 500 ms beyond the frame in play).
    public static let limitMs: UInt32 = 10_000
    public init(minMs: UInt32, maxMs: UInt32) { self.minMs = minMs; self.maxMs = maxMs }
}

/// What changed in a user's record (the code of VC_EVENT_USER_UPDATED).
public struct UserChanges: OptionSet {
    public let rawValue: Int32
    public init(rawValue: Int32) { self.rawValue = rawValue }
    public static let channel = UserChanges(rawValue: Int32(VC_USER_CHANGED_CHANNEL))
    public static let serverMute = UserChanges(rawValue: Int32(VC_USER_CHANGED_SERVER_MUTE))
    public static let streams = UserChanges(rawValue: Int32(VC_USER_CHANGED_STREAMS))
}

extension vc_event_type {
    public static let userConnected = VC_EVENT_USER_CONNECTED
    public static let userUpdated = VC_EVENT_USER_UPDATED
    public static let userDisconnected = VC_EVENT_USER_DISCONNECTED
    public static let channelsChanged = VC_EVENT_CHANNELS_CHANGED
}

extension VoiceClient {
    /// Admin requests may be held by the server's backoff after wrong admin passwords
    /// (up to auth_backoff_max_seconds, 16 s by default).
    static let adminTimeoutMs = 20_000

    // MARK: lists

    /// Every user on the server (vc_list_users), by user id.
    public func users() throws -> [UserInfo] {
        try failing {
            try cond.withLock {
                guard phase == .connected else { throw ClientError.state(phase == .reconnecting ? "reconnecting to the server" : "not connected") }
                guard let r = roster else { throw ClientError.unsupported("the server sends no user list (it predates presence)") }
                let me = hello?.userID ?? 0
                return r.values.sorted { $0.userID < $1.userID }.map {
                    UserInfo(userID: $0.userID, username: $0.username, channelID: $0.channelID, serverMuted: $0.muted,
                             serverDeafened: $0.deafened, streams: $0.streams, isSelf: $0.userID == me)
                }
            }
        }
    }

    /// The server's channels (vc_list_channels), in the server's order.
    public func channels() throws -> [ChannelListing] {
        try failing {
            try cond.withLock {
                guard phase == .connected, let h = hello else {
                    throw ClientError.state(phase == .reconnecting ? "reconnecting to the server" : "not connected")
                }
                var members: [UInt32: Int] = [:]
                for u in (roster ?? [:]).values where u.channelID != 0 { members[u.channelID, default: 0] += 1 }
                return h.channels.map {
                    ChannelListing(id: $0.id, name: $0.name, audio: $0.audio, memberCount: members[$0.id] ?? 0,
                                   isCurrent: $0.id == channelID && channelID != 0)
                }
            }
        }
    }

    // MARK: requests

    /// Publishes a local stream's mute / hold state (StreamStateUpdate): listeners in the
    /// channel get STREAM_STATE_UPDATE, every roster USER_UPDATED. The audio is not touched.
    public func setStreamState(streamID: UInt32, muted: Bool, hold: Bool) throws {
        func notConnected() -> ClientError {
            .state(phase == .reconnecting ? "reconnecting to the server" : "not connected")
        }
        // Not connected first: no stream exists then, and that is not the reason.
        try failing { try cond.withLock { if phase != .reconnecting && (phase != .connected || control == nil) { throw notConnected() } } }
        try failing {
            _ = try streams.withStream(streamID) { s, _ in s.ssrc }
            // Stored and sent in one step, so that what the server has last is what was
            // set last (a reconnect tells the states set in its gap: publishStatesSetInGap).
            try stateSendLock.withLock {
                let conn = try cond.withLock { () throws -> ControlConnection? in
                    if phase == .reconnecting {
                        streamStates[streamID] = (muted, hold)
                        statesSetInGap.insert(streamID)
                        return nil
                    }
                    guard phase == .connected, let c = control else { throw notConnected() }
                    streamStates[streamID] = (muted, hold)
                    return c
                }
                guard let conn else { return }   // kept for the reconnected session
                let ssrc = try streams.withStream(streamID) { s, _ in s.ssrc }
                do { try conn.send(.streamStateUpdate(StreamStateUpdate(ssrc: ssrc, muted: muted, hold: hold))) } catch {
                    if let e = error as? ClientError, case .state = e { throw e }   // the session is ending
                    // The connection broke under this send: with auto_reconnect the state
                    // is kept (stored above) and told to the reconnected session, as one
                    // set in the gap that follows.
                    if config.autoReconnect { return }
                    throw ClientError.network("cannot send the stream state: \(error)")
                }
            }
        }
    }

    /// Server mute / deafen of any user, with the server's admin password; returns once the
    /// server carried it out (the roster shows it then). A wrong password is VC_ERR_AUTH.
    public func adminSetServerMute(userID: UInt32, muted: Bool, deafened: Bool, adminPassword: String) throws {
        try refuseInCallback("vc_admin_set_server_mute")
        try checkAdminPassword(adminPassword)
        try adminRequest(what: "server mute") {
            .setServerMute(SetServerMute(userID: userID, muted: muted, deafened: deafened, adminPassword: adminPassword, requestID: $0))
        }
    }

    /// An admin password longer than any server's is refused before it is sent.
    private func checkAdminPassword(_ pw: String) throws {
        if let p = RequestTextRules.problem(pw, what: "admin_password", maxBytes: RequestTextRules.maxPasswordBytes) {
            throw fail(.invalidArgument(p))
        }
    }

    /// Removes a user from the server, with the admin password; `reason` is shown to them.
    public func adminKick(userID: UInt32, reason: String, adminPassword: String) throws {
        try refuseInCallback("vc_admin_kick")
        if let p = RequestTextRules.problem(reason, what: "reason", maxBytes: RequestTextRules.maxReasonBytes) {
            throw fail(.invalidArgument(p))
        }
        try checkAdminPassword(adminPassword)
        try adminRequest(what: "kick") { .kickUser(KickUser(userID: userID, adminPassword: adminPassword, reason: reason, requestID: $0)) }
    }

    private func adminRequest(what: String, _ make: (UInt32) -> ControlMessage) throws {
        try failing {
            let reply = try request(make, expecting: .adminResult, timeoutMs: VoiceClient.adminTimeoutMs)
            switch reply {
            case .adminResult: return
            case .error(let e): throw VoiceClient.mapServerError(e)
            default: throw ClientError.protocolError("unexpected reply \(reply.type) to the \(what) request")
            }
        }
    }

    /// Bounds on the target playout depth of one remote stream, or (ssrc 0) of every
    /// stream received now and later; (0, 0) lifts them.
    public func setJitterBounds(ssrc: UInt32, _ b: JitterBounds) throws {
        guard b.minMs <= JitterBounds.limitMs, b.maxMs <= JitterBounds.limitMs else {
            throw fail(.invalidArgument("jitter bounds must be at most \(JitterBounds.limitMs) ms (got \(b.minMs)..\(b.maxMs))"))
        }
        guard b.maxMs == 0 || b.minMs <= b.maxMs else {
            throw fail(.invalidArgument("min_ms \(b.minMs) is above max_ms \(b.maxMs)"))
        }
        if ssrc == 0 { receive.setDefaultBounds(b); return }
        try failing { try receive.withSlot(ssrc: ssrc) { $0.applyJitterBounds(b) } }
    }

    // MARK: the network thread

    /// The roster read at connect (entries that break the rules left out, with the reason).
    static func checkedRoster(_ users: [UserPresence], refused: inout [String]) -> [UInt32: UserPresence] {
        var out: [UInt32: UserPresence] = [:]
        for u in users {
            if u.gone { continue }
            if let p = u.problem { refused.append("refused a record of the server's user list: \(p)"); continue }
            out[u.userID] = u
        }
        return out
    }

    /// Applies a PresenceUpdate (network thread): whole or not at all, one event per changed
    /// user (and one for a changed channel list), in the server's order.
    func applyPresence(_ m: ControlMessage, _ u: PresenceUpdate) {
        var raised: [ClientEvent] = []
        let problem: String? = cond.withLock {
            guard var r = roster, var h = hello else { return "no user list was asked for" }
            if !u.channels.isEmpty || !u.removedChannelIDs.isEmpty {
                for ch in u.channels {
                    if let i = h.channels.firstIndex(where: { $0.id == ch.id }) { h.channels[i] = ch } else { h.channels.append(ch) }
                }
                let removed = Set(u.removedChannelIDs)
                h.channels.removeAll { removed.contains($0.id) }
                if h.channels.count > ServerMessageLimits.maxChannels {
                    return "the channel list would hold \(h.channels.count) channels (at most \(ServerMessageLimits.maxChannels))"
                }
                raised.append(ClientEvent(type: .channelsChanged))
            }
            for rec in u.users {
                if rec.gone {
                    guard let old = r.removeValue(forKey: rec.userID) else { return "user \(rec.userID) is not in the user list" }
                    var e = ClientEvent(type: .userDisconnected)
                    e.userID = old.userID; e.channelID = old.channelID; e.text = old.username
                    raised.append(e)
                    continue
                }
                var e = ClientEvent(type: .userConnected)
                if let old = r[rec.userID] {
                    var changes: UserChanges = []
                    if old.channelID != rec.channelID { changes.insert(.channel) }
                    if old.muted != rec.muted || old.deafened != rec.deafened { changes.insert(.serverMute) }
                    if old.streams != rec.streams { changes.insert(.streams) }
                    if changes.isEmpty && old.username == rec.username { continue }
                    e = ClientEvent(type: .userUpdated)
                    e.code = changes.rawValue
                }
                if r.count >= ServerMessageLimits.maxUsers && r[rec.userID] == nil {
                    return "the user list would hold over \(ServerMessageLimits.maxUsers) users"
                }
                r[rec.userID] = rec
                e.userID = rec.userID; e.channelID = rec.channelID; e.text = rec.username
                e.muted = rec.muted; e.deafened = rec.deafened
                raised.append(e)
            }
            roster = r
            hello = h
            return nil
        }
        if let problem { return refuse(m, problem) }
        for e in raised { events.raise(e) }
    }

    /// The ssrc's user, stream id, kind and username while it is received (network thread).
    func remoteIdentity(ssrc: UInt32) -> (userID: UInt32, streamID: UInt32, kind: StreamKind, username: String)? {
        guard let i = receive.slotIndex(ssrc: ssrc) else { return nil }
        let s = receive.slots[i]
        return s.lock.withLock { (s.userID, s.streamID, s.kind, s.username) }
    }

    /// After a reconnect re-announced a stream: its published state is told again
    /// (a stream starts unmuted and not on hold: only a state other than that).
    func republishStreamState(_ conn: ControlConnection, streamID: UInt32, ssrc: UInt32) {
        let state = cond.withLock { () -> (muted: Bool, hold: Bool)? in
            statesSetInGap.remove(streamID)
            return streamStates[streamID]
        }
        guard let (muted, hold) = state, muted || hold else { return }
        try? conn.send(.streamStateUpdate(StreamStateUpdate(ssrc: ssrc, muted: muted, hold: hold)))
    }

    /// Once a reconnect has resumed the session: the states set in its gap after
    /// their stream was announced again are told now (as set, unmuted too).
    func publishStatesSetInGap(_ conn: ControlConnection) {
        stateSendLock.withLock {
            let late = cond.withLock { () -> [(UInt32, (muted: Bool, hold: Bool))] in
                defer { statesSetInGap = [] }
                return statesSetInGap.compactMap { id in streamStates[id].map { (id, $0) } }
            }
            for (id, state) in late {
                guard let ssrc = try? streams.withStream(id, { s, _ in s.ssrc }) else { continue }
                try? conn.send(.streamStateUpdate(StreamStateUpdate(ssrc: ssrc, muted: state.muted, hold: state.hold)))
            }
        }
    }
}

extension ReceiveSet {
    /// Bounds for every stream received now and later (vc_set_jitter_bounds with ssrc 0).
    func setDefaultBounds(_ b: JitterBounds) {
        boundsLock.withLock {
            defaultBounds = b
            for s in slots where s.live.load(ordering: .acquiring) {
                s.lock.withLock { if s.active { s.applyJitterBounds(b) } }
            }
        }
    }
}

extension RemoteSlot {
    /// Bounds the target depth (the frame in play plus the jitter buffer's cushion) to
    /// [minMs, maxMs]; 0 = no bound. Lock held by the caller.
    func applyJitterBounds(_ b: JitterBounds) {
        let frameMs = Double(frameSamples) / 48
        let lo = b.minMs == 0 ? 0 : max(0, Double(b.minMs) - frameMs)
        let hi = b.maxMs == 0 ? Double.nan : max(0, Double(b.maxMs) - frameMs)
        jitter.setBounds(minMs: lo, maxMs: hi)
    }
}
