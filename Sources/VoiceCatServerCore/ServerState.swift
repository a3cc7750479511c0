// The server's model: sessions, channels, streams, connections and the counters it keeps.
// Owned and mutated by the event-loop thread only.
import VoiceCatProtocol
import VoiceCatSystem

/// What the server counts. A snapshot is published for other threads every loop turn.
public struct ServerCounters: Equatable, Sendable {
    public var tcpAccepted: UInt64 = 0
    /// Connections refused at accept (descriptor limit).
    public var tcpRejected: UInt64 = 0
    /// Not-yet-logged-in connections closed to make room (per-address or global cap).
    public var unauthenticatedEvicted: UInt64 = 0
    public var sessionsOpened: UInt64 = 0
    public var sessionsActive: UInt64 = 0
    public var sessionsReaped: UInt64 = 0
    /// Sessions ended by a new connection of the same client naming their resume token.
    public var sessionsResumed: UInt64 = 0
    public var handshakeVersionMismatch: UInt64 = 0
    public var controlFramesIn: UInt64 = 0
    public var controlFramesOut: UInt64 = 0
    /// Connections closed for bad control input (auth failure, oversize, bad protobuf, stall,
    /// handshake or login deadline).
    public var controlProtocolErrors: UInt64 = 0
    /// Connections closed because they were not logged in by the login deadline.
    public var loginTimeouts: UInt64 = 0
    /// Times a connection was paused for exceeding its control-message rate.
    public var controlThrottled: UInt64 = 0
    /// Entries in the server's deadline heap (live and stale) at the end of the loop's
    /// last turn: bounded by the connections open, not by how many came and went.
    public var deadlineEntries: Int = 0
    /// Entries in the queue of connections not logged in (live and stale) at the end of
    /// the loop's last turn: bounded by the connections waiting, not by the evictions.
    public var unauthenticatedQueueEntries: Int = 0
    /// Control messages the server built that did not fit one frame and were not sent
    /// (lists are split beforehand, so this stays 0 unless something is wrong).
    public var controlOversize: UInt64 = 0
    /// Messages sent as the continuation of a split list (ChannelList, MemberList, and
    /// UsersJoined/UsersLeft parts).
    public var listPartsSent: UInt64 = 0
    /// Logins refused (wrong password, name taken, full, bad version or name).
    public var authRejected: UInt64 = 0
    /// Hellos and SetServerMutes answered late because their address had recent wrong passwords.
    public var authDelayed: UInt64 = 0
    /// Connections closed after `max_auth_failures` wrong passwords.
    public var authDisconnected: UInt64 = 0
    /// SetServerMute and KickUser requests refused for the admin password (a wrong one,
    /// none given, or admin requests off; only a wrong one counts towards the backoff).
    public var adminRejected: UInt64 = 0
    /// Sessions removed by an admin (KickUser).
    public var kicks: UInt64 = 0
    /// PresenceUpdate messages sent (all subscribers, all parts).
    public var presenceUpdatesSent: UInt64 = 0
    public var reloads: UInt64 = 0
    public var udpIn: UInt64 = 0
    public var udpOut: UInt64 = 0
    public var voiceRelayedIn: UInt64 = 0
    public var voiceRelayedOut: UInt64 = 0
    public var keepalivesEchoed: UInt64 = 0
    public var bindingsAccepted: UInt64 = 0
    /// Binding requests answered with a cookie challenge (address not yet proven).
    public var bindingChallenges: UInt64 = 0
    public var dropMalformed: UInt64 = 0
    public var dropOversize: UInt64 = 0
    public var dropUnbound: UInt64 = 0
    public var dropSpoofedSSRC: UInt64 = 0
    /// Authentic frames of a stream its session removed within `EndedStreams.graceMs`
    /// (in flight when it stopped or restarted the stream): not spoofing.
    public var dropEndedStream: UInt64 = 0
    public var dropAuthFailed: UInt64 = 0
    public var dropReplay: UInt64 = 0
    public var dropRateLimited: UInt64 = 0
    /// Frames over their stream's byte budget (`max_stream_bitrate_factor` of its
    /// channel's bitrate): a sender flooding listeners' downlinks with large frames.
    public var dropBitrate: UInt64 = 0
    public var dropServerMuted: UInt64 = 0
    /// Binding requests whose cookie was wrong or stale (answered with a new challenge).
    public var dropBindingCookie: UInt64 = 0
    public var dropSendFailed: UInt64 = 0
    /// Loss feedback: stream reports taken from listeners, reports ignored (a stream the
    /// listener does not receive, counts that cannot be, a deafened or channel-less
    /// listener), and feedback messages sent to publishers.
    public var lossReports: UInt64 = 0
    public var lossReportsIgnored: UInt64 = 0
    public var lossFeedbackSent: UInt64 = 0

