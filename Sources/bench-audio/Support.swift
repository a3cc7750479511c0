// Clocks, statistics, child processes and small helpers of bench-audio.
import CLinux
import Glibc
import Synchronization
import VoiceCatSystem

// MARK: clocks

enum CPUClock {
    /// CPU time of the calling thread (ns).
    static func thread() -> UInt64 { read(CLOCK_THREAD_CPUTIME_ID) }

    /// CPU time of the whole process, user + system (ns), from getrusage(RUSAGE_SELF).
    static func process() -> UInt64 {
        var u = rusage()
        getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &u)
        return (UInt64(u.ru_utime.tv_sec) + UInt64(u.ru_stime.tv_sec)) * 1_000_000_000
            + (UInt64(u.ru_utime.tv_usec) + UInt64(u.ru_stime.tv_usec)) * 1000
    }

    /// Voluntary + involuntary context switches of the process (wakeups, roughly).
    static func contextSwitches() -> UInt64 {
        var u = rusage()
        getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &u)
        return UInt64(u.ru_nvcsw) + UInt64(u.ru_nivcsw)
    }

    private static func read(_ clock: clockid_t) -> UInt64 {
        var ts = timespec()
        clock_gettime(clock, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }
}

/// Sleeps until the monotonic time `ns` (absolute, so a loop of these keeps its cadence).
func sleepUntil(ns: UInt64) {
    var ts = timespec(tv_sec: Int(ns / 1_000_000_000), tv_nsec: Int(ns % 1_000_000_000))
    while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nil) == EINTR {}
}

func sleepSeconds(_ s: Double) { sleepUntil(ns: MonotonicClock.nanoseconds() + UInt64(s * 1e9)) }

/// CPU time per thread of this process, by thread name (from /proc/self/task/*/schedstat,
/// the scheduler's exact run time). Threads of the same name are summed. Allocates: call
/// it outside allocation-counting windows.
func threadCPUByName() -> [String: UInt64] {
    var out: [String: UInt64] = [:]
    guard let dir = opendir("/proc/self/task") else { return out }
    defer { closedir(dir) }
    while let e = readdir(dir) {
        let tid = withUnsafeBytes(of: e.pointee.d_name) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
        guard tid.first?.isNumber == true else { continue }
        let name = readSmallFile("/proc/self/task/\(tid)/comm").trimmingNewline
        let sched = readSmallFile("/proc/self/task/\(tid)/schedstat")
        guard let ns = UInt64(sched.split(separator: " ").first ?? "") else { continue }
        out[name, default: 0] += ns
    }
    return out
}

func readSmallFile(_ path: String) -> String {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return "" }
    defer { close(fd) }
    var buf = [UInt8](repeating: 0, count: 512)
    let n = buf.withUnsafeMutableBytes { read(fd, $0.baseAddress, 512) }
    return n > 0 ? String(decoding: buf[0..<n], as: UTF8.self) : ""
}

extension String {
    var trimmingNewline: String { hasSuffix("\n") ? String(dropLast()) : self }
}

/// Differences of two threadCPUByName() snapshots, grouped into the client's roles.
struct ThreadBreakdown {
    var byName: [String: UInt64] = [:]

    static func between(_ a: [String: UInt64], _ b: [String: UInt64]) -> ThreadBreakdown {
        var d = ThreadBreakdown()
        for (name, v) in b { d.byName[name] = v &- (a[name] ?? 0) }
        return d
    }

    mutating func add(_ o: ThreadBreakdown) { for (k, v) in o.byName { byName[k, default: 0] += v } }

    func sum(_ names: [String]) -> UInt64 { names.reduce(0) { $0 + (byName[$1] ?? 0) } }
}

// MARK: statistics

func median(_ xs: [Double]) -> Double { percentile(xs, 50) }

/// The p-th percentile (nearest rank, p in 0...100); NaN for an empty list.
func percentile(_ xs: [Double], _ p: Double) -> Double {
    guard !xs.isEmpty else { return .nan }
    let s = xs.sorted()
    let rank = Int((p / 100 * Double(s.count)).rounded(.up))
    return s[min(s.count - 1, max(0, rank - 1))]
}

// MARK: formatting

func fmt(_ x: Double, _ digits: Int = 2) -> String {
    guard x.isFinite else { return "n/a" }
    var p = 1.0
    for _ in 0..<digits { p *= 10 }
    let r = (x * p).rounded() / p
    var s = "\(r)"
    if let dot = s.firstIndex(of: ".") {
        let decimals = s.distance(from: dot, to: s.endIndex) - 1
        if decimals < digits { s += String(repeating: "0", count: digits - decimals) }
        if digits == 0 { s = String(s[..<dot]) }
    } else if digits > 0 {
        s += "." + String(repeating: "0", count: digits)
    }
    return s
}

