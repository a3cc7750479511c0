// The receive side: preallocated slots, one per remote stream, and the ssrc → slot
// map. The network thread owns the map; whoever reads the media socket
// (MediaInput.swift: the renderer before it renders, or the network thread) fills
// the slots; the render thread (whichever the output stage runs, or a
// vc_read_mixed_pcm caller) visits only the live ones; host threads read and change
// a stream's settings and statistics.
import Synchronization
import VoiceCatAudio
import VoiceCatProtocol
import VoiceCatSystem

final class ReceiveSet {
    let slots: [RemoteSlot]
    /// ssrc → slot index (SSRCIndex.swift). Changed by the network thread holding the
    /// media input's token; read by it, or by the token's holder.
    private let bySSRC: SSRCIndex
    /// The media socket's reader state (MediaInput.swift).
    let input: MediaInput
    /// Wakes the network thread (a talkspurt began or ended in a render).
    private let networkWake: WakeEvent
    /// Jitter bounds for streams without their own (ControlPlane.swift). The lock is taken
    /// before a slot's lock, never after: a stream added while the bounds change gets them.
    let boundsLock = Lock()
    var defaultBounds = JitterBounds.none
    /// Audio the renderer takes at one instant beyond a block (a host pulling several
    /// blocks at a time), for every stream's jitter buffer (boundsLock).
    private var consumerBurstMs = 0.0

    /// What this session's streams have seen of lateness on the way here: every
    /// stream's first frames enter a jitter buffer seeded with it.
    private let lateness = SessionLateness()

    /// One decoded codec frame, stereo, int16 and float: every slot decodes into it in
    /// turn while the renderer renders (RemoteSlot.render; the output stage's render lock).
    private let decodeScratch = RemoteSlot.Scratch()

    init(capacity: Int, networkWake: WakeEvent) throws {
        var s: [RemoteSlot] = []
        do { for _ in 0..<capacity { s.append(try RemoteSlot(lateness: lateness)) } } catch {
            throw ClientError.codec("cannot create Opus decoders: \(error)")
        }
        slots = s
        bySSRC = SSRCIndex(slots: capacity)
        do { input = try MediaInput() } catch { throw ClientError.noMemory("the media input's timer could not be created: \(error)") }
        self.networkWake = networkWake
    }

    deinit { decodeScratch.deallocate() }

    // MARK: network thread

    /// How many streams are being received (network thread).
    var count: Int { bySSRC.count }

    /// The slot receiving `ssrc`, if any (network thread, or the media input's token held).
    func slotIndex(ssrc: UInt32) -> Int? { bySSRC[ssrc] }

    /// Starts receiving a remote stream. Returns false when every slot is in use.
    func add(_ r: RemoteStream, username: String) -> Bool {
        guard bySSRC[r.ssrc] == nil else { return true }
        input.take()
        defer { input.give() }
        guard let idx = slots.indices.first(where: { !slots[$0].live.load(ordering: .acquiring) }) else { return false }
        let s = slots[idx]
        boundsLock.withLock {
            s.lock.withLock {
                s.configure(r, username: username)
                s.applyJitterBounds(defaultBounds)
                s.jitter.setConsumerBurst(ms: consumerBurstMs)
            }
            s.live.store(true, ordering: .releasing)
        }
        bySSRC.insert(r.ssrc, slot: idx)
        return true
    }

    /// Stops receiving `ssrc`; returns its slot's user id and whether it was talking.
    @discardableResult
    func remove(ssrc: UInt32) -> (userID: UInt32, wasTalking: Bool, username: String)? {
        input.take()
        defer { input.give() }
        guard let idx = bySSRC.remove(ssrc) else { return nil }
        let s = slots[idx]
        var reducers: [NoiseReducer?] = []   // freed when this returns, outside the slot lock
        let r = s.lock.withLock { () -> (UInt32, Bool, String) in
            let was = s.talking
            s.active = false
            s.talking = false
            reducers = s.takeReducers()
            return (s.userID, was, s.username)
        }
        _ = reducers
        s.live.store(false, ordering: .releasing)
        return r
    }

    /// The session ended or was re-established (perhaps on another path): what its
    /// streams saw of lateness is not lent to the next one's.
    func forgetLateness() { lateness.forget() }

    /// Stops receiving everything (the session ended or the channel changed).
    func removeAll() {
        for ssrc in bySSRC.ssrcs { remove(ssrc: ssrc) }
    }

    /// The ssrcs being received (network thread; a copy, for control paths).
    var ssrcs: [UInt32] { bySSRC.ssrcs }

    /// Calls `body` with each received ssrc and its slot (network thread; allocates nothing).
    func forEachStream(_ body: (UInt32, RemoteSlot) -> Void) {
        bySSRC.forEach { ssrc, idx in body(ssrc, slots[idx]) }
    }