    public init() {}

    /// All drops of media datagrams.
    public var mediaDrops: UInt64 {
        dropMalformed + dropOversize + dropUnbound + dropSpoofedSSRC + dropEndedStream + dropAuthFailed + dropReplay
            + dropRateLimited + dropBitrate + dropServerMuted + dropBindingCookie
    }

    public var summary: String {
        "sessions=\(sessionsActive) opened=\(sessionsOpened) reaped=\(sessionsReaped) resumed=\(sessionsResumed) tcp_accepted=\(tcpAccepted) "
            + "tcp_rejected=\(tcpRejected) unauth_evicted=\(unauthenticatedEvicted) login_timeouts=\(loginTimeouts) "
            + "ctrl_in=\(controlFramesIn) ctrl_out=\(controlFramesOut) ctrl_errors=\(controlProtocolErrors) "
            + "ctrl_throttled=\(controlThrottled) ctrl_oversize=\(controlOversize) list_parts=\(listPartsSent) "
            + "auth_rejected=\(authRejected) auth_delayed=\(authDelayed) auth_disconnected=\(authDisconnected) "
            + "admin_rejected=\(adminRejected) kicks=\(kicks) presence_updates=\(presenceUpdatesSent) reloads=\(reloads) "
            + "udp_in=\(udpIn) udp_out=\(udpOut) voice_in=\(voiceRelayedIn) voice_out=\(voiceRelayedOut) "
            + "keepalives=\(keepalivesEchoed) bindings=\(bindingsAccepted) binding_challenges=\(bindingChallenges) "
            + "drop_malformed=\(dropMalformed) drop_oversize=\(dropOversize) drop_unbound=\(dropUnbound) "
            + "drop_spoofed_ssrc=\(dropSpoofedSSRC) drop_ended_stream=\(dropEndedStream) drop_auth=\(dropAuthFailed) drop_replay=\(dropReplay) "
            + "drop_rate=\(dropRateLimited) drop_bitrate=\(dropBitrate) drop_muted=\(dropServerMuted) drop_cookie=\(dropBindingCookie) "
            + "drop_send=\(dropSendFailed) loss_reports=\(lossReports) loss_reports_ignored=\(lossReportsIgnored) "
            + "loss_feedback=\(lossFeedbackSent)"
    }
}

/// Encoded list entries (each a complete protobuf field) laid end to end, with their
/// offsets, so a list message is built by copying a byte range and split by a binary search.
struct EntryList {
    private(set) var bytes: [UInt8] = []
    /// offsets[i] is where entry i starts; one more element marks the end.
    private(set) var offsets: [Int] = [0]

    var count: Int { offsets.count - 1 }

    mutating func append(_ entry: [UInt8]) {
        bytes.append(contentsOf: entry)
        offsets.append(bytes.count)
    }

    mutating func removeAll() {
        bytes.removeAll(keepingCapacity: true)
        offsets.removeAll(keepingCapacity: true)
        offsets.append(0)
    }