func fail(_ message: String) -> Never {
    fputs("bench-audio: \(message)\n", stderr)
    exit(1)
}

/// Writes a line to stdout at once (the parent reads it through a pipe).
func say(_ line: String) {
    var s = line + "\n"
    s.withUTF8 { _ = fwrite($0.baseAddress, 1, $0.count, stdout) }
    fflush(stdout)
}

/// Reports a figure to the parent: `R name value`.
func report(_ name: String, _ value: Double) { say("R \(name) \(value)") }

/// Reports a word (no spaces) to the parent: `S name text`.
func report(_ name: String, text: String) { say("S \(name) \(text)") }

// MARK: roles' arguments

/// `--cpus A,B,...` (the orchestrator passes it; see runAll): pins this role's
/// process, the calling thread and every thread created after it, to those CPUs.
/// Called first thing in a role, before any thread exists. Says `R pinned 1` when it
/// did; a CPU this process may not use leaves it unpinned (`R pinned 0`, and why on
/// stderr) rather than failing the run.
func pinToCPUsIfAsked(_ args: Arguments) {
    let spec = args.string("cpus", "")
    guard !spec.isEmpty else { return }
    let cpus = spec.split(separator: ",").compactMap { Int32($0) }
    guard !cpus.isEmpty, cpus.count == spec.split(separator: ",").count else { fail("bad --cpus \(spec)") }
    let ok = cpus.withUnsafeBufferPointer { vcshim_pin_thread_to_cpus($0.baseAddress, Int32($0.count)) } == 0
    if !ok { fputs("bench-audio: cannot pin to CPUs \(spec) (errno \(errno)); left to the scheduler\n", stderr) }
    report("pinned", ok ? 1 : 0)
}

/// The CPUs this process may run on (sched_getaffinity), in order; empty if unknown.
func allowedCPUs() -> [Int] {
    var buf = [Int32](repeating: 0, count: 1024)
    let n = buf.withUnsafeMutableBufferPointer { vcshim_allowed_cpus($0.baseAddress, Int32($0.count)) }
    return n > 0 ? buf[0..<Int(n)].map { Int($0) } : []
}

struct Arguments {
    var values: [String: String] = [:]
    init(_ list: ArraySlice<String>) {
        var it = list.makeIterator()
        while let a = it.next() {
            guard a.hasPrefix("--") else { fail("unexpected argument \(a)") }
            values[String(a.dropFirst(2))] = it.next() ?? ""
        }
    }
    func int(_ k: String, _ d: Int) -> Int { values[k].flatMap { Int($0) } ?? d }
    func double(_ k: String, _ d: Double) -> Double { values[k].flatMap { Double($0) } ?? d }
    func string(_ k: String, _ d: String) -> String { values[k] ?? d }
}

// MARK: the parent's end of a child role

/// Set when the parent closes our stdin: it wants us to stop (or is gone).
final class ParentWatch: @unchecked Sendable {
    static let shared = ParentWatch()
    private let closed = Atomic<Bool>(false)
    private var thread: SystemThread?

    var stopRequested: Bool { closed.load(ordering: .acquiring) }

    /// Starts a thread that blocks on stdin until the parent closes it.
    func start() {
        thread = SystemThread(name: "bench-stdin") { [self] in
            var b = [UInt8](repeating: 0, count: 64)
            while true {
                let n = b.withUnsafeMutableBytes { read(0, $0.baseAddress, 64) }
                if n == 0 || (n < 0 && errno != EINTR) { break }
            }
            closed.store(true, ordering: .releasing)
        }
    }

    /// Waits until the parent closes stdin.
    func wait() { while !stopRequested { sleepUntil(ns: MonotonicClock.nanoseconds() + 5_000_000) } }
}

/// This program run again with a role argument, its stdin and stdout on pipes.
final class Child {
    let role: String
    let pid: pid_t
    private var stdinFD: Int32
    private let stdoutFD: Int32
    private var buffer: [UInt8] = []
    /// Every `R name value` line read so far.
    private(set) var results: [String: Double] = [:]
    /// Every `S name text` line read so far.
    private(set) var texts: [String: String] = [:]

