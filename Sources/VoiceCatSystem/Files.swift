// Small file helpers for configuration and key files.
import Glibc

public enum Files {
    /// Reads a whole file; nil if it does not exist.
    public static func read(_ path: String) throws(SystemError) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            if errno == ENOENT { return nil }
            throw SystemError("open(\(path))", errno: errno)
        }
        defer { close(fd) }
        var out = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = try syscallValue("read(\(path))") { chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, 4096) } }
            if n == 0 { break }
            out.append(contentsOf: chunk[0..<n])
        }
        return out
    }

    /// Creates a new file with `mode` (fails if it exists) and writes `bytes`.
    public static func createExclusive(_ path: String, bytes: [UInt8], mode: mode_t) throws(SystemError) {
        let fd = try syscallValue("open(\(path))") { open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode) }
        defer { close(fd) }
        // The umask may have narrowed the mode; a key file must be exactly `mode`.
        try syscallValue("fchmod(\(path))") { fchmod(fd, mode) }
        var off = 0
        while off < bytes.count {
            let n = try syscallValue("write(\(path))") { bytes.withUnsafeBytes { write(fd, $0.baseAddress! + off, bytes.count - off) } }
            off += n
        }
        try syscallValue("fsync(\(path))") { fsync(fd) }
    }

    /// The permission bits of a file.
    public static func mode(_ path: String) throws(SystemError) -> mode_t {
        var st = stat()
        try syscallValue("stat(\(path))") { stat(path, &st) }
        return st.st_mode & 0o7777
    }
}
