// The send path's shared state: the published streams and what a sent frame needs
// from the session. A frame takes exactly one lock, its own stream slot's:
//
//   * The streams live in a fixed table of slots. A stream id names its slot (low 8
//     bits: slot + 1, above: a generation), so finding a stream takes no table lock.
//   * What sending needs from the session (media key, socket, server address, the
//     server's mute) is an immutable SendSnapshot. The session publishes a new one
//     (connect, rebind, server mute, disconnect) into every slot under that slot's
//     lock; a sender reads its slot's copy under the lock it already holds.
//   * The input gate's settings are atomics (GateControl), read per frame.
//   * Frames that are not due yet (a host fed faster than real time) are sent by
//     the pacer thread (SendPacer) at their time; a feed that leaves work for
//     later wakes it only when that work is due before the pacer would wake anyway.
import Synchronization
import VoiceCatAudio
import VoiceCatProtocol
import VoiceCatSystem

/// What a frame needs to be sealed and sent. Immutable; replaced, never changed.
final class SendSnapshot {
    let key: SymmetricKey
    let socket: Socket
    let address: SocketAddress
    /// The server mutes this user: nothing is sent.
    let serverMuted: Bool
    /// The media path is lost (VC_EVENT_VOICE_DISCONNECTED until VOICE_RECONNECTED, or
    /// a reconnect's new session, whose snapshot starts without it):
    /// frames are still sent (the path may work one way), and counted as most likely
    /// unheard (vc_send_stats.frames_sent_path_lost, vc_stream_drain).
    let pathLost: Bool

    init(key: SymmetricKey, socket: Socket, address: SocketAddress, serverMuted: Bool, pathLost: Bool = false) {
        self.key = key; self.socket = socket; self.address = address; self.serverMuted = serverMuted; self.pathLost = pathLost
    }

    /// This snapshot with the given fields changed.
    func with(key: SymmetricKey? = nil, serverMuted: Bool? = nil, pathLost: Bool? = nil) -> SendSnapshot {
        SendSnapshot(key: key ?? self.key, socket: socket, address: address, serverMuted: serverMuted ?? self.serverMuted,
                     pathLost: pathLost ?? self.pathLost)
    }
}

/// The input gate's settings, written by any thread, read per frame without a lock.
/// (A frame may see a half-applied change of two settings; each is valid alone.)
final class GateControl: @unchecked Sendable {
    private let mode = Atomic<Int32>(InputMode.vad.rawValue)
    private let thresholdBits = Atomic<UInt32>(GateSettings().threshold.bitPattern)
    private let hangMs = Atomic<UInt32>(GateSettings().hangMs)
    private let ptt = Atomic<Bool>(false)

    var settings: GateSettings {
        var g = GateSettings()
        g.mode = InputMode(rawValue: mode.load(ordering: .relaxed)) ?? .vad
        g.threshold = Float(bitPattern: thresholdBits.load(ordering: .relaxed))
        g.hangMs = hangMs.load(ordering: .relaxed)
        g.pushToTalk = ptt.load(ordering: .relaxed)
        return g
    }

    func setMode(_ m: InputMode) { mode.store(m.rawValue, ordering: .relaxed) }
    func setVAD(threshold: Float, hangMs h: UInt32) {
        thresholdBits.store(threshold.bitPattern, ordering: .relaxed)
        hangMs.store(h, ordering: .relaxed)
    }
    func setPushToTalk(_ on: Bool) { ptt.store(on, ordering: .relaxed) }
}

/// One slot of the stream table: its lock guards the stream, the snapshot and the
/// slot's send counters.
final class StreamSlot {
    let index: Int
    let lock = Lock()
    var stream: LocalStream?
    /// Between reserve() and install(): the stream is being announced.
    var reserved = false
    var generation: UInt32 = 0
    /// The stream id of this slot's current generation (StreamTable.slot(for:) reads
    /// the index back from its low byte).
    var currentID: UInt32 { generation << 8 | UInt32(index + 1) }
    /// The last stream this slot held, and why it ended (for the error of a later call
    /// that names it: "no stream 257: it ended with the session (...)").
    var endedID: UInt32 = 0
    var endedWhy = ""
    /// When it ended with a session that was lost (not ended by the host): why, and
    /// whether audio fed to it was still waiting to be sent (vc_stream_drain's answer).
    var endedLostSession: String?
    var endedQueuedMs: UInt32 = 0
    /// Of the audio fed since its queue was last empty: what came due while there was
    /// no media path (a reconnect's gap: dropped) and what was sent while the path was
    /// lost (ms).
    var endedDroppedMs: UInt64 = 0
    var endedSentPathLostMs: UInt64 = 0
    var endedUnsent = false
    var path: SendSnapshot?
    var packetsOut: UInt64 = 0
    var bytesOut: UInt64 = 0
    /// The stream's send deadline (LocalStream.deadline, ns; .max: none) as the stream
    /// last published it under the lock, for the pacer to read without taking it.
    let due = Atomic<UInt64>(.max)
    init(index: Int) { self.index = index }
}

