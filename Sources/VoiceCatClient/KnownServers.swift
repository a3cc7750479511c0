// Trust on first use: the known-servers store (vc_client_config.known_servers_path).
// A text file, one server a line: `host:port fingerprint` (64 lowercase hex digits;
// `#` starts a comment). The first connect to a host:port records the fingerprint
// the server proved in the handshake; a later connect whose server proves another
// is refused (VC_ERR_AUTH) before anything is sent to it. Lines are only appended;
// a host that really changed its identity has its line removed by the user.
import Glibc
import VoiceCatProtocol
import VoiceCatSystem

enum KnownServers {
    /// One writer at a time within the process (several clients may share a file).
    static let lock = Lock()

    /// The per-user default file: $XDG_CONFIG_HOME/voicecat/known_servers, else
    /// $HOME/.config/voicecat/known_servers (HOME from the password database when
    /// unset); nil when no home directory can be found.
    static func defaultPath() -> String? {
        func env(_ name: String) -> String? {
            guard let v = getenv(name) else { return nil }
            let s = String(cString: v)
            return s.isEmpty ? nil : s
        }
        if let x = env("XDG_CONFIG_HOME") { return x + "/voicecat/known_servers" }
        var home = env("HOME")
        if home == nil, let pw = getpwuid(getuid()), let dir = pw.pointee.pw_dir { home = String(cString: dir) }
        return home.map { $0 + "/.config/voicecat/known_servers" }
    }

    /// The key a server is known by: the host as the host named it (lowercased) and the port.
    static func key(host: String, port: UInt16) -> String {
        let h = host.lowercased()
        return (h.contains(":") ? "[\(h)]" : h) + ":\(port)"
    }

    /// The fingerprint recorded for `key`, if any (the first line for it wins).
    static func lookup(path: String, key: String) throws -> String? {
        let bytes: [UInt8]?
        do { bytes = try Files.read(path) } catch { throw ClientError.auth("cannot read the known-servers file \(path): \(error)") }
        guard let bytes else { return nil }
        // Lines end with LF or CRLF (a file edited on another system).
        for line in String(decoding: bytes, as: UTF8.self).split(whereSeparator: { $0 == "\n" || $0 == "\r\n" }) {
            let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\r" })
            guard fields.count >= 2, !fields[0].hasPrefix("#"), fields[0] == Substring(key) else { continue }
            return fields[1].lowercased()
        }
        return nil
    }

    /// Appends `key fingerprint`, creating the file (0600) and its directory (0700).
    static func record(path: String, key: String, fingerprint: String) throws {
        makeParents(of: path)
        let fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw ClientError.auth("cannot write the known-servers file \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        // A file whose last line has no line end (written by hand) gets one first:
        // appended to that line, the new entry would spoil both.
        var st = stat()
        var lastByte = UInt8(ascii: "\n")
        if fstat(fd, &st) == 0 && st.st_size > 0 { _ = pread(fd, &lastByte, 1, st.st_size - 1) }
        let needsNewline = lastByte != UInt8(ascii: "\n")
        let line = Array("\(needsNewline ? "\n" : "")\(key) \(fingerprint)\n".utf8)
        let n = line.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard n == line.count else { throw ClientError.auth("cannot write the known-servers file \(path)") }
    }

    static func makeParents(of path: String) {
        var prefix = ""
        let parts = path.split(separator: "/", omittingEmptySubsequences: false).dropLast()
        for (i, p) in parts.enumerated() {
            prefix += (i == 0 ? "" : "/") + p
            if !prefix.isEmpty { _ = mkdir(prefix, 0o700) }
        }
    }

    /// Checks the fingerprint a server proved against the store, recording it on
    /// first use. Throws VC_ERR_AUTH, naming both fingerprints, when it changed.
    static func verify(path: String, host: String, port: UInt16, fingerprint: String) throws {
        let k = key(host: host, port: port)
        try lock.withLock {
            if let known = try lookup(path: path, key: k) {
                guard known == fingerprint.lowercased() else {
                    throw ClientError.auth("the server at \(k) changed its identity: its fingerprint is \(fingerprint), "
                                           + "but \(known) is recorded in \(path); nothing was sent to it (remove that line "
                                           + "if the change is expected)")
                }
                return
            }
            try record(path: path, key: k, fingerprint: fingerprint)
            ClientLog.log(2, "first connection to \(k): recorded fingerprint \(fingerprint) in \(path)")
        }
    }
}