    /// The renderer takes `ms` of audio at one instant (0: a block or less): every
    /// stream's jitter buffer keeps that much in hand (JitterBuffer.setConsumerBurst).
    /// Called by the renderer when it changes; takes boundsLock, then each slot's lock.
    func setConsumerBurst(ms: Double) {
        boundsLock.withLock {
            guard ms != consumerBurstMs else { return }
            consumerBurstMs = ms
            for i in 0..<slots.count {
                let s = slots[i]
                guard s.live.load(ordering: .acquiring) else { continue }
                s.lock.withLock { s.jitter.setConsumerBurst(ms: ms) }
            }
        }
    }

    // MARK: host threads

    /// Runs `body` on the slot receiving `ssrc`, under its lock.
    func withSlot<T>(ssrc: UInt32, _ body: (RemoteSlot) throws -> T) throws -> T {
        for s in slots where s.live.load(ordering: .acquiring) {
            s.lock.lock()
            if s.active && s.ssrc == ssrc {
                defer { s.lock.unlock() }
                return try body(s)
            }
            s.lock.unlock()
        }
        throw ClientError.notFound("no remote stream with ssrc \(ssrc)")
    }

    func setSettings(ssrc: UInt32, _ settings: RemoteSettings) throws {
        guard settings.gain.isFinite, settings.gain >= 0, settings.gain <= 4 else {
            throw ClientError.invalidArgument("gain must be within 0..4 (got \(settings.gain))")
        }
        // The NR state is built here, on the caller's thread, never on the audio path:
        // outside the slot lock, so the settings are applied once the slot is seen to
        // need no denoiser or to take the one built (another call may have switched
        // the denoiser off, or the stream may have been replaced, in between: then it
        // is built again for what the slot is now).
        var fresh: NoiseReducer?
        var freshGlide: LagGlide?
        var released: (NoiseReducer?, NoiseReducer?) = (nil, nil)
        while true {
            // (The slot's glide, which moves the stream by the denoiser's delay, is built
            // with its first denoiser and kept.)
            let needed: (frameSamples: Int, channels: Int, glide: Bool)? = try withSlot(ssrc: ssrc) { s in
                if settings.noiseReduction && s.noiseReducer == nil {
                    guard let f = fresh, f.fits(frameSamples: s.frameSamples, streamChannels: s.channels),
                          s.glide != nil || freshGlide != nil else {
                        return (s.frameSamples, s.channels, s.glide == nil)
                    }
                    if s.glide == nil { s.glide = freshGlide }
                    s.noiseReducer = f
                    s.reducerPrimed = false   // primes anew
                    fresh = nil
                }
                s.settings = settings
                // Freed below, outside the slot lock: one the renderer faded out, and this
                // one when switched off (the renderer fades it out first if it plays).
                released.0 = s.retiredReducer
                s.retiredReducer = nil
                if !settings.noiseReduction {
                    released.1 = s.noiseReducer
                    s.noiseReducer = nil
                }
                return nil
            }
            guard let shape = needed else { break }
            if fresh?.fits(frameSamples: shape.frameSamples, streamChannels: shape.channels) != true {
                fresh = NoiseReducer(frameSamples: shape.frameSamples, streamChannels: shape.channels)
            }
            if shape.glide && freshGlide == nil {
                freshGlide = LagGlide(maxLag: NoiseReducer.longestBlock, maxFrame: RemoteSlot.maxFrameSamples)
            }
        }
        _ = released
    }

    func infos() -> [RemoteStreamInfo] {
        var out: [RemoteStreamInfo] = []
        let now = MonotonicClock.nanoseconds()
        for s in slots where s.live.load(ordering: .acquiring) {
            s.lock.withLock {
                if s.active {
                    var info = RemoteStreamInfo(ssrc: s.ssrc, userID: s.userID, streamID: s.streamID, kind: s.kind, channels: s.channels,
                                                talking: s.talking, settings: s.settings, username: s.username)
                    // A level older than 250 ms: nothing renders the stream now.
                    if s.levelAtNs != 0 && s.levelAtNs &+ 250_000_000 >= now {
                        info.levelRMSDBFS = BlockLevel.dbfs(s.level.rms)
                        info.levelPeakDBFS = BlockLevel.dbfs(s.level.peak)
                    }
                    out.append(info)
                }
            }
        }
        return out.sorted { $0.ssrc < $1.ssrc }
    }

    /// A stream's statistics at `nowMs` (the receive clock; nil: now).
    func stats(ssrc: UInt32, nowMs: Double? = nil) throws -> StreamStats {
        try withSlot(ssrc: ssrc) { s in
            s.drainInbox(nowMs: nil)
            s.jitter.shedStale(atMs: nowMs ?? Double(MonotonicClock.nanoseconds()) / 1e6)
            var st = StreamStats()
            st.jitter = s.jitter.stats
            st.jitter.duplicates += s.duplicates.load(ordering: .relaxed)
            st.jitter.late += st.jitter.skipped
            st.targetDepthMs = s.targetMs
            st.currentDepthMs = s.depthMs
            st.talking = s.talking
            return st
        }
    }

    // MARK: render thread

