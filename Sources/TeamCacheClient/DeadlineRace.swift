import Foundation
import Locking

/// The work of `TeamCacheClient.within` against its deadline: whichever ends first answers
/// the caller's continuation (once); the other is cancelled and not waited for.
final class DeadlineRace<T: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<T, any Error>?
        var tasks: [Task<Void, Never>] = []
        var finished = false
    }

    private let state = Locked(State())

    func start(_ continuation: CheckedContinuation<T, any Error>, seconds: TimeInterval,
               _ work: @escaping @Sendable () async throws -> T) {
        let cancelledMeanwhile = state.withLock { state -> Bool in
            guard !state.finished else { return true }
            state.continuation = continuation
            return false
        }
        // Cancelled before it started: `finish` already ran and found no continuation.
        if cancelledMeanwhile {
            continuation.resume(throwing: CancellationError())
            return
        }
        let worker = Task { [self] in
            do { finish(.success(try await work())) } catch { finish(.failure(error)) }
        }
        let timer = Task { [self] in
            let nanoseconds = UInt64(max(0.001, min(seconds, 86_400)) * 1e9)
            guard (try? await Task.sleep(nanoseconds: nanoseconds)) != nil else { return }
            finish(.failure(URLError(.timedOut)))
        }
        let late = state.withLock { state -> Bool in
            if state.finished { return true }
            state.tasks = [worker, timer]
            return false
        }
        // Finished before the tasks were noted (the work failed at once): stop the timer.
        if late { worker.cancel(); timer.cancel() }
    }

    /// Answers the caller with `result` unless it was answered already; cancels the rest.
    func finish(_ result: Result<T, any Error>) {
        let (continuation, tasks) = state.withLock { state -> (CheckedContinuation<T, any Error>?, [Task<Void, Never>]) in
            guard !state.finished else { return (nil, []) }
            state.finished = true
            defer { state.continuation = nil; state.tasks = [] }
            return (state.continuation, state.tasks)
        }
        tasks.forEach { $0.cancel() }
        continuation?.resume(with: result)
    }
}
