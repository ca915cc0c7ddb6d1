import Foundation
import Synchronization

/// The threads that must never block: event loops mark themselves, and the waits that can
/// sleep for long (a database connection or round trip, a monitor's wait, a hand-off's take)
/// ask whether they are on one. A wait there holds every connection of that loop for as long
/// as it lasts (a frozen database: up to the statement timeout), so it is a bug wherever it
/// happens. It is counted, never trapped: the service goes on, `blockingWaits` says it
/// happened (`teamcache_loop_blocking_waits_total`), and the first five are reported with what
/// waited, on standard error or, when `TEAMCACHE_LOOP_WAITS_REPORT` names a file, appended to
/// it (the test runs set it for every process they start, and fail when the file is not empty).
public enum LoopThreads {
    /// Marks the calling thread as an event loop's, for its lifetime. `reportsWaits` false:
    /// its waits are counted, not reported (a test that waits there on purpose).
    public static func markCurrent(reportsWaits: Bool = true) {
        guard let key else { return }
        pthread_setspecific(key, UnsafeRawPointer(bitPattern: reportsWaits ? Mark.reporting : Mark.quiet))
    }

    /// Whether the calling thread is an event loop's.
    public static var isCurrent: Bool { mark != nil }

    /// Waits that could sleep, started on a loop thread since the process started.
    public static var blockingWaits: Int { waits.load(ordering: .relaxed) }

    /// Called by a wait about to sleep: counts it when the calling thread is a loop's.
    @inline(__always)
    public static func noteWait(_ what: @autoclosure () -> String) {
        guard let mark else { return }
        waits.add(1, ordering: .relaxed)
        guard Int(bitPattern: mark) == Mark.reporting, reported.add(1, ordering: .relaxed).newValue <= 5 else { return }
        report("teamcache: a blocking wait on an event loop thread: \(what())\n")
    }

    /// Written by another thread, and unchecked: a caller may hold a lock (a monitor's), and
    /// the output may be a full pipe, closed, or a file that cannot be opened (then standard
    /// error). Not the log: this is the lowest module, below the logger.
    private static func report(_ line: String) {
        DispatchQueue.global(qos: .utility).async {
            let file = reportPath.map { open($0, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o644) } ?? -1
            let fd = file >= 0 ? file : 2
            _ = line.utf8CString.withUnsafeBufferPointer { write(fd, $0.baseAddress, $0.count - 1) }
            if file >= 0 { close(file) }
        }
    }

    /// The calling thread's mark, nil when it is not a loop's (or no key could be made).
    private static var mark: UnsafeMutableRawPointer? { key.flatMap { pthread_getspecific($0) } }

    private enum Mark {
        static let reporting = 1
        static let quiet = 2
    }

    private static let waits = Atomic<Int>(0)
    private static let reported = Atomic<Int>(0)
    private static let reportPath = ProcessInfo.processInfo.environment["TEAMCACHE_LOOP_WAITS_REPORT"]
        .flatMap { $0.isEmpty ? nil : $0 }
    /// Created once and never deleted (its values are flags, never freed). nil when the process
    /// has no thread-specific key left: no thread is then marked, and nothing is counted.
    private static let key = makeKey { pthread_key_create($0, nil) }

    /// A key from `create` (pthread_key_create's shape), nil when it fails.
    static func makeKey(_ create: (UnsafeMutablePointer<pthread_key_t>) -> Int32) -> pthread_key_t? {
        var key = pthread_key_t()
        return create(&key) == 0 ? key : nil
    }
}
