// Reading the media socket: voice frames opened and handed to their receive slots.
//
// Two threads can do it, one at a time (a token, never waited for on the audio
// path):
//   * whoever renders, just before each render (OutputStage.renderBlock), while the
//     network thread allows it (streams are received and no binding is under way).
//     The renderer wakes once per block anyway, so the frames of every stream cost no
//     wakeup of their own, and a frame that arrived before the render is played by it.
//   * the network thread (vc-network) otherwise: while nothing renders (pull mode
//     without pulls, no device), while binding, and whenever the renderer has not
//     read for `rendererStaleNs`. It does not wake to look: the renderer keeps a
//     lease (a timerfd the network thread polls) moving ahead of it as it reads, and
//     the lease runs out when the reads stop (or come more than 25 ms apart: a host
//     pulling large chunks; the network thread then arms it for when the reads would
//     be stale and sleeps again).
// Each datagram's arrival time is the kernel's (SO_TIMESTAMPNS), so the jitter
// statistics do not depend on which thread read it or when.
// What the renderer reads that is not voice: keepalive echoes go to the network
// thread through a small ring (it reads them at its next wakeup, at most a keepalive
// period later); anything else is dropped (bindings are read by the network thread,
// which stops the renderer's reads, and waits for one under way, before it binds).
import Glibc
import Synchronization
import VoiceCatProtocol
import VoiceCatSystem

/// The media socket's reader state. The token guards the socket, the keys, the ssrc
/// map of the ReceiveSet and the producer side of every slot's inbox and replay window.
final class MediaInput: @unchecked Sendable {
    /// Datagrams taken per recvmmsg, and most taken by one read.
    static let batch = 32
    static let maxPerRead = 256
    /// The network thread reads itself when the renderer has not for this long.
    static let rendererStaleNs: UInt64 = 50_000_000

    private let token = Atomic<Bool>(false)
    // Under the token.
    private(set) var socket: Socket?
    private(set) var key: SymmetricKey?
    private(set) var bindingID: UInt32 = 0
    let rx = DatagramBatch(capacity: MediaInput.batch, slotSize: MediaLimits.maxDatagramBytes, timestamps: true)

    /// The network thread lets the renderer read.
    let rendererMayRead = Atomic<Bool>(false)
    /// When a renderer last read the socket (monotonic ns, 0: not yet).
    let rendererReadNs = Atomic<UInt64>(0)
    /// Expires 25–50 ms (half to all of `rendererStaleNs`) after a renderer's last read:
    /// the renderer moves it on when less than half is left (every other 20 ms block), the
    /// network thread polls it while the renderer reads (renewLease, leaseExpired).
    let lease: DeadlineTimer
    /// When the lease is armed to expire (monotonic ns; whoever arms it last).
    private let leaseUntilNs = Atomic<UInt64>(0)

    let packetsIn = Atomic<UInt64>(0)
    let bytesIn = Atomic<UInt64>(0)
    let authFailures = Atomic<UInt64>(0)

    // Keepalive echoes read by a renderer, for the network thread (SPSC ring: the
    // token holder produces, the network thread consumes).
    private static let echoCapacity = 16
    private let echoSeq = UnsafeMutablePointer<UInt64>.allocate(capacity: MediaInput.echoCapacity)
    private let echoStamp = UnsafeMutablePointer<UInt32>.allocate(capacity: MediaInput.echoCapacity)
    private let echoAtMs = UnsafeMutablePointer<UInt64>.allocate(capacity: MediaInput.echoCapacity)
    private let echoHead = Atomic<Int>(0)
    private let echoTail = Atomic<Int>(0)

    init() throws(SystemError) {
        lease = try DeadlineTimer(polled: true)
        echoSeq.initialize(repeating: 0, count: MediaInput.echoCapacity)
        echoStamp.initialize(repeating: 0, count: MediaInput.echoCapacity)
        echoAtMs.initialize(repeating: 0, count: MediaInput.echoCapacity)
    }

    deinit { echoSeq.deallocate(); echoStamp.deallocate(); echoAtMs.deallocate() }

    // MARK: the token

    /// Takes the token if free (the renderer: it never waits).
    func tryTake() -> Bool { token.compareExchange(expected: false, desired: true, ordering: .acquiring).exchanged }

    /// Takes the token, yielding while the renderer holds it (a read of tens of µs).
    func take() { while !tryTake() { sched_yield() } }

    func give() { token.store(false, ordering: .releasing) }