    /// Drops the first `n` entries.
    mutating func removeFirst(_ n: Int) {
        guard n > 0 else { return }
        guard n < count else { return removeAll() }
        let shift = offsets[n]
        bytes.removeFirst(shift)
        offsets.removeFirst(n)
        for i in offsets.indices { offsets[i] -= shift }
    }

    /// Bytes of entries `r`.
    func size(_ r: Range<Int>) -> Int { offsets[r.upperBound] - offsets[r.lowerBound] }

    /// The end of the longest run of entries from `start` whose bytes fit `budget`
    /// (at least one entry, so a caller always makes progress).
    func pageEnd(from start: Int, upTo end: Int, budget: Int) -> Int {
        var lo = start + 1, hi = end
        let base = offsets[start]
        while lo < hi {
            let mid = (lo + hi + 1) / 2
            if offsets[mid] - base <= budget { lo = mid } else { hi = mid - 1 }
        }
        return lo
    }

    func withBytes<R>(_ r: Range<Int>, _ body: (UnsafeRawBufferPointer) -> R) -> R {
        let lo = offsets[r.lowerBound], hi = offsets[r.upperBound]
        return bytes.withUnsafeBytes { body(UnsafeRawBufferPointer(rebasing: $0[lo..<hi])) }
    }
}

/// How far one session has been told a list of pending changes that is shared by many
/// sessions and emptied when everyone has been told (a new generation starts).
struct TellCursor {
    var seen = 0
    var generation: UInt64 = .max

    /// The entries of `count` pending ones (of `generation`) not yet told; afterwards all are.
    mutating func untold(count: Int, generation g: UInt64) -> Range<Int>? {
        let from = generation == g ? seen : 0
        generation = g
        seen = count
        return from < count ? from..<count : nil
    }

    /// Counts everything pending now as told (the session caused it, or got it another way).
    mutating func skip(count: Int, generation g: UInt64) { generation = g; seen = count }
}

/// Membership changes of one channel not yet told to its members: joins or leaves (never
/// both: a change of kind tells the pending ones first), coalesced over one loop turn.
struct PendingNotice {
    enum Kind { case joined, left }
    let kind: Kind
    /// Entries: members (field 3 of UsersJoined) or user ids (field 3 of UsersLeft).
    var entries = EntryList()
    /// The same changes as values, for a single-change UserJoined / UserLeft.
    var members: [MemberInfo] = []
    var userIDs: [UInt32] = []
    init(kind: Kind) { self.kind = kind }
}

final class Channel {
    let id: UInt32
    let name: String
    let audio: AudioConfig
    var members: [Session] = []
    /// Streams announced by members, in announcement order.
    var streams: [Stream] = []
    /// Members that are server-muted or deafened (a joiner is told about each).
    var flagged: [Session] = []
    /// No longer in the configuration (a reload dropped or changed it): kept only until empty.
    var retired = false
    /// `members` as encoded MemberInfo entries, rebuilt when stale.
    var memberList = EntryList()
    var memberListValid = true
    var notice: PendingNotice?
    /// Bumped each time the pending notices have been told to every member.
    var noticeGeneration: UInt64 = 0

    init(id: UInt32, name: String, audio: AudioConfig) { self.id = id; self.name = name; self.audio = audio }

    var info: ChannelInfo { ChannelInfo(id: id, name: name, audio: audio) }
}

final class Stream {
    let streamID: UInt32
    let ssrc: UInt32
    let kind: StreamKind
    let channels: UInt32
    // Strong: the cycle with Session.streams is broken when the stream or session goes.
    let owner: Session
    /// The publisher's own state of the stream (its last StreamStateUpdate).
    var muted = false
    var hold = false
    var replay = ReplayWindow()
    /// The stream's nominal bytes per second: its channel's bitrate plus the datagram
    /// overhead of its frames (header and tag) at the channel's frame rate. A stream
    /// never changes channel (a move removes it), so this is fixed.
    let nominalBytesPerSecond: Double
    // Two token buckets refilled together: packets (capacity one second of `rate`) and
    // bytes (capacity `byteBurstSeconds` of the byte rate).
    var tokens: Double
    var byteTokens: Double
    var lastRefill: UInt64
    /// Loss feedback (LossFeedback.swift): each listener's latest report, by user id,
    /// and when the publisher was last told.
    struct ListenerReport { var counts: LossCounts; var atMs: UInt64 }
    var lossReports: [UInt32: ListenerReport] = [:]
    var lastFeedbackMs: UInt64 = 0

