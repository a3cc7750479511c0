// The server tests drive the server with the blocking protocol client of
// VoiceCatTestSupport (real sockets, the real protocol module).
import VoiceCatServerCore
import VoiceCatTestSupport
import XCTest

typealias TestClient = WireClient

extension TestServer {
    /// Polls the counters until `cond` holds, failing the test after `timeoutMs`.
    @discardableResult
    func waitFor(_ what: String, timeoutMs: Int = 3000, file: StaticString = #filePath, line: UInt = #line,
                 _ cond: (ServerCounters) -> Bool) -> ServerCounters {
        if let c = poll(timeoutMs: timeoutMs, cond) { return c }
        XCTFail("server counters never reached: \(what); now \(counters.summary)", file: file, line: line)
        return counters
    }
}