/// The published streams of one client.
final class StreamTable {
    static let capacity = 32
    let slots: [StreamSlot] = (0..<StreamTable.capacity).map { StreamSlot(index: $0) }
    /// Bit i set while slot i holds a stream (the pacer visits only those).
    let liveMask = Atomic<UInt64>(0)
    /// vc_stream_drain waits here; senders broadcast while anyone waits.
    let drainCond = Condition()
    let drainWaiters = Atomic<Int>(0)
    /// While a session is being torn down (from before its streams are retired until
    /// DISCONNECTED has been raised; guarded by drainCond): a drain whose stream ended
    /// with it returns only then (ended(_:_:deadline:)), so the host that looks for why
    /// finds the events.
    private var sessionEnding = false
    let pacer: SendPacer
    let gate = GateControl()
    /// The played mix, for streams that cancel echo; `aecStreams` counts them so the
    /// renderer feeds the ring only while someone reads it.
    let farEnd = FarEndRing(blockSize: 480, blocks: 64)
    let aecStreams = AtomicCounter()
    /// Where streams raise their local events (gate open / close). Set once by the
    /// client before any stream exists.
    var events: EventHub?
    /// The snapshot new streams start with (guarded by `publishLock`).
    private let publishLock = Lock()
    private var current: SendSnapshot?

    init() throws { pacer = try SendPacer() }

    /// A stream's deadline changed (`due`, nil: none), its slot lock released: the
    /// pacer's timer follows the earliest deadline.
    func rescheduled(_ due: UInt64?) { pacer.kick(due, table: self) }

    /// The slot a stream id names, or nil for an id that cannot be one.
    func slot(for id: UInt32) -> StreamSlot? {
        let i = Int(id & 0xff) - 1
        return i >= 0 && i < slots.count ? slots[i] : nil
    }

    /// Runs `body` with the live stream `id` under its slot's lock.
    func withStream<T>(_ id: UInt32, _ body: (LocalStream, StreamSlot) throws -> T) throws -> T {
        guard let slot = slot(for: id) else { throw ClientError.notFound("no stream \(id)") }
        slot.lock.lock()
        defer { slot.lock.unlock() }
        guard let s = slot.stream, s.streamID == id else {
            throw ClientError.notFound(slot.endedID == id ? "no stream \(id): it \(slot.endedWhy)" : "no stream \(id)")
        }
        return try body(s, slot)
    }

    /// Reserves a free slot and returns the stream id it will have.
    func reserve() throws -> UInt32 {
        for slot in slots {
            let id: UInt32? = slot.lock.withLock {
                guard slot.stream == nil, !slot.reserved else { return nil }
                slot.reserved = true
                slot.generation = (slot.generation &+ 1) & 0xff_ffff
                if slot.generation == 0 { slot.generation = 1 }
                return slot.currentID
            }
            if let id { return id }
        }
        throw ClientError.rejected("all \(slots.count) stream slots of this client are in use")
    }

    /// Installs a stream in the slot its id reserved (with the current snapshot).
    /// Under `publishLock`, as publish() writes the slots: a snapshot published between
    /// reading `current` and writing the slot would otherwise be overwritten by the
    /// older one (a stream started as the media path came back kept counting its frames
    /// as sent on a lost path).
    func install(_ s: LocalStream) {
        guard let slot = slot(for: s.streamID) else { return }
        publishLock.withLock {
            slot.lock.withLock {
                slot.reserved = false
                slot.stream = s
                slot.path = current
                slot.due.store(.max, ordering: .releasing)   // a new stream has nothing queued
            }
        }
        liveMask.bitwiseOr(1 << UInt64(slot.index), ordering: .releasing)
    }

    /// Whether `id` names a slot reserved for a stream being started.
    func isReserved(_ id: UInt32) -> Bool {
        guard let slot = slot(for: id) else { return false }
        return slot.lock.withLock { slot.reserved && slot.currentID == id }
    }

