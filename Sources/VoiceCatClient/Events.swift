// The event queue: bounded, oldest dropped when full; waited on by vc_poll_event.
import VoiceCatSystem

final class EventQueue {
    private let cond = Condition()
    private var items: [ClientEvent] = []
    private var head = 0
    private let capacity: Int

    init(capacity: Int) { self.capacity = max(1, capacity) }

    func push(_ e: ClientEvent) {
        cond.withLock {
            if items.count - head >= capacity { head += 1 }  // oldest dropped, as documented
            items.append(e)
            if head > 256 { items.removeFirst(head); head = 0 }
            cond.broadcast()
        }
    }

    /// The oldest event, waiting up to `timeoutMs` (negative: forever).
    func pop(timeoutMs: Int) -> ClientEvent? {
        cond.lock(); defer { cond.unlock() }
        let deadline: UInt64? = timeoutMs < 0 ? nil : MonotonicClock.milliseconds() + UInt64(timeoutMs)
        while items.count == head {
            if let d = deadline, MonotonicClock.milliseconds() >= d { return nil }
            cond.wait(untilMs: deadline)
        }
        let e = items[head]
        head += 1
        return e
    }
}