    func withToken<T>(_ body: () throws -> T) rethrows -> T {
        take()
        defer { give() }
        return try body()
    }

    // MARK: network thread

    /// The session's media socket and receive key (nil socket: none; reading stops
    /// before the socket is closed).
    func attach(socket: Socket?, key: SymmetricKey?, bindingID: UInt32) {
        withToken {
            self.socket = socket
            self.key = key
            self.bindingID = bindingID
        }
        if socket == nil { rendererMayRead.store(false, ordering: .relaxed) }
    }

    func setKey(_ key: SymmetricKey?) { withToken { self.key = key } }

    /// Stops the renderer's reads before a binding request goes out (network thread):
    /// once this returns, no renderer is reading or will read until allowed again, so
    /// the binding's replies reach the network thread (a renderer drops them). The
    /// token's hand-over orders the store before any later read (readForRender looks
    /// again once it holds the token).
    func stopRendererReads() {
        rendererMayRead.store(false, ordering: .relaxed)
        withToken {}
    }

    /// Whether the renderer reads now: it may and it did within `rendererStaleNs`.
    func rendererReads(nowNs: UInt64) -> Bool {
        guard rendererMayRead.load(ordering: .relaxed) else { return false }
        let last = rendererReadNs.load(ordering: .relaxed)
        return last != 0 && nowNs &- last < MediaInput.rendererStaleNs
    }

    /// The renderer, having read at `nowNs`: moves the lease on when less than half of
    /// it is left (one timerfd_settime, never blocking).
    func renewLease(nowNs: UInt64) {
        guard leaseUntilNs.load(ordering: .relaxed) < nowNs + MediaInput.rendererStaleNs / 2 else { return }
        let until = nowNs + MediaInput.rendererStaleNs
        leaseUntilNs.store(until, ordering: .relaxed)
        lease.arm(atNs: until)
    }

    /// The network thread, its poll having found the lease readable: takes the expiry
    /// away and, while the renderer still reads, arms the lease for when the reads go
    /// stale (a renderer that reads further apart than half the lease, or an arm racing
    /// the renderer's, lets it expire early). The read time is loaded before the clock,
    /// so a read in between is not taken for one from the future (stale).
    func leaseExpired() {
        lease.consume()
        let last = rendererReadNs.load(ordering: .relaxed)
        guard rendererMayRead.load(ordering: .relaxed), last != 0,
              MonotonicClock.nanoseconds() &- last < MediaInput.rendererStaleNs else { return }
        let until = last + MediaInput.rendererStaleNs + 1_000_000
        leaseUntilNs.store(until, ordering: .relaxed)
        lease.arm(atNs: until)
    }

    /// Hands the keepalive echoes a renderer read to `body` (seq, echoed timestamp, arrival ms).
    func takeEchoes(_ body: (UInt64, UInt32, UInt64) -> Void) {
        var h = echoHead.load(ordering: .relaxed)
        let t = echoTail.load(ordering: .acquiring)
        while h < t {
            let i = h % MediaInput.echoCapacity
            body(echoSeq[i], echoStamp[i], echoAtMs[i])
            h += 1
        }
        echoHead.store(h, ordering: .releasing)
    }

    // MARK: token holder

    /// A keepalive echo read by the renderer (token held); dropped when the ring is full.
    fileprivate func pushEcho(seq: UInt64, stamp: UInt32, atMs: UInt64) {
        let t = echoTail.load(ordering: .relaxed)
        guard t - echoHead.load(ordering: .acquiring) < MediaInput.echoCapacity else { return }
        let i = t % MediaInput.echoCapacity
        echoSeq[i] = seq; echoStamp[i] = stamp; echoAtMs[i] = atMs
        echoTail.store(t + 1, ordering: .releasing)
    }
}

extension ReceiveSet {
    /// The renderer's read, just before it renders: takes what has arrived, if the
    /// network thread lets it and nobody else is reading. Never waits.
    func readForRender() {
        guard input.rendererMayRead.load(ordering: .relaxed), input.tryTake() else { return }
        // Again, holding the token: the network thread may have stopped the reads
        // (stopRendererReads) between the first look and the take.
        guard input.rendererMayRead.load(ordering: .relaxed) else { input.give(); return }
        readHeld { _, h, arrivalNs in
            // Bindings are the network thread's (it reads itself while binding).
            guard h.type == .keepalive, h.ssrc == input.bindingID else { return }
            input.pushEcho(seq: h.seq, stamp: h.timestamp, atMs: arrivalNs / 1_000_000)
        }
        input.give()
        let now = MonotonicClock.nanoseconds()
        input.rendererReadNs.store(now, ordering: .relaxed)
        input.renewLease(nowNs: now)
    }

