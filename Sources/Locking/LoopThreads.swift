import Foundation
import Synchronization

/// The threads that must never block: event loops mark themselves, and every wait that can
/// sleep (a monitor's, a hand-off's, a database round trip) asks whether it is on one. A wait
/// there holds every connection of that loop for as long as it lasts (a frozen database: up to
/// the statement timeout), so it is a bug wherever it happens. It is counted rather than
/// trapped: the service goes on, `blockingWaits` says it happened (the test suite holds it at
/// zero), and the first few are reported on standard error with the waiting call.
public enum LoopThreads {
    /// Marks the calling thread as an event loop's, for its lifetime. `reportsWaits` false:
    /// its waits are counted, not reported (a test that waits there on purpose).
    public static func markCurrent(reportsWaits: Bool = true) {
        pthread_setspecific(key, UnsafeRawPointer(bitPattern: reportsWaits ? 1 : 2))
    }

    /// Whether the calling thread is an event loop's.
    public static var isCurrent: Bool { pthread_getspecific(key) != nil }

    /// Waits that could sleep, started on a loop thread since the process started.
    public static var blockingWaits: Int { waits.load(ordering: .relaxed) }

    /// Called by a wait about to sleep: counts it when the calling thread is a loop's.
    @inline(__always)
    public static func noteWait(_ what: @autoclosure () -> String) {
        guard let mark = pthread_getspecific(key) else { return }
        let count = waits.add(1, ordering: .relaxed).newValue
        // Standard error, not the log: this is the lowest module, below the logger.
        if count <= 5 && Int(bitPattern: mark) == 1 {
            FileHandle.standardError.write(Data("teamcache: a blocking wait on an event loop thread: \(what())\n".utf8))
        }
    }

    private static let waits = Atomic<Int>(0)
    // The key is created once and never deleted; its value is never freed (a flag, not memory).
    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key, nil)
        return key
    }()
}
