import Dispatch
import Locking

/// Work started now on a background queue and waited for later: a bulk job (an export's next
/// page, an import's chunk commit) overlaps its database round trips with its own CPU work.
/// One at a time per job, so memory stays at two pieces of work; a result never taken is
/// dropped when the work ends.
final class Prefetch<Value: Sendable>: Sendable {
    private let done = DispatchSemaphore(value: 0)
    private let result = Locked<Result<Value, any Error>?>(nil)

    /// `inline`: run it here and now (the caller wants no overlap).
    init(inline: Bool = false, _ work: @escaping @Sendable () throws -> Value) {
        if inline {
            finish(Result(catching: work))
        } else {
            DispatchQueue.global().async { [self] in finish(Result(catching: work)) }
        }
    }

    private func finish(_ value: Result<Value, any Error>) {
        result.withLock { $0 = value }
        done.signal()
    }

    /// Waits for the work; its value or its error (each time asked).
    func value() throws -> Value {
        done.wait()
        done.signal()  // for a second wait
        // Set before `done` was signalled; nil is unreachable, and answered as a failure.
        return try (result.withLock { $0 } ?? .failure(PrefetchLost())).get()
    }

    private struct PrefetchLost: Error {}
}
