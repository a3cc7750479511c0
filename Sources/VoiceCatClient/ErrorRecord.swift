// Why calls failed, as vc_last_error reports it: one record per client, and one for
// the functions that take no client (vc_client_create, vc_set_alsa_config,
// vc_list_devices). A thread reads the reason of its own last failure even while
// other threads' calls fail; a thread that made none reads the latest of anyone's.
import Glibc
import VoiceCatSystem

public final class ErrorRecord: @unchecked Sendable {
    private let lock = Lock()
    /// The latest failure of any thread, and the latest of each of the last
    /// `threads` threads that failed (oldest first).
    private var latest = ""
    private var byThread: [(thread: UInt, text: String)] = []
    private static let threads = 16

    public init() {}

    /// The calling thread's last recorded reason (anyone's latest when it has none;
    /// "" when nothing failed).
    public var text: String {
        let me = UInt(pthread_self())
        return lock.withLock { byThread.last(where: { $0.thread == me })?.text ?? latest }
    }

    /// Records a failed call's reason for the calling thread.
    public func record(_ text: String) {
        let me = UInt(pthread_self())
        lock.withLock {
            latest = text
            byThread.removeAll { $0.thread == me }
            byThread.append((me, text))
            if byThread.count > ErrorRecord.threads { byThread.removeFirst() }
        }
    }
}
