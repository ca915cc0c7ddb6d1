import Dispatch

/// Work started now on a background queue and waited for later: a bulk job (an export's next
/// page, an import's chunk commit) overlaps its database round trips with its own CPU work.
/// One at a time per job, so memory stays at two pieces of work; a result never taken is
/// dropped when the work ends.
final class Prefetch<Value>: @unchecked Sendable {
    private let done = DispatchSemaphore(value: 0)
    // Written once by the work, read after `done` is signalled: the semaphore orders them.
    private var result: Result<Value, any Error>?

    /// `inline`: run it here and now (the caller wants no overlap).
    init(inline: Bool = false, _ work: @escaping @Sendable () throws -> Value) {
        if inline {
            result = Result(catching: work)
            done.signal()
        } else {
            DispatchQueue.global().async { [self] in
                result = Result(catching: work)
                done.signal()
            }
        }
    }

    /// Waits for the work; its value or its error (each time asked).
    func value() throws -> Value {
        done.wait()
        done.signal()
        guard let result else { preconditionFailure("a prefetch signalled without a result") }
        return try result.get()
    }
}