    init(_ args: [String]) {
        role = args.first ?? "?"
        var inPipe: [Int32] = [0, 0], outPipe: [Int32] = [0, 0]
        guard pipe(&inPipe) == 0, pipe(&outPipe) == 0 else { fail("pipe: \(errno)") }
        // Only the dup2'ed copies reach the child (other children must not hold these ends).
        for fd in inPipe + outPipe { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        posix_spawn_file_actions_adddup2(&actions, inPipe[0], 0)
        posix_spawn_file_actions_adddup2(&actions, outPipe[1], 1)
        let exe = Child.executable
        let argv: [UnsafeMutablePointer<CChar>?] = ([exe] + args).map { strdup($0) } + [nil]
        defer { for p in argv { free(p) } }
        var p: pid_t = 0
        let rc = posix_spawn(&p, exe, &actions, nil, argv, environ)
        posix_spawn_file_actions_destroy(&actions)
        guard rc == 0 else { fail("posix_spawn \(exe): \(rc)") }
        pid = p
        close(inPipe[0]); close(outPipe[1])
        stdinFD = inPipe[1]
        stdoutFD = outPipe[0]
    }

    static let executable: String = {
        var buf = [CChar](repeating: 0, count: 4096)
        let n = readlink("/proc/self/exe", &buf, 4095)
        guard n > 0 else { fail("cannot read /proc/self/exe") }
        return String(cString: buf)
    }()

    /// The next line of the child's stdout; nil at EOF or after `timeoutMs`.
    func readLine(timeoutMs: Int) -> String? {
        let deadline = MonotonicClock.milliseconds() + UInt64(timeoutMs)
        while true {
            if let nl = buffer.firstIndex(of: 10) {
                let line = String(decoding: buffer[..<nl], as: UTF8.self)
                buffer.removeSubrange(...nl)
                return line
            }
            let left = Int(Int64(deadline) - Int64(MonotonicClock.milliseconds()))
            guard left > 0 else { return nil }
            var pfd = pollfd(fd: stdoutFD, events: Int16(POLLIN), revents: 0)
            guard poll(&pfd, 1, Int32(left)) > 0 else { continue }
            var chunk = [UInt8](repeating: 0, count: 4096)
            let n = chunk.withUnsafeMutableBytes { read(stdoutFD, $0.baseAddress, 4096) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return nil }
            buffer += chunk[0..<n]
        }
    }

    /// Reads lines (collecting results) until one equals `marker`; fails the run if the
    /// child ends or stays silent for `timeoutMs`.
    func expect(_ marker: String, timeoutMs: Int = 60_000) {
        while let line = readLine(timeoutMs: timeoutMs) {
            if line == marker { return }
            let parts = line.split(separator: " ")
            if parts.count == 3, parts[0] == "R", let v = Double(parts[2]) {
                results[String(parts[1])] = v
            } else if parts.count == 3, parts[0] == "S" {
                texts[String(parts[1])] = String(parts[2])
            } else if !line.isEmpty {
                say("  [\(role)] \(line)")
            }
        }
        kill(pid, SIGKILL)
        fail("the \(role) process ended or stalled before saying \"\(marker)\"")
    }

    func result(_ name: String) -> Double { results[name] ?? .nan }

    /// Closes the child's stdin: the child's signal to stop.
    func closeInput() {
        if stdinFD >= 0 { close(stdinFD); stdinFD = -1 }
    }

    /// Closes stdin, reads the rest of its results up to "done" and reaps it.
    func finish(timeoutMs: Int = 60_000) {
        closeInput()
        expect("done", timeoutMs: timeoutMs)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        close(stdoutFD)
    }
}

/// One named thread's CPU time (ns), read without allocating: the thread's
/// /proc/self/task/<tid>/schedstat is opened once and re-read with pread.
final class NamedThreadClock {
    private var fds: [Int32] = []
    private let buf = UnsafeMutablePointer<UInt8>.allocate(capacity: 128)

    /// Every thread of this process called `name` (their times are summed).
    init(_ name: String) {
        guard let dir = opendir("/proc/self/task") else { return }
        defer { closedir(dir) }
        while let e = readdir(dir) {
            let tid = withUnsafeBytes(of: e.pointee.d_name) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
            guard tid.first?.isNumber == true, readSmallFile("/proc/self/task/\(tid)/comm").trimmingNewline == name else { continue }
            let fd = open("/proc/self/task/\(tid)/schedstat", O_RDONLY | O_CLOEXEC)
            if fd >= 0 { fds.append(fd) }
        }
    }

    deinit { for fd in fds { close(fd) }; buf.deallocate() }

    var found: Bool { !fds.isEmpty }

    func read() -> UInt64 {
        var total: UInt64 = 0
        for fd in fds {
            let n = pread(fd, buf, 128, 0)
            var v: UInt64 = 0
            var i = 0
            while i < n, buf[i] >= 48, buf[i] <= 57 { v = v * 10 + UInt64(buf[i] - 48); i += 1 }
            total += v
        }
        return total
    }
}
