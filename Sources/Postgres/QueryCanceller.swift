import CLibPQ
import Foundation
import Locking

/// Sends cancel requests for abandoned sessions from one background thread.
///
/// `PQcancel` blocks until the server has taken the request, and a frozen server takes it
/// only when it wakes; so no caller waits on it, at most `maxPending` requests queue (more
/// would only repeat what the server-side `statement_timeout` does anyway), and the
/// `PGcancel` object is taken while the session is still open: it outlives `PQfinish`.
final class QueryCanceller: Sendable {
    static let shared = QueryCanceller()

    private let queue = DispatchQueue(label: "postgres.cancel")
    private let pending = Locked(0)
    private let maxPending = 64

    func cancel(_ connection: OpaquePointer) {
        guard let request = PQgetCancel(connection) else { return }
        let accepted = pending.withLock { pending in
            guard pending < maxPending else { return false }
            pending += 1
            return true
        }
        guard accepted else {
            PQfreeCancel(request)
            return
        }
        let token = CancelRequest(request)
        queue.async { [self] in
            var message = [CChar](repeating: 0, count: 256)
            _ = PQcancel(token.request, &message, Int32(message.count))
            PQfreeCancel(token.request)
            pending.withLock { $0 -= 1 }
        }
    }
}

/// A `PGcancel` handed to the canceller's thread (libpq allows its use from any thread).
private struct CancelRequest: @unchecked Sendable {
    let request: OpaquePointer
    init(_ request: OpaquePointer) { self.request = request }
}

/// Monotonic seconds, for deadlines that wall-clock jumps cannot move.
func monotonicNow() -> TimeInterval {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return TimeInterval(time.tv_sec) + TimeInterval(time.tv_nsec) / 1e9
}
