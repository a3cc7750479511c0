// Test support shared by the test targets: a voicecat-server on an ephemeral
// loopback port with a fresh identity. Not part of any product.
import Glibc
import VoiceCatServerCore
import VoiceCatSystem

/// A server on an ephemeral loopback port with a fresh identity, for one test.
public final class TestServer {
    public let server: Server
    let dir: String
    public var port: UInt16 { server.port }

    public init(_ tweak: (inout ServerConfig) -> Void = { _ in }) throws {
        var tmpl = Array("/tmp/vc-test-XXXXXX".utf8CString)
        guard let d = mkdtemp(&tmpl) else { throw SystemError("mkdtemp", errno: errno) }
        dir = String(cString: d)
        var c = ServerConfig()
        c.port = 0
        c.identityPath = dir + "/identity.key"
        tweak(&c)
        server = try Server(config: c)
        server.log = { _ in }
        server.start()
    }

    public var counters: ServerCounters { server.countersSnapshot() }

    /// Polls the counters until `cond` holds (or fails the test after `timeoutMs`).
    /// Polls the counters until `cond` holds; nil after `timeoutMs`.
    public func poll(timeoutMs: Int = 3000, _ cond: (ServerCounters) -> Bool) -> ServerCounters? {
        let deadline = MonotonicClock.milliseconds() + UInt64(timeoutMs)
        while MonotonicClock.milliseconds() < deadline {
            let c = counters
            if cond(c) { return c }
            sleepMilliseconds(10)
        }
        return nil
    }

    public func stop() {
        server.stop()
        unlink(dir + "/identity.key")
        rmdir(dir)
    }
}