    /// Gives a reserved slot back unused.
    func unreserve(_ id: UInt32) {
        guard let slot = slot(for: id) else { return }
        slot.lock.withLock { slot.reserved = false }
    }

    /// The session is being torn down (true) or its end has been raised (false).
    func sessionEnding(_ on: Bool) {
        drainCond.withLock {
            sessionEnding = on
            drainCond.broadcast()
        }
    }

    /// Takes a stream out of the table (its sends stop); returns it. `lostSession`:
    /// it ends because the session was lost, for that reason.
    func remove(_ id: UInt32, why: String, lostSession: String? = nil) -> LocalStream? {
        guard let slot = slot(for: id) else { return nil }
        let s = slot.lock.withLock { () -> LocalStream? in
            guard let s = slot.stream, s.streamID == id else { return nil }
            slot.stream = nil
            slot.endedID = id
            slot.endedWhy = why
            slot.endedLostSession = lostSession
            slot.endedQueuedMs = s.queuedMs
            let frameMicros = UInt64(s.audio.frameMicros)
            slot.endedDroppedMs = s.framesLostSinceIdle * frameMicros / 1000
            slot.endedSentPathLostMs = s.framesSentPathLostSinceIdle * frameMicros / 1000
            // Audio the gap dropped is not sent either, even when nothing is left queued.
            slot.endedUnsent = !s.isDrained || slot.endedDroppedMs > 0 || slot.endedSentPathLostMs > 0
            slot.due.store(.max, ordering: .releasing)
            return s
        }
        if s != nil { liveMask.bitwiseAnd(~(1 << UInt64(slot.index)), ordering: .releasing) }
        drainCond.withLock { drainCond.broadcast() }
        return s
    }

    /// Calls `body` for each slot that holds a stream (any thread; no allocation).
    func forEachLive(_ body: (StreamSlot) -> Void) {
        var mask = liveMask.load(ordering: .acquiring)
        while mask != 0 {
            let i = mask.trailingZeroBitCount
            mask &= mask - 1
            body(slots[i])
        }
    }

    /// Wakes vc_stream_drain callers, if any wait.
    func signalDrainWaiters() {
        if drainWaiters.load(ordering: .acquiring) > 0 { drainCond.withLock { drainCond.broadcast() } }
    }

    /// vc_stream_drain: waits until stream `id` has sent everything fed to it.
    func drain(_ id: UInt32, timeoutMs: Int) throws {
        let deadline = MonotonicClock.milliseconds() + UInt64(max(0, timeoutMs))
        drainWaiters.wrappingAdd(1, ordering: .acquiringAndReleasing)
        defer { drainWaiters.wrappingSubtract(1, ordering: .acquiringAndReleasing) }
        while true {
            let state: (drained: Bool, due: UInt64?, lostMs: UInt64, sentLostMs: UInt64)
            do {
                state = try withStream(id) { s, _ in
                    let frameMicros = UInt64(s.audio.frameMicros)
                    return (s.isDrained, s.deadline, s.framesLostSinceIdle * frameMicros / 1000,
                            s.framesSentPathLostSinceIdle * frameMicros / 1000)
                }
            } catch {
                try ended(id, error, deadline: deadline)
            }
            let (drained, due, lostMs, sentLostMs) = state
            if drained {
                // Sent as far as this client could: frames that came due with no media
                // path (a reconnect's gap) were dropped, frames sent while the media
                // path was lost most likely went nowhere, and the host is told.
                var unheard: [String] = []
                if lostMs > 0 {
                    unheard.append("\(lostMs) ms of the audio fed came due while the connection to the server was down "
                                   + "(reconnecting) and were dropped, not sent")
                }
                if sentLostMs > 0 {
                    unheard.append("\(sentLostMs) ms of the audio fed were sent while the media path to the server was lost "
                                   + "(no keepalive echo; rebinding): most likely nobody heard them")
                }
                guard unheard.isEmpty else { throw ClientError.network("stream \(id): " + unheard.joined(separator: "; ")) }
                return
            }
            rescheduled(due)
            if MonotonicClock.milliseconds() >= deadline {
                throw ClientError.timeout("stream \(id) still has audio queued after \(timeoutMs) ms")
            }
            drainCond.withLock { _ = drainCond.wait(untilMs: min(deadline, MonotonicClock.milliseconds() + 50)) }
        }
    }