    /// How much of a byte budget a stream may save up: Opus VBR spends well above its
    /// target on a transient or a music passage and less in pauses.
    static let byteBurstSeconds = 2.0

    init(streamID: UInt32, ssrc: UInt32, kind: StreamKind, channels: UInt32, owner: Session, audio: AudioConfig,
         rate: Int, bitrateFactor: Double, now: UInt64) {
        self.streamID = streamID; self.ssrc = ssrc; self.kind = kind; self.channels = channels; self.owner = owner
        nominalBytesPerSecond = Double(audio.bitrate) / 8
            + Double(MediaCrypto.overhead) * 1_000_000 / Double(max(audio.frameMicros, 1))
        tokens = Double(rate)
        byteTokens = bitrateFactor * nominalBytesPerSecond * Stream.byteBurstSeconds
        lastRefill = now
    }

    enum Admission { case admitted, overPacketRate, overBitrate }

    /// Takes one packet of `bytes` from the stream's budgets: `rate` packets per second
    /// and `bitrateFactor` x its nominal bytes per second.
    func take(bytes: Int, rate: Int, bitrateFactor: Double, nowMs: UInt64) -> Admission {
        let elapsed = Double(nowMs &- lastRefill) / 1000
        lastRefill = nowMs
        let byteRate = bitrateFactor * nominalBytesPerSecond
        tokens = min(Double(rate), tokens + elapsed * Double(rate))
        byteTokens = min(byteRate * Stream.byteBurstSeconds, byteTokens + elapsed * byteRate)
        guard tokens >= 1 else { return .overPacketRate }
        guard byteTokens >= Double(bytes) else { return .overBitrate }
        tokens -= 1
        byteTokens -= Double(bytes)
        return .admitted
    }
}

final class Session {
    let id: UInt64
    let userID: UInt32
    let bindingID: UInt32
    let username: String
    let keys: SessionKeys
    /// The secret a reconnect of this client names (HelloResult / Hello `resume_token`).
    let resumeToken: [UInt8]
    static let resumeTokenBytes = 16
    // Strong: the cycle with Connection.session is broken by Server.detachSession.
    let connection: Connection
    var channel: Channel?
    /// Position in `channel.members` (removal swaps the last member in).
    var memberIndex = 0
    var streams: [UInt32: Stream] = [:]
    /// Streams of this session removed lately (their frames may still be in flight).
    var endedStreams = EndedStreams()
    var epoch: UInt32 = 0
    var media: DirectionalKeys
    var bind: DirectionalKeys
    var udpAddress: SocketAddress?
    var bindReplay = ReplayWindow()
    var bindSendSeq: UInt64 = 0
    var lastSeenMs: UInt64
    var serverMuted = false
    var deafened = false
    /// When this session was last told that a datagram of its was too large (ms).
    var oversizeNoticeMs: UInt64?
    /// This member as an entry of a member list (`JoinChannelResult.membersField`).
    private(set) var memberEntry: [UInt8] = []
    /// How far into its channel's pending notice this member has been told.
    var noticeCursor = TellCursor()
    /// Receives the roster (asked for in Hello): its place among the subscribers, and how
    /// many roster changes it has been told (counted from the first ever, PresenceState.base).
    var presence = false
    var presenceIndex = 0
    var presenceSeen = 0
    /// This session as a roster record (`UserList.usersField`), rebuilt when it changes.
    private(set) var presenceEntry: [UInt8] = []

