// The queue behind vc_poll_event when the host polls too seldom.
@testable import VoiceCatClient
import VoiceCatABI
import XCTest

final class EventQueueTests: XCTestCase {
    func event(_ n: Int32) -> ClientEvent {
        var e = ClientEvent(type: .error)
        e.code = n
        return e
    }

    func testAFullQueueDropsTheOldestAndSaysHowManyWhereTheyWere() {
        // The oldest were dropped without a word: a host that polled too seldom missed,
        // say, a USER_DISCONNECTED and never knew to read the user list again.
        let q = EventQueue(capacity: 2)
        for n: Int32 in 1...5 { q.push(event(n)) }
        let marker = q.pop(timeoutMs: 0)
        XCTAssertEqual(marker?.type, VC_EVENT_EVENTS_DROPPED)
        XCTAssertEqual(marker?.code, 3)
        XCTAssertEqual(marker?.text, "3 events were dropped before this one: the queue holds 2 (vc_client_config.event_queue_size)")
        XCTAssertEqual(q.pop(timeoutMs: 0)?.code, 4)
        XCTAssertEqual(q.pop(timeoutMs: 0)?.code, 5)
        XCTAssertNil(q.pop(timeoutMs: 0))
        // Counted afresh after each marker; none while nothing is dropped.
        q.push(event(6))
        XCTAssertEqual(q.pop(timeoutMs: 0)?.code, 6)
        for n: Int32 in 7...9 { q.push(event(n)) }
        let again = q.pop(timeoutMs: 0)
        XCTAssertEqual(again?.type, VC_EVENT_EVENTS_DROPPED)
        XCTAssertEqual(again?.text.hasPrefix("1 event was dropped before this one"), true)
        XCTAssertEqual(q.pop(timeoutMs: 0)?.code, 8)
        XCTAssertEqual(q.pop(timeoutMs: 0)?.code, 9)
        XCTAssertNil(q.pop(timeoutMs: 0))
    }
}
