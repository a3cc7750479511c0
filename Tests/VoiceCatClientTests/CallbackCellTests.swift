import Foundation
import Synchronization
import XCTest
import VoiceCatSystem

/// CallbackCell, the hand-off behind every callback and sink of the client: a setter
/// returns only once no call can still use the box it replaced, and is not starved by
/// a reader that calls back to back.
final class CallbackCellTests: XCTestCase {
    final class Box: @unchecked Sendable {
        let inCall = Atomic<Bool>(false)
        let callsAfterReplaced = Atomic<Int>(0)
        let replaced = Atomic<Bool>(false)
        func work() {
            if replaced.load(ordering: .acquiring) { callsAfterReplaced.wrappingAdd(1, ordering: .relaxed) }
            inCall.store(true, ordering: .releasing)
            // Busy for 2 ms on the CPU (a sleeping reader leaves its wakeups as gaps).
            let until = MonotonicClock.nanoseconds() + 2_000_000
            while MonotonicClock.nanoseconds() < until {}
            inCall.store(false, ordering: .releasing)
        }
    }

    /// The reader calls without a pause (each call 2 ms of CPU, as an event callback
    /// under an event storm): the setter waited for a moment when no call ran, which
    /// such a reader almost never leaves (helper-63 saw 1.4 s). It now waits for the
    /// call running when it swapped, at most. Judged without a clock: the setter must
    /// return while the reader is still at it (10 s of calls).
    func testASetterIsNotStarvedByAReaderCallingBackToBack() {
        let cell = CallbackCell<Box>()
        let first = Box(), second = Box()
        cell.set(first)
        let stop = Atomic<Bool>(false), readerDone = Atomic<Bool>(false)
        let reader = Thread {
            let until = Date().addingTimeInterval(10)
            while !stop.load(ordering: .acquiring) && Date() < until { cell.call { $0.work() } }
            readerDone.store(true, ordering: .releasing)
        }
        reader.start()
        usleep(50_000)
        cell.set(second)
        let readerWasDone = readerDone.load(ordering: .acquiring)
        XCTAssertFalse(first.inCall.load(ordering: .acquiring), "the replaced box is still in a call")
        first.replaced.store(true, ordering: .releasing)
        usleep(20_000)
        stop.store(true, ordering: .releasing)
        while !readerDone.load(ordering: .acquiring) { usleep(1000) }
        XCTAssertFalse(readerWasDone, "set waited until the reader stopped: starved")
        XCTAssertEqual(first.callsAfterReplaced.load(ordering: .relaxed), 0, "the replaced box was called after set returned")
    }
}
