import Foundation

/// Runs blocking set-up (a database created, a process started, a service built) on a
/// Dispatch thread and waits for it without holding a thread of the cooperative pool.
///
/// Async tests share that pool (as wide as the cores: two threads here) with the client
/// under test, whose feed follower, deadlines and retries are tasks too: set-up that blocks a
/// pool thread for a second stalls them, and a test of "seen within a second" then fails
/// for the harness's sake, not the client's. The value is `sending`: made on the Dispatch
/// thread and handed over whole, which the compiler checks.
public func offThePool<T>(_ work: @escaping @Sendable () throws -> sending T) async throws -> sending T {
    try await withCheckedThrowingContinuation { (done: CheckedContinuation<T, any Error>) in
        DispatchQueue.global().async {
            do {
                done.resume(returning: try work())
            } catch {
                done.resume(throwing: error)
            }
        }
    }
}