    /// The stream to drain is gone (`error` says so, VC_ERR_NOT_FOUND). When it ended
    /// with a lost session while audio fed to it was still queued, that is the answer
    /// (VC_ERR_NETWORK, also to a later drain naming it, until a later stream in its
    /// slot ends), once the session's end has been raised (DISCONNECTED is queued); a
    /// deadline that passes first is VC_ERR_TIMEOUT. Otherwise `error` (stopped, ended
    /// by the host, or everything had been sent).
    private func ended(_ id: UInt32, _ error: Error, deadline: UInt64) throws -> Never {
        guard let slot = slot(for: id) else { throw error }
        let ended = slot.lock.withLock { () -> (why: String?, ms: UInt32, dropped: UInt64, sentLost: UInt64, unsent: Bool)? in
            slot.endedID == id
                ? (slot.endedLostSession, slot.endedQueuedMs, slot.endedDroppedMs, slot.endedSentPathLostMs, slot.endedUnsent) : nil
        }
        guard let ended, let why = ended.why, ended.unsent else { throw error }
        let raised = drainCond.withLock { () -> Bool in
            while sessionEnding {
                let now = MonotonicClock.milliseconds()
                if now >= deadline { return false }
                _ = drainCond.wait(untilMs: min(deadline, now + 50))
            }
            return true
        }
        guard raised else {
            throw ClientError.timeout("stream \(id) ended with a session that is being torn down (\(why)); its end is not reported yet")
        }
        var unsent: String
        if ended.dropped > 0 {
            // Everything fed since the queue was last empty that never left: what was
            // still queued and what came due while reconnecting.
            unsent = "\(UInt64(ended.ms) + ended.dropped) ms of the audio fed not sent (\(ended.dropped) ms came due while the "
                + "connection to the server was down (reconnecting) and were dropped"
                + (ended.ms > 0 ? ", \(ended.ms) ms were still queued)" : ")")
        } else if ended.ms > 0 {
            unsent = "\(ended.ms) ms of the audio fed not sent"
        } else if ended.sentLost == 0 {
            unsent = "the last part of a frame fed not sent"
        } else {
            unsent = "everything fed sent"
        }
        if ended.sentLost > 0 {
            unsent += "; \(ended.sentLost) ms were sent while the media path to the server was lost (no keepalive echo; "
                + "rebinding): most likely nobody heard them"
        }
        throw ClientError.network("stream \(id): the session was lost (\(why)) with \(unsent)")
    }

    /// Every live stream (a copy of the table, for control paths).
    var all: [LocalStream] { slots.compactMap { slot in slot.lock.withLock { slot.stream } } }

    /// Publishes what sending needs now (nil: nothing can be sent).
    func publish(_ snap: SendSnapshot?) {
        publishLock.withLock {
            current = snap
            for slot in slots { slot.lock.withLock { slot.path = snap } }
        }
    }

    var snapshot: SendSnapshot? { publishLock.withLock { current } }

    /// Sums the slots' send counters.
    func sendCounters() -> (packets: UInt64, bytes: UInt64) {
        var p: UInt64 = 0, b: UInt64 = 0
        for slot in slots { slot.lock.withLock { p += slot.packetsOut; b += slot.bytesOut } }
        return (p, b)
    }

    func resetCounters() {
        for slot in slots { slot.lock.withLock { slot.packetsOut = 0; slot.bytesOut = 0 } }
    }
}

/// The send pacer: one thread per client that sends the frames fed ahead of real
/// time at their due time and ends talkspurts whose queue ran dry. It sleeps on a
/// timer armed for the earliest stream deadline (disarmed while nothing is pending:
/// no periodic work when nothing is sent). A feed moves its stream's deadline and
/// re-arms the timer without waking the pacer: a host feeding in real time sends
/// its frames itself, and the dry-check deadline moves a block ahead at each feed,
/// so the pacer does not wake at all while the host keeps up.
final class SendPacer {
    private let timer: DeadlineTimer
    /// Guards `armedAt` and the arming of the timer (never held across a pump). A
    /// pthread mutex (`Lock`), as everywhere in the engine: ThreadSanitizer sees its
    /// ordering (the standard library's futex `Mutex` it does not, and reported a race
    /// between start and stopAndJoin that the lock excluded).
    private let lock = Lock()
    /// The time the timer is armed for (.max: disarmed). Written under `lock`.
    private let armedAt = Atomic<UInt64>(.max)
    private let stopping = Atomic<Bool>(false)
    private let threadLock = Lock()
    private var thread: SystemThread?   // threadLock

