import Foundation
import Synchronization

/// The threads that must never block: event loops mark themselves, and the waits that can
/// sleep for long (a database connection or round trip, a monitor's wait, a hand-off's take)
/// ask whether they are on one. A wait there holds every connection of that loop for as long
/// as it lasts (a frozen database: up to the statement timeout), so it is a bug wherever it
/// happens. It is counted rather than trapped: the service goes on, `blockingWaits` says it
/// happened (`teamcache_loop_blocking_waits_total`), and the first five are reported on
/// standard error with what waited, which the test runs fail on. With
/// `TEAMCACHE_LOOP_WAITS_FATAL=1` (the test suites' own `teamcache serve` processes, whose
/// standard error nobody reads) the first one stops the process instead.
public enum LoopThreads {
    /// Marks the calling thread as an event loop's, for its lifetime. `reportsWaits` false:
    /// its waits are counted, not reported (a test that waits there on purpose).
    public static func markCurrent(reportsWaits: Bool = true) {
        pthread_setspecific(key, UnsafeRawPointer(bitPattern: reportsWaits ? Mark.reporting : Mark.quiet))
    }

    /// Whether the calling thread is an event loop's.
    public static var isCurrent: Bool { pthread_getspecific(key) != nil }

    /// Waits that could sleep, started on a loop thread since the process started.
    public static var blockingWaits: Int { waits.load(ordering: .relaxed) }

    /// Called by a wait about to sleep: counts it when the calling thread is a loop's.
    @inline(__always)
    public static func noteWait(_ what: @autoclosure () -> String) {
        guard let mark = pthread_getspecific(key) else { return }
        waits.add(1, ordering: .relaxed)
        guard Int(bitPattern: mark) == Mark.reporting else { return }
        let line = "teamcache: a blocking wait on an event loop thread: \(what())\n"
        if fatal { fatalError(line) }
        guard reported.add(1, ordering: .relaxed).newValue <= 5 else { return }
        // Written by another thread, and unchecked: a caller may hold a lock (a monitor's), and
        // standard error may be a full pipe or closed. Standard error, not the log: this is the
        // lowest module, below the logger.
        DispatchQueue.global(qos: .utility).async {
            _ = line.utf8CString.withUnsafeBufferPointer { write(2, $0.baseAddress, $0.count - 1) }
        }
    }

    private enum Mark {
        static let reporting = 1
        static let quiet = 2
    }

    private static let waits = Atomic<Int>(0)
    private static let reported = Atomic<Int>(0)
    private static let fatal = ProcessInfo.processInfo.environment["TEAMCACHE_LOOP_WAITS_FATAL"] == "1"
    // Created once and never deleted; its values are flags, never freed.
    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        precondition(pthread_key_create(&key, nil) == 0, "no thread-specific key left for LoopThreads")
        return key
    }()
}
