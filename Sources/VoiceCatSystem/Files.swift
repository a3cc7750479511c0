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

    /// Creates a new file with `mode` holding `bytes`; fails with EEXIST if `path`
    /// exists. Atomic: the file is written and synced under a temporary name beside it
    /// (mkstemp) and then linked to `path`, so a reader (another process starting at
    /// the same moment) sees the whole file or none, never an empty or partial one. On
    /// a file system without hard links (vfat, some FUSE and CIFS mounts: `link` fails
    /// with EPERM, EOPNOTSUPP or ENOSYS) it is created in place with O_EXCL: still
    /// exclusive, no longer atomic for readers. The directory is synced after the new
    /// name is in it, so the file outlives a power cut that comes after this returns
    /// (a server's identity key that vanished would be replaced by a new one, which
    /// every client that knew the old one refuses).
    public static func createExclusive(_ path: String, bytes: [UInt8], mode: mode_t) throws(SystemError) {
        try createExclusive(path, bytes: bytes, mode: mode, link: { Glibc.link($0, $1) })
    }

    /// As above, with `link` standing in for link(2) (a test's file system without hard
    /// links). (A default argument here crashed the compiler in a caller, Swift 6.3.1.)
    public static func createExclusive(_ path: String, bytes: [UInt8], mode: mode_t,
                                       link: (String, String) -> Int32) throws(SystemError) {
        var template = Array((path + ".XXXXXX").utf8CString)
        let fd = try syscallValue("mkstemp(\(path))") { template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) } }
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        let tmp = String(cString: template)
        defer { unlink(tmp) }   // after the link, `path` holds it; on failure nothing is left
        try write(bytes, to: fd, mode: mode, path: path)
        if link(tmp, path) == 0 {
            syncDirectory(of: path)
            return
        }
        let e = errno
        guard e == EPERM || e == EOPNOTSUPP || e == ENOSYS else { throw SystemError("link(\(path))", errno: e) }
        let direct = try syscallValue("open(\(path))") { open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode) }
        do { try write(bytes, to: direct, mode: mode, path: path) } catch let failed {
            unlink(path)   // a partial file would be taken for a broken one at the next start
            throw failed
        }
        syncDirectory(of: path)
    }

    /// Syncs the directory holding `path` (its entries: a name just linked or created).
    /// Best effort: a file system that cannot sync a directory (EINVAL) still has the
    /// file, synced; only its name may not survive a power cut there.
    private static func syncDirectory(of path: String) {
        let dir: String
        if let slash = path.lastIndex(of: "/") {
            dir = slash == path.startIndex ? "/" : String(path[..<slash])
        } else {
            dir = "."
        }
        let fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return }
        _ = fsync(fd)
        close(fd)
    }

    /// Sets `mode` exactly, writes `bytes`, syncs and closes `fd`.
    private static func write(_ bytes: [UInt8], to fd: Int32, mode: mode_t, path: String) throws(SystemError) {
        defer { close(fd) }
        // The umask may have narrowed the mode; a key file must be exactly `mode`.
        try syscallValue("fchmod(\(path))") { fchmod(fd, mode) }
        var off = 0
        while off < bytes.count {
            let n = try syscallValue("write(\(path))") { bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + off, bytes.count - off) } }
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
