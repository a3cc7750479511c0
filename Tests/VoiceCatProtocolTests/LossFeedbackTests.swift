// Loss feedback messages and the server's aggregation (issue #16).
import XCTest
@testable import VoiceCatProtocol

final class LossFeedbackMessageTests: XCTestCase {
    func testReportsAndFeedbackRoundTrip() throws {
        let report = ControlMessage.receiverReport(ReceiverReport(reports: [
            ReceptionReport(ssrc: 7, counts: LossCounts(expected: 250, lost: 6, isolated: 4)),
            ReceptionReport(ssrc: 9, counts: LossCounts(expected: 100, lost: 0, isolated: 0)),
        ]))
        XCTAssertEqual(try ControlMessage.decode(report.encode()), report)
        let feedback = ControlMessage.lossFeedback(LossFeedback(streamID: 257, ssrc: 7, listeners: 2,
                                                                counts: LossCounts(expected: 250, lost: 6, isolated: 4)))
        XCTAssertEqual(try ControlMessage.decode(feedback.encode()), feedback)
        XCTAssertNil(feedback.serverMessageProblem)
        XCTAssertNotNil(report.serverMessageProblem, "only clients report")
    }

    func testCountsThatCannotBeAreRefused() {
        for c in [LossCounts(expected: 10, lost: 11, isolated: 0), LossCounts(expected: 10, lost: 2, isolated: 3)] {
            let m = ControlMessage.lossFeedback(LossFeedback(streamID: 1, ssrc: 1, listeners: 1, counts: c))
            XCTAssertNotNil(m.serverMessageProblem, "\(c)")
        }
    }

    func testTheQuantileFollowsOneLossyListenerOfTwoButNotOneOfFour() {
        let clean = LossCounts(expected: 250, lost: 0, isolated: 0)
        let lossy = LossCounts(expected: 250, lost: 10, isolated: 8)
        XCTAssertEqual(LossAggregation.aggregate([clean, lossy])?.counts, lossy)
        XCTAssertEqual(LossAggregation.aggregate([clean, clean, lossy])?.counts, lossy)
        XCTAssertEqual(LossAggregation.aggregate([clean, clean, clean, lossy])?.counts, clean)
        XCTAssertEqual(LossAggregation.aggregate([clean, clean, lossy, lossy])?.counts, lossy)
        XCTAssertEqual(LossAggregation.aggregate(Array(repeating: clean, count: 9) + [lossy])?.counts, clean)
        XCTAssertEqual(LossAggregation.aggregate(Array(repeating: clean, count: 7) + Array(repeating: lossy, count: 3))?.counts, lossy)
        // Reports over too few frames, or impossible ones, are not counted.
        let short = LossCounts(expected: 10, lost: 5, isolated: 5)
        XCTAssertEqual(LossAggregation.aggregate([clean, short])?.listeners, 1)
        XCTAssertNil(LossAggregation.aggregate([short]))
        XCTAssertNil(LossAggregation.aggregate([]))
    }
}
