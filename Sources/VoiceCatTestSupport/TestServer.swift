// Test support shared by the test targets: a voicecat-server on an ephemeral
// loopback port, and the isolation every client test needs. Not part of any product.
import Glibc
import VoiceCatServerCore
import VoiceCatSystem

/// Keeps test clients out of the user's files: XDG_CONFIG_HOME points at a fresh
/// directory of this process (so the per-user known-servers file is the process's
/// own), and test servers share one identity unless a test asks for its own (so a
/// port reused by a later server never looks like a changed identity). The directory
/// is made in $TMPDIR (else /tmp): scripts/xctest-parallel.sh gives each test process
/// one of its own and removes it after the test.
public enum TestEnvironment {
    public static let directory: String = {
        let base = getenv("TMPDIR").map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        var tmpl = Array((base + "/vc-test-env-XXXXXX").utf8CString)
        guard let d = mkdtemp(&tmpl) else { fatalError("mkdtemp failed") }
        let dir = String(cString: d)
        setenv("XDG_CONFIG_HOME", dir + "/config", 1)
        return dir
    }()

    /// The identity file test servers share.
    public static var sharedIdentityPath: String { directory + "/shared-identity.key" }

    /// A fresh directory for one test's files.
    public static func makeDirectory() -> String {
        var tmpl = Array((directory + "/t-XXXXXX").utf8CString)
        guard let d = mkdtemp(&tmpl) else { fatalError("mkdtemp failed") }
        return String(cString: d)
    }
}

/// A server on loopback for one test.
public final class TestServer {
    public let server: Server
    let dir: String
    public let identityPath: String
    public var port: UInt16 { server.port }

    /// `freshIdentity`: a new identity of its own (else the process's shared one).
    /// `port` nil: a free port the kernel picks. `identityPath`: a given identity file (a restart).
    public init(freshIdentity: Bool = false, port: UInt16? = nil, identityPath: String? = nil,
                _ tweak: (inout ServerConfig) -> Void = { _ in }) throws {
        dir = TestEnvironment.makeDirectory()
        var c = ServerConfig()
        if let port { c.port = port } else { c.anyPort = true }
        c.identityPath = identityPath ?? (freshIdentity ? dir + "/identity.key" : TestEnvironment.sharedIdentityPath)
        self.identityPath = c.identityPath
        tweak(&c)
        var made: Server? = nil
        // A restart on the same port may find it in TIME_WAIT for a moment.
        for attempt in 0..<50 {
            do { made = try Server(config: c); break } catch {
                if port == nil || attempt == 49 { throw error }
                sleepMilliseconds(100)
            }
        }
        server = made!
        server.log = { _ in }
        server.start()
    }

    public var counters: ServerCounters { server.countersSnapshot() }

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
