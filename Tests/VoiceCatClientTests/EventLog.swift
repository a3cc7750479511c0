// Collects a client's events (through its callback) for tests that count them.
import Foundation
import VoiceCatClient
import VoiceCatSystem

final class EventLog: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [(ms: UInt64, event: ClientEvent)] = []

    init(_ c: VoiceClient) {   // a test thread: never refused (only inside the per-speaker sink)
        try! c.setEventHandler { [self] e in
            lock.lock(); items.append((MonotonicClock.milliseconds(), e)); lock.unlock()
        }
    }

    var events: [ClientEvent] { lock.lock(); defer { lock.unlock() }; return items.map(\.event) }
    var timed: [(ms: UInt64, event: ClientEvent)] { lock.lock(); defer { lock.unlock() }; return items }

    func count(_ type: ClientEventType) -> Int { events.filter { $0.type == type }.count }

    /// Waits until an event after the first `from` matches; returns it and when it came.
    @discardableResult
    func wait(from: Int = 0, timeoutMs: UInt64 = 5000, _ match: (ClientEvent) -> Bool) -> (ms: UInt64, event: ClientEvent)? {
        let deadline = MonotonicClock.milliseconds() + timeoutMs
        while true {
            let all = timed
            if from < all.count, let hit = all[from...].first(where: { match($0.event) }) { return hit }
            if MonotonicClock.milliseconds() >= deadline { return nil }
            usleep(2000)
        }
    }

    var total: Int { lock.lock(); defer { lock.unlock() }; return items.count }
}

extension ClientConfig {
    /// A client for tests: external playback, the given keepalive, no known-servers
    /// file unless one is given.
    static func testing(keepaliveMs: UInt32 = 1000, knownServers: String? = "") -> ClientConfig {
        var c = ClientConfig()
        c.keepaliveMs = keepaliveMs
        c.externalPlayback = true
        c.knownServersPath = knownServers
        return c
    }
}
