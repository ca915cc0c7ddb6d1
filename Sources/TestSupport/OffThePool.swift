import Foundation

/// Runs blocking set-up (a database created, a process started, a service built) on a
/// Dispatch thread and waits for it without holding a thread of the cooperative pool.
///
/// Async tests share that pool (as wide as the cores: two threads here) with the client
/// under test, whose feed follower, deadlines and retries are tasks too: set-up that blocks a
/// pool thread for a second stalls them, and a test of "seen within a second" then fails
/// for the harness's sake, not the client's.
public func offThePool<T>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    let result = try await withCheckedThrowingContinuation { (done: CheckedContinuation<Handed<T>, any Error>) in
        DispatchQueue.global().async { done.resume(with: Result { Handed(try work()) }) }
    }
    return result.value
}

/// Carries a value made on the Dispatch thread to the awaiting task: it is made there and
/// used only here afterwards, never by both at once.
public struct Handed<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}
