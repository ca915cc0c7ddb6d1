import Foundation

/// State behind a lock with a condition to wait on (a monitor): pools, queues and threads
/// that sleep until there is work or a slot. As with `Locked`, the state is reachable only
/// with the lock held; a waiter re-checks its predicate under the lock each time it wakes,
/// so a wake-up that comes early (or spuriously) only costs a check.
public final class Monitor<State>: @unchecked Sendable {
    // @unchecked: `state` is touched only inside `condition.lock()`…`unlock()` below
    // (internal, for inlining: on every worker job's path, like `Locked`).
    @usableFromInline let condition = NSCondition()
    @usableFromInline var state: State

    public init(_ state: State) { self.state = state }

    /// Runs `body` with the state, the lock held.
    @inlinable
    public func withLock<Result>(_ body: (inout State) throws -> Result) rethrows -> Result {
        condition.lock()
        defer { condition.unlock() }
        return try body(&state)
    }

    /// Runs `body` with the state, then wakes one waiter (`all`: every waiter) to re-check.
    ///
    /// The wake comes after the unlock: woken while the lock was still held, a waiter ran
    /// only to sleep again on the lock, and the unlock woke it a second time (two futex
    /// calls more per job handed to a worker; ~90% of a PUT run's futex calls were the worker
    /// pool's). Nothing is missed: the state changed under the lock, and a waiter that checked
    /// it before is already asleep on the condition (it releases the lock only by waiting),
    /// so the signal reaches it.
    @inlinable
    public func change<Result>(wakingAll all: Bool = true, _ body: (inout State) throws -> Result) rethrows -> Result {
        condition.lock()
        defer {
            condition.unlock()
            if all { condition.broadcast() } else { condition.signal() }
        }
        return try body(&state)
    }

    /// Waits while `keepWaiting(state)` holds and `deadline` (nil: none) has not passed, then
    /// runs `body` with the state, the lock still held. `body` learns whether the deadline
    /// ended the wait (true: timed out with `keepWaiting` still true).
    @inlinable
    public func wait<Result>(until deadline: Date? = nil, while keepWaiting: (State) -> Bool,
                             then body: (inout State, _ timedOut: Bool) throws -> Result) rethrows -> Result {
        condition.lock()
        defer { condition.unlock() }
        var timedOut = false, noted = false
        while keepWaiting(state) {
            // Once a wait, not once a wake-up.
            if !noted {
                noted = true
                LoopThreads.noteWait("Monitor<\(State.self)>.wait")
            }
            if let deadline {
                if !condition.wait(until: deadline) {
                    timedOut = keepWaiting(state)
                    break
                }
            } else {
                condition.wait()
            }
        }
        return try body(&state, timedOut)
    }
}