    init() throws {
        timer = try DeadlineTimer()
    }

    /// Starts the thread (once), marking it as a thread of `owner`.
    func start(owner: AnyObject, table: StreamTable) {
        threadLock.withLock {
            guard thread == nil, !stopping.load(ordering: .acquiring) else { return }
            thread = SystemThread(name: "vc-send") { [unowned self, unowned owner, unowned table] in
                ThreadIdentity.mark(owner: owner, role: ThreadRole.pacer.rawValue)
                self.run(table)
            }
        }
    }

    func stopAndJoin() {
        // Under the lock, and arm() does nothing once stopping: no kick can re-arm or
        // disarm the timer after this wake-up is set (the join would wait for ever).
        lock.withLock {
            stopping.store(true, ordering: .releasing)
            armedAt.store(1, ordering: .releasing)
            timer.arm(atNs: 1)
        }
        let t = threadLock.withLock { () -> SystemThread? in
            let t = thread
            thread = nil
            return t
        }
        t?.join()
    }

    /// Stops the thread when the session ends (no stream is left): a disconnected client
    /// keeps no thread of its own. The next stream's start() starts it again.
    func stopThread() {
        stopAndJoin()
        lock.withLock {
            timer.disarm()
            armedAt.store(.max, ordering: .releasing)
            stopping.store(false, ordering: .releasing)
        }
    }

    /// A stream's deadline changed to `deadline` (ns; nil: none) and was published in
    /// its slot (StreamSlot.due, by LocalStream): the timer is armed for the earliest
    /// deadline of the streams in `table`. Called after the stream's slot lock is
    /// released; takes only the pacer's lock (never a slot lock: a feed does not wait
    /// for another stream's encode). An earlier deadline arms at once; otherwise the
    /// earliest published deadline is recomputed and the timer re-armed when it moved
    /// (one timerfd_settime per feed for a host feeding in real time, whose dry-check
    /// deadline moves a block ahead each time).
    func kick(_ deadline: UInt64?, table: StreamTable) {
        if let deadline, deadline < armedAt.load(ordering: .acquiring) {
            lock.withLock { arm(min(deadline, armedAt.load(ordering: .relaxed))) }
        } else {
            lock.withLock { rearm(table) }
        }
    }

    /// Arms the timer for `at` (lock held); nothing once stopping.
    private func arm(_ at: UInt64) {
        guard at != armedAt.load(ordering: .relaxed), !stopping.load(ordering: .relaxed) else { return }
        armedAt.store(at, ordering: .releasing)
        if at == .max { timer.disarm() } else { timer.arm(atNs: at) }
    }

    /// Arms the timer for the earliest published deadline of the live streams, not
    /// before `notBefore` (lock held). Every change of a deadline is published before
    /// its kick, and every kick ends here or arms earlier, so the last arming has seen
    /// every deadline.
    private func rearm(_ table: StreamTable, notBefore: UInt64 = 0) {
        var next = UInt64.max
        table.forEachLive { slot in next = min(next, slot.due.load(ordering: .acquiring)) }
        arm(next == .max ? next : max(next, notBefore))
    }

    /// How soon a pass comes back for a stream whose lock was held (ns).
    static let busyRetryNs: UInt64 = 1_000_000

    private func run(_ table: StreamTable) {
        while true {
            timer.wait()
            if stopping.load(ordering: .acquiring) { return }
            // The one-shot timer expired: it is disarmed until armed again (a feed
            // during the pump arms it for its own deadline).
            lock.withLock { armedAt.store(.max, ordering: .releasing) }
            // Only streams whose deadline has come; one whose lock is held is left for
            // later (its host is feeding it, and a feed sends what is due itself; or a
            // control call holds it): the pass does not wait for it, so one host
            // resampling a whole file into its stream does not hold back the frames of
            // the others. Such a pass comes back in `busyRetryNs`.
            let now = MonotonicClock.nanoseconds()
            var busy = false
            table.forEachLive { slot in
                guard slot.due.load(ordering: .acquiring) <= now else { return }
                guard slot.lock.tryLock() else { busy = true; return }
                slot.stream?.pump(now: now)
                slot.lock.unlock()
            }
            table.signalDrainWaiters()
            lock.withLock { rearm(table, notBefore: busy ? now + SendPacer.busyRetryNs : 0) }
        }
    }
}
