import Foundation

/// State that is reachable only while its lock is held: the one place a lock-guarded type's
/// thread safety is argued, instead of a proof in a comment on every type that holds a lock.
///
/// Why not `Synchronization.Mutex`: ThreadSanitizer on this toolchain reports it as a
/// "Swift access race" (its futex is invisible to TSan; see `shared/notes/PLATFORM.md`),
/// and CI runs the concurrent suites under TSan. `NSLock` is TSan-clean.
///
/// Keep `State` to values (structs, enums, collections of them) or references that are
/// themselves safe to share: a reference returned out of `withLock` escapes the lock.
public final class Locked<State>: @unchecked Sendable {
    // @unchecked: `state` is touched only inside `withLock` below (internal, for inlining:
    // nothing else in this module touches it).
    @usableFromInline let lock = NSLock()
    // Not checked for exclusive access at run time: the lock already makes every access
    // exclusive. Another thread waits for it; on the same thread a second access could only
    // begin inside `body`, through `withLock` again, which deadlocks on the non-recursive lock
    // before it reaches the state. The check cost ~80 instructions a `withLock` (about ten a
    // near-cache hit).
    @usableFromInline @exclusivity(unchecked) var state: State

    public init(_ state: State) { self.state = state }

    /// Runs `body` with the state, the lock held; keep it short and never block inside.
    @inlinable
    public func withLock<Result>(_ body: (inout State) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&state)
    }

    /// A copy of the state (for small value states: counters, flags).
    public var value: State { withLock { $0 } }
}