    init(id: UInt64, userID: UInt32, bindingID: UInt32, username: String, keys: SessionKeys, connection: Connection, now: UInt64) {
        self.id = id; self.userID = userID; self.bindingID = bindingID; self.username = username
        self.keys = keys; self.connection = connection
        resumeToken = Sodium.randomBytes(Session.resumeTokenBytes)
        media = keys.media(epoch: 0)
        bind = keys.bind(epoch: 0)
        lastSeenMs = now
        refreshMemberEntry()
        refreshPresenceEntry()
    }

    var memberInfo: MemberInfo { MemberInfo(userID: userID, username: username, muted: serverMuted, deafened: deafened) }

    func refreshMemberEntry() { memberEntry = memberInfo.encoded(asField: JoinChannelResult.membersField) }

    var presenceRecord: UserPresence {
        UserPresence(userID: userID, username: username, channelID: channel?.id ?? 0, muted: serverMuted, deafened: deafened,
                     streams: streams.values.sorted { $0.streamID < $1.streamID }.map {
                         StreamPresence(streamID: $0.streamID, ssrc: $0.ssrc, kind: $0.kind, muted: $0.muted, hold: $0.hold)
                     })
    }

    func refreshPresenceEntry() { presenceEntry = presenceRecord.encoded(asField: UserList.usersField) }
}

/// The ssrcs of the streams a session removed within the last `graceMs`, and when: a
/// frame of one that comes within `graceMs` (sent before the client stopped or
/// restarted the stream, or moved to another channel, and overtaken by its control
/// message) is an ended stream's, not a spoofed ssrc. Every stream a channel move ends
/// is kept, however many the session had (max_streams_per_user is up to 64; a ring of
/// four counted the fifth and later as spoofed). Empty, it allocates nothing (an idle
/// session holds none); a session announcing and removing streams in a loop keeps at
/// most `capacity`, the newest.
struct EndedStreams {
    static let graceMs: UInt64 = 2000
    static let capacity = 128
    private var ended: [(ssrc: UInt32, atMs: UInt64)] = []

    mutating func note(_ ssrc: UInt32, nowMs: UInt64) {
        ended.removeAll { nowMs &- $0.atMs > EndedStreams.graceMs }
        if ended.count >= EndedStreams.capacity { ended.removeFirst(ended.count - EndedStreams.capacity + 1) }
        ended.append((ssrc, nowMs))
    }

    /// True when `ssrc` (never 0: no stream has it) was removed within `graceMs` of `nowMs`.
    func contains(_ ssrc: UInt32, nowMs: UInt64) -> Bool {
        ssrc != 0 && ended.contains { $0.ssrc == ssrc && nowMs &- $0.atMs <= EndedStreams.graceMs }
    }
}

/// Bytes queued for a socket: written at the tail, consumed from the head. Grows as
/// needed and gives large storage back once drained, so idle connections hold little.
struct ByteQueue {
    private var storage: UnsafeMutableRawPointer? = nil
    private var capacity = 0
    private var head = 0
    private var tail = 0

    var count: Int { tail - head }
    var isEmpty: Bool { tail == head }

    /// Room for `n` more bytes at the tail; write them, then `commit`.
    mutating func reserve(_ n: Int) -> UnsafeMutableRawBufferPointer {
        if capacity - tail < n {
            if head > 0 && capacity - count >= n && head >= count {
                storage!.copyMemory(from: storage! + head, byteCount: count)
            } else {
                let newCapacity = max(4096, max(capacity * 2, count + n))
                let p = UnsafeMutableRawPointer.allocate(byteCount: newCapacity, alignment: 16)
                if let old = storage {
                    p.copyMemory(from: old + head, byteCount: count)
                    old.deallocate()
                }
                storage = p
                capacity = newCapacity
            }
            tail = count
            head = 0
        }
        return UnsafeMutableRawBufferPointer(start: storage! + tail, count: n)
    }

