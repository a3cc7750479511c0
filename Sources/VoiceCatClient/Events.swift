// Events of one client. Any thread may raise one; the network thread delivers them
// all, in the order they were raised: into the queue vc_poll_event reads, then to
// the host's callback. So the callback always runs on the network thread, and the
// events of one protocol exchange (CHANNEL_JOINED, then the channel's
// REMOTE_STREAM_ADDED) arrive in protocol order. (One exception: while a reconnect
// attempt restores the session, the events the network thread raises are held, and
// go out after VC_EVENT_RECONNECTED, or not at all when the attempt fails.)
import Glibc
import VoiceCatABI
import VoiceCatSystem

/// The bounded queue behind vc_poll_event: oldest dropped when full, and a
/// VC_EVENT_EVENTS_DROPPED popped in their place (a host that polls too seldom learns
/// that it missed events, e.g. a USER_DISCONNECTED, and can read the state again).
final class EventQueue {
    private let cond = Condition()
    private var items: [ClientEvent] = []
    private var head = 0
    private let capacity: Int
    /// Events dropped since the last EVENTS_DROPPED was popped: all older than `head`.
    private var dropped = 0
    /// Set by `close` (the client is being destroyed): waiters return at once.
    private var closed = false
    /// Set by `closing` (a destroy has begun): only its DISCONNECTED is queued.
    private var finalOnly = false

    init(capacity: Int) {
        self.capacity = max(1, capacity)
        // Room for the queue and the popped head it compacts past 256: pushes (on the
        // network thread, in steady state too) never grow the array. A queue set larger
        // than 4096 may still grow, once, past that.
        items.reserveCapacity(min(self.capacity, 4096) + 258)
    }

    func push(_ e: ClientEvent) {
        cond.withLock {
            if finalOnly && e.type != .disconnected { return }
            if items.count - head >= capacity {  // oldest dropped, as documented
                head += 1
                dropped += 1
            }
            items.append(e)
            if head > 256 { items.removeFirst(head); head = 0 }
            cond.broadcast()
        }
    }

    /// The oldest event, waiting up to `timeoutMs` (negative: forever). nil when none
    /// came in time, and without waiting once the queue is closed and empty.
    func pop(timeoutMs: Int) -> ClientEvent? {
        cond.lock(); defer { cond.unlock() }
        let deadline: UInt64? = timeoutMs < 0 ? nil : MonotonicClock.milliseconds() + UInt64(timeoutMs)
        while items.count == head {
            if closed { return nil }
            if let d = deadline, MonotonicClock.milliseconds() >= d { return nil }
            _ = cond.wait(untilMs: deadline)
        }
        if dropped > 0 {
            var e = ClientEvent(type: .eventsDropped)
            e.code = Int32(clamping: dropped)
            e.text = "\(dropped) event\(dropped == 1 ? " was" : "s were") dropped before this one: the queue holds "
                + "\(capacity) (vc_client_config.event_queue_size)"
            dropped = 0
            return e
        }
        let e = items[head]
        head += 1
        return e
    }

    /// Closes the queue (a destroy, once its events are queued): a waiter in
    /// vc_poll_event takes what is queued (the DISCONNECTED of a connected client),
    /// then returns 0 events without waiting. A wake alone would not do: a waiter
    /// woken with nothing queued waits again, and destroy waits for it.
    func close() { cond.withLock { closed = true; cond.broadcast() } }

    /// A destroy has begun: what it tears down (streams stopped, talkers gone) is not
    /// queued, only the DISCONNECTED it raises, so a host thread waiting in
    /// vc_poll_event wakes with that event, not with one whose next poll would find the
    /// handle already freed.
    func closing() { cond.withLock { finalOnly = true } }
}

/// The host's event callback.
public final class EventHandlerBox {
    let handle: (ClientEvent) -> Void
    public init(_ handle: @escaping (ClientEvent) -> Void) { self.handle = handle }
}

/// Raised events waiting for the network thread, the poll queue and the callback.
final class EventHub {
    let queue: EventQueue
    let callback = CallbackCell<EventHandlerBox>()
    private let lock = Lock()
    private var outbox: [ClientEvent] = []
    private var taken: [ClientEvent] = []
    /// The network thread while a reconnect attempt holds its events (holdOwnEvents).
    private var holder: pthread_t?
    private var held: [ClientEvent] = []
    private let wake: WakeEvent

    init(capacity: Int, wake: WakeEvent) {
        queue = EventQueue(capacity: capacity)
        self.wake = wake
    }

    /// Any thread: hands `e` to the network thread.
    func raise(_ e: ClientEvent) {
        lock.withLock {
            if let h = holder, pthread_equal(h, pthread_self()) != 0 { held.append(e) } else { outbox.append(e) }
        }
        wake.wake()
    }

    /// The network thread: from now on the events it raises itself are held (a
    /// reconnect attempt's: what the new session hears of before RECONNECTED); other
    /// threads' events go out as usual.
    func holdOwnEvents() {
        lock.withLock {
            holder = pthread_self()
            held.removeAll(keepingCapacity: true)
        }
    }

    /// The network thread: stops holding; `first` (RECONNECTED), then the held events
    /// that `keep` accepts, go out in the order raised.
    func releaseHeld(first: ClientEvent? = nil, keep: (ClientEvent) -> Bool = { _ in true }) {
        lock.withLock {
            holder = nil
            if let first { outbox.append(first) }
            for e in held where keep(e) { outbox.append(e) }
            held.removeAll(keepingCapacity: true)
        }
        wake.wake()
    }

    /// The network thread: delivers everything raised so far, in order.
    /// `queued`: runs once the events are in the poll queue, before the callback sees
    /// them (the callback may wait on host threads that this releases).
    func deliver(queued: (() -> Void)? = nil) {
        lock.withLock { swap(&outbox, &taken) }
        for e in taken { queue.push(e) }
        queued?()
        guard !taken.isEmpty else { return }
        for e in taken { callback.call { $0.handle(e) } }
        taken.removeAll(keepingCapacity: true)
    }

    /// Forgets undelivered events (a new session starts).
    func discardPending() { lock.withLock { outbox.removeAll(); held.removeAll(); holder = nil } }
}
