// A child process for tests and the load generator: the real voicecat-server binary,
// started with posix_spawn, its output in a file, its CPU time read from /proc.
import Glibc
import VoiceCatSystem

public final class ChildProcess {
    public let pid: pid_t
    /// Where stdout and stderr go.
    public let outputPath: String
    private var exitStatus: Int32?

    /// Starts `path` with `arguments`; stdout and stderr go to `outputPath`.
    public init(_ path: String, _ arguments: [String], outputPath: String) throws {
        self.outputPath = outputPath
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        // The child starts with no signal blocked, whatever this thread blocks.
        var attr = posix_spawnattr_t()
        posix_spawnattr_init(&attr)
        defer { posix_spawnattr_destroy(&attr) }
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attr, &none)
        posix_spawnattr_setflags(&attr, Int16(POSIX_SPAWN_SETSIGMASK))
        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        defer { for a in argv { free(a) } }
        var p: pid_t = 0
        let rc = posix_spawn(&p, path, &actions, &attr, argv, environ)
        guard rc == 0 else { throw SystemError("posix_spawn(\(path))", errno: rc) }
        pid = p
    }

    deinit {
        if exitStatus == nil {
            kill(pid, SIGKILL)
            _ = wait()
        }
    }

    public func signal(_ sig: Int32) { kill(pid, sig) }

    /// Waits for the child to end; its exit code (128 + signal when killed).
    @discardableResult
    public func wait() -> Int32 {
        if let s = exitStatus { return s }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        // WIFEXITED / WEXITSTATUS / WTERMSIG are macros Swift cannot import.
        let code = status & 0x7f == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        exitStatus = code
        return code
    }

    /// True while the child has not exited (does not reap it).
    public var isRunning: Bool {
        guard exitStatus == nil else { return false }
        var info = siginfo_t()
        return waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info._sifields._kill.si_pid == 0
    }

    /// What the child wrote so far.
    public var output: String {
        (try? Files.read(outputPath)).map { String(decoding: $0, as: UTF8.self) } ?? ""
    }

    /// Polls the child's output until it contains `text`; false if the time runs out first.
    public func waitForOutput(_ text: String, timeoutMs: Int) -> Bool {
        let deadline = MonotonicClock.milliseconds() + UInt64(timeoutMs)
        while !output.contains(text) {
            if MonotonicClock.milliseconds() >= deadline { return false }
            sleepMilliseconds(20)
        }
        return true
    }

    /// CPU time the child used so far (user + system, all threads), in seconds, from the
    /// kernel's nanosecond process clock (falling back to /proc's clock ticks).
    public func cpuSeconds() -> Double {
        var clock = clockid_t()
        var ts = timespec()
        if clock_getcpuclockid(pid, &clock) == 0, clock_gettime(clock, &ts) == 0 {
            return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
        }
        guard let bytes = try? Files.read("/proc/\(pid)/stat") else { return 0 }
        let text = String(decoding: bytes, as: UTF8.self)
        guard let close = text.lastIndex(of: ")") else { return 0 }
        // Fields after the command name: state is field 3; utime and stime are 14 and 15.
        let fields = text[text.index(after: close)...].split(separator: " ")
        guard fields.count > 13, let u = Double(fields[11]), let s = Double(fields[12]) else { return 0 }
        return (u + s) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// Polls until `path` holds a line (a port file), or the child exits, or the time is up.
    public func waitForFile(_ path: String, timeoutMs: Int) -> String? {
        let deadline = MonotonicClock.milliseconds() + UInt64(timeoutMs)
        while MonotonicClock.milliseconds() < deadline {
            if let bytes = try? Files.read(path), bytes.contains(10) {
                return String(decoding: bytes, as: UTF8.self).trimmingCharacters()
            }
            if !isRunning { return nil }
            sleepMilliseconds(10)
        }
        return nil
    }

    /// The built voicecat-server next to the running test bundle or program
    /// (.build/<config>/voicecat-server), or nil.
    public static func siblingExecutable(_ name: String) -> String? {
        var buf = [CChar](repeating: 0, count: 4096)
        let n = readlink("/proc/self/exe", &buf, buf.count - 1)
        guard n > 0 else { return nil }
        var dir = String(cString: buf)
        while let slash = dir.lastIndex(of: "/") {
            dir = String(dir[..<slash])
            let candidate = dir + "/" + name
            if access(candidate, X_OK) == 0 { return candidate }
            if dir.hasSuffix("/.build") || dir.isEmpty { break }
        }
        return nil
    }

    /// A fresh directory under /tmp.
    public static func temporaryDirectory() throws -> String {
        var tmpl = Array("/tmp/vc-test-XXXXXX".utf8CString)
        guard let d = mkdtemp(&tmpl) else { throw SystemError("mkdtemp", errno: errno) }
        return String(cString: d)
    }
}

extension String {
    func trimmingCharacters() -> String {
        var s = Substring(self)
        while let f = s.first, f == " " || f == "\n" || f == "\t" || f == "\r" { s = s.dropFirst() }
        while let l = s.last, l == " " || l == "\n" || l == "\t" || l == "\r" { s = s.dropLast() }
        return String(s)
    }
}