    mutating func commit(_ n: Int) { tail += n }

    mutating func append(_ bytes: UnsafeRawBufferPointer) {
        let dst = reserve(bytes.count)
        if bytes.count > 0 { dst.baseAddress!.copyMemory(from: bytes.baseAddress!, byteCount: bytes.count) }
        commit(bytes.count)
    }

    var readable: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: storage.map { $0 + head }, count: count) }

    mutating func consume(_ n: Int) {
        head += n
        if head == tail {
            head = 0; tail = 0
            if capacity > 64 * 1024 { release() }
        }
    }

    mutating func release() {
        storage?.deallocate()
        storage = nil
        capacity = 0; head = 0; tail = 0
    }
}

/// A token bucket over milliseconds.
struct TokenBucket {
    private var tokens: Double
    private var lastMs: UInt64

    init(burst: Int, now: UInt64) { tokens = Double(burst); lastMs = now }

    private mutating func refill(rate: Double, burst: Int, now: UInt64) {
        if now > lastMs { tokens = min(Double(burst), tokens + Double(now - lastMs) * rate / 1000) }
        lastMs = max(lastMs, now)
    }

    /// Takes a token if one is there.
    mutating func take(rate: Double, burst: Int, now: UInt64) -> Bool {
        refill(rate: rate, burst: burst, now: now)
        guard tokens >= 1 else { return false }
        tokens -= 1
        return true
    }

    /// Gives back a token taken for nothing.
    mutating func refund(burst: Int) { tokens = min(Double(burst), tokens + 1) }

    /// Milliseconds until a token is there (0 when one is).
    func waitMs(rate: Double) -> UInt64 {
        tokens >= 1 ? 0 : UInt64(((1 - tokens) * 1000 / rate).rounded(.up))
    }
}

final class Connection {
    enum Phase { case awaitingClientHello, awaitingHello, active, closing }

    let socket: Socket
    let fd: Int32
    let peer: SocketAddress
    /// Unique per connection: tells apart two connections that had the same descriptor.
    let serial: UInt32
    let openedMs: UInt64
    var phase = Phase.awaitingClientHello
    var closed = false
    var handshakeBuffer: [UInt8] = []
    var sealer: ControlSealer?
    var opener: ControlOpener?
    var keys: SessionKeys?
    var session: Session?
    var out = ByteQueue()
    /// Waiting for the socket to accept more (registered for writability).
    var writeBlocked = false
    /// Already on the loop's list of connections to flush this turn.
    var dirty = false
    var partialSinceMs: UInt64?

    // Limits.
    /// Counted among the not-yet-logged-in connections.
    var unauthenticated = true
    /// When it must be logged in by.
    var loginDeadlineMs: UInt64
    var controlBucket: TokenBucket
    /// Paused until then for exceeding the control-message rate.
    var throttledUntilMs: UInt64?
    /// A Hello or SetServerMute held until then (auth backoff), and the message.
    var heldUntilMs: UInt64?
    var heldMessage: ControlMessage?
    var authFailures = 0
    /// A closing connection with output left is dropped at this time even if the peer does not read.
    var closeDeadlineMs: UInt64?
    /// Complete frames may wait in `opener` (the frame budget of a turn ran out).
    var inBacklog = false
    /// What the descriptor is registered for with epoll.
    var interest: EventMask = .readable
    /// The deadline this connection is queued under in the timer heap (nil: none).
    var timerAtMs: UInt64?

    init(socket: Socket, peer: SocketAddress, serial: UInt32, now: UInt64, config: ServerConfig) {
        self.socket = socket; fd = socket.fd; self.peer = peer; self.serial = serial; openedMs = now
        loginDeadlineMs = now + UInt64(config.loginTimeoutSeconds * 1000)
        controlBucket = TokenBucket(burst: config.controlBurst, now: now)
    }

    deinit { out.release() }