    /// Reads every datagram waiting (token held): voice frames go to their slots, the
    /// other authentic-looking ones to `other` (datagram, header, arrival time ns).
    func readHeld(other: (UnsafeMutableRawBufferPointer, FrameHeader, UInt64) -> Void) {
        // What every datagram needs, taken once per read (the token holds it still),
        // and the counters added once: per datagram each cost a retain or an atomic add
        // on lines the network thread reads.
        let input = self.input
        guard let sock = input.socket else { return }
        let key = input.key
        let rx = input.rx
        var packets: UInt64 = 0, bytes: UInt64 = 0
        defer {
            input.packetsIn.wrappingAdd(packets, ordering: .relaxed)
            input.bytesIn.wrappingAdd(bytes, ordering: .relaxed)
        }
        for _ in 0..<(MediaInput.maxPerRead / MediaInput.batch) {
            guard let got = try? rx.receive(from: sock), got > 0 else { return }
            // The kernel stamps arrivals on the realtime clock; the jitter buffer and the
            // renderer use the monotonic one.
            let monoNs = MonotonicClock.nanoseconds()
            var realtime = timespec()
            clock_gettime(CLOCK_REALTIME, &realtime)
            let realNs = UInt64(realtime.tv_sec) * 1_000_000_000 + UInt64(realtime.tv_nsec)
            for i in 0..<got {
                guard !rx.wasTruncated(i) else { continue }
                let d = rx.datagram(i)
                let arrivalNs: UInt64
                if let stamp = rx.receiveTimeRealtimeNs(i), stamp <= realNs, realNs - stamp < 1_000_000_000 {
                    arrivalNs = monoNs - (realNs - stamp)
                } else {
                    arrivalNs = monoNs
                }
                guard let h = try? FrameHeader.parse(UnsafeRawBufferPointer(d)) else { continue }
                packets &+= 1
                bytes &+= UInt64(d.count)
                if h.type == .voice {
                    handOver(d, h, key: key, arrivalNs: arrivalNs)
                } else {
                    other(d, h, arrivalNs)
                }
            }
            if got < MediaInput.batch { return }
        }
    }

    /// One voice datagram to its slot's inbox (token held).
    private func handOver(_ d: UnsafeMutableRawBufferPointer, _ h: FrameHeader, key: SymmetricKey?, arrivalNs: UInt64) {
        guard let idx = slotIndex(ssrc: h.ssrc), let key else { return }
        let opened: (header: FrameHeader, length: Int)
        do { opened = try MediaCrypto.open(d, key: key) } catch {
            input.authFailures.wrappingAdd(1, ordering: .relaxed)
            return
        }
        let slot = slots[idx]
        guard slot.replay.accept(h.seq) == .fresh else {
            slot.duplicates.wrappingAdd(1, ordering: .relaxed)
            return
        }
        let payload = UnsafeRawBufferPointer(rebasing: d[FrameHeader.size..<(FrameHeader.size + opened.length)])
        // Handed to the renderer through the slot's ring: no lock per frame. A full ring
        // (nothing has rendered for its 64 frames: a playback device suspended, stalled
        // or switching, a host that stopped pulling) is moved into the jitter buffer
        // here, as a statistics reader's is, so its frames stay counted (received, and
        // late when rendering resumes past them). Dropped at the ring, they were seq
        // gaps: counted lost, and reported to the talker as loss (its protection went
        // up, helper-90). The slot lock is only tried (never waited for on the audio
        // path's lock): in the rare case it is held, the frame is dropped and counted
        // as before.
        if slot.inbox.isFull && slot.lock.tryLock() {
            slot.drainInbox(nowMs: nil)
            slot.lock.unlock()
        }
        slot.inbox.push(seq: h.seq, timestamp: h.timestamp, flags: h.flags, arrivalMs: Double(arrivalNs) / 1e6, payload: payload)
        // Talk state while nothing renders follows this: a DTX pause's comfort-noise
        // updates are no talk (each was a TALK_START / TALK_STOP pair of its own).
        if !h.flags.contains(.dtx) { slot.lastVoiceFrameMs.store(arrivalNs / 1_000_000, ordering: .relaxed) }
    }
}