    /// From which slot the next copy of the session's lateness comes: the one that had
    /// seen the most frames in the last render (render lock).
    private var latenessDonor = -1

    /// Adds `frames` of every live stream to `bus` (the caller serializes renders);
    /// with `tap`, each stream's block also lands in its slot's per-speaker tap.
    /// Returns what the streams played, for the phase policy (their PlayedBlocks merged).
    @discardableResult
    func render(into bus: MixBus, frames: Int, nowMs: Double, tap: Bool = false, fixedBlock: Bool = false) -> PlayedBlock {
        var played = PlayedBlock()
        var talkEdge = false
        var donor = -1, donorFrames = SessionLateness.minFrames - 1
        let copyLateness = lateness.copyDue(nowMs: nowMs)
        // Indices, not `for s in slots`: a debug build allocates an iterator there.
        for i in 0..<slots.count {
            let s = slots[i]
            guard s.live.load(ordering: .acquiring) else { continue }
            s.lock.lock()
            if s.active {
                s.render(into: bus, frames: frames, nowMs: nowMs, scratch: decodeScratch, tap: tap, fixedBlock: fixedBlock)
                // The session's lateness comes from the stream that has seen the most
                // frames, among those whose frames still come (SessionLateness).
                let seen = s.jitter.framesObserved
                if seen > donorFrames && s.jitter.lastObservedMs + SessionLateness.freshMs > nowMs { donor = i; donorFrames = seen }
                if copyLateness && i == latenessDonor && seen >= SessionLateness.minFrames {
                    lateness.update(from: s.jitter, nowMs: nowMs)
                }
                played.merge(s.blockPlayed)
                talkEdge = talkEdge || s.blockTalkEdge
            }
            s.lock.unlock()
        }
        latenessDonor = donor
        // The network thread raises TALK_START / TALK_STOP: it does not look on a timer
        // while the mix plays (one eventfd write, at talkspurt edges only).
        if talkEdge { networkWake.wake() }
        return played
    }

    /// The renderer's ticks move `ms` earlier (negative: later) from its next render
    /// (RenderPhase): every live slot's jitter buffer is told now, under the slot's
    /// lock, so frames inserted until then are placed on the grid it moves to.
    func moveClocks(earlierByMs ms: Double) {
        for i in 0..<slots.count {
            let s = slots[i]
            guard s.live.load(ordering: .acquiring) else { continue }
            s.lock.lock()
            if s.active { s.jitter.moveClock(earlierByMs: ms) }
            s.lock.unlock()
        }
    }
}

/// What the streams of this session have seen of lateness on the way from the server
/// here, lent to each stream as its first frames arrive (JitterBuffer.seed(from:)).
/// Without it a stream's buffer knows nothing and plays the first frame at once, and
/// the first frame of that talkspurt that comes later than the first underruns (a
/// concealed period in the first words, and a 20 ms realignment). Every stream's frames
/// come the same way from the server, through the same scheduling here, so a new
/// stream starts with the cushion the others have needed, like any later talkspurt.
///
/// The renderer copies it once a second from the stream that has seen the most frames
/// (at least `minFrames`) among those whose last frame came within `freshMs`, while it
/// holds that slot's lock; a slot seeds its buffer from it in drainInbox (slot lock
/// held: the renderer, or a host thread reading statistics), when the first frames
/// waiting arrived within `freshMs` of the donor's last frame. Its lock is a leaf,
/// taken after a slot lock; the renderer only tries it (a copy skipped is made at
/// the next render), so the render never waits. Nothing allocates after init.
final class SessionLateness {
    /// A donor's frames older than this are not lent (the path may have changed since)...
    static let freshMs = 30_000.0
    /// ...nor a distribution learned from fewer frames (its tail is not known yet).
    static let minFrames = 50

    private let lock = Lock()
    private let prior = LatenessPrior()
    /// When the donor's last frame of the copy arrived (the receive clock).
    private var lastFrameMs = -Double.infinity
    /// When the renderer last copied (render lock only).
    private var copiedAtMs = -Double.infinity

    /// Renderer: whether a copy is due (once a second).
    func copyDue(nowMs: Double) -> Bool { nowMs >= copiedAtMs + 1000 }

    /// Renderer, holding the donor slot's lock.
    func update(from jb: JitterBuffer, nowMs: Double) {
        guard lock.tryLock() else { return }
        jb.copyLateness(into: prior)
        lastFrameMs = jb.lastObservedMs
        lock.unlock()
        copiedAtMs = nowMs
    }

    /// A slot's lock held, its buffer awaiting a prior, the oldest frame waiting for it
    /// arrived at `arrivalMs`.
    func seed(_ jb: JitterBuffer, arrivalMs: Double) {
        lock.withLock {
            if prior.frames > 0 && arrivalMs < lastFrameMs + SessionLateness.freshMs { jb.seed(from: prior) }
        }
    }

    /// The session ended or was re-established: nothing is lent from before.
    func forget() {
        lock.withLock { lastFrameMs = -.infinity }
    }
}