    var pendingOutput: Int { out.count }
    /// Reading is paused (throttled, an answer held, or closing).
    var readPaused: Bool { throttledUntilMs != nil || heldUntilMs != nil || phase == .closing }
    /// The epoll cookie: descriptor and serial.
    var token: UInt64 { UInt64(serial) << 32 | UInt64(UInt32(bitPattern: fd)) }
}

/// A min-heap of connection deadlines. Each connection has at most one live entry (the
/// one equal to its `timerAtMs`); others are stale and skipped when they surface. A
/// session's activity only moves its deadline later, so it costs no heap operation: the
/// entry surfaces, finds the session active, and is pushed again for the new deadline.
struct DeadlineHeap {
    private var items: [(at: UInt64, c: Connection)] = []

    // Written without `first` and for-in: in a debug build those allocate an iterator
    // frame on every call, and the loop consults the heap every turn.
    var count: Int { items.count }
    var next: UInt64? { items.isEmpty ? nil : items[0].at }

    mutating func push(_ at: UInt64, _ c: Connection) {
        items.append((at, c))
        var i = items.count - 1
        while i > 0 {
            let p = (i - 1) / 2
            guard items[p].at > items[i].at else { break }
            items.swapAt(p, i)
            i = p
        }
    }

    /// Drops the entries of closed connections and superseded deadlines when they are
    /// more than `limit` in all (a closed connection's entry kept it in memory until its
    /// deadline: a peer opening and closing connections fast grew the heap by its rate
    /// × the handshake timeout). O(n), at most once per `limit` entries added.
    mutating func dropStale(whenMoreThan limit: Int) {
        guard items.count > limit else { return }
        items.removeAll { $0.c.closed || $0.c.timerAtMs != $0.at }
        var i = items.count / 2 - 1   // heapify bottom-up
        while i >= 0 { siftDown(i); i -= 1 }
    }

    /// The next live entry due at `now` or earlier (its connection's `timerAtMs` cleared).
    mutating func popDue(now: UInt64) -> Connection? {
        while !items.isEmpty, items[0].at <= now {
            let top = items[0]
            pop()
            if !top.c.closed, top.c.timerAtMs == top.at {
                top.c.timerAtMs = nil
                return top.c
            }
        }
        return nil
    }

    private mutating func pop() {
        let last = items.removeLast()
        guard !items.isEmpty else { return }
        items[0] = last
        siftDown(0)
    }

    private mutating func siftDown(_ start: Int) {
        var i = start
        let n = items.count
        while true {
            let l = 2 * i + 1, r = l + 1
            var m = i
            if l < n && items[l].at < items[m].at { m = l }
            if r < n && items[r].at < items[m].at { m = r }
            if m == i { break }
            items.swapAt(i, m)
            i = m
        }
    }
}

/// Recent wrong passwords per source address, for the auth backoff.
struct AuthFailures {
    struct Record { var failures: Int; var lastMs: UInt64 }
    private var records: [SocketAddress: Record] = [:]

    var count: Int { records.count }

    /// Wrong passwords from `host` still remembered at `now`.
    func failures(_ host: SocketAddress, now: UInt64, forgetMs: UInt64) -> Int {
        guard let r = records[host], now &- r.lastMs < forgetMs else { return 0 }
        return r.failures
    }

    mutating func record(_ host: SocketAddress, now: UInt64, forgetMs: UInt64) {
        let f = failures(host, now: now, forgetMs: forgetMs)
        records[host] = Record(failures: f + 1, lastMs: now)
    }

    /// A right password from `host`: its count starts again.
    mutating func clear(_ host: SocketAddress) {
        if !records.isEmpty { records[host] = nil }
    }

    /// Drops records older than `forgetMs` (called about once a minute: the table holds
    /// one record per address that failed recently, not one per session).
    mutating func expire(now: UInt64, forgetMs: UInt64) {
        records = records.filter { now &- $0.value.lastMs < forgetMs }
    }
}
