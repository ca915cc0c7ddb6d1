import Foundation

/// The circuit breaker every caller of one client shares (copies of a `TeamCacheClient`
/// share it too: it is a reference). A cache must never make a call slower than no cache: a
/// TeamCache that is down, frozen or refuses the token would cost every call its deadline;
/// the breaker turns a run of failures into a cool-down in which calls fail at once with
/// `.skipped` (and `cached` calls the model straight away), then lets one call through as a
/// probe and closes again when TeamCache answers it.
///
/// A timeout opens it at once (each one cost its caller the whole deadline); other failures
/// (refused connections, 5xx) after `failureThreshold` in a row; a refused token (401) for
/// `misconfiguredCooldown`.
public final class CircuitBreaker: @unchecked Sendable {
    // @unchecked: every stored var is read and written under `lock` only.

    /// What `health` reports.
    public struct Health: Sendable, Equatable {
        public enum State: String, Sendable { case closed, open, halfOpen = "half_open" }
        public let state: State
        public let failures: Int
        public let consecutiveFailures: Int
        public let skipped: Int
        public let lastError: String?
        public let misconfiguration: String?
    }

    public let failureThreshold: Int
    public let cooldown: TimeInterval
    public let misconfiguredCooldown: TimeInterval
    private let lock = NSLock()
    private var state = Health.State.closed
    private var openUntil: TimeInterval = 0
    private var failures = 0
    private var consecutive = 0
    private var skipped = 0
    private var lastError: String?
    private var misconfiguration: String?

    public init(failureThreshold: Int = 3, cooldown: TimeInterval = 5, misconfiguredCooldown: TimeInterval = 30) {
        self.failureThreshold = max(1, failureThreshold)
        self.cooldown = cooldown
        self.misconfiguredCooldown = misconfiguredCooldown
    }

    private static var now: TimeInterval { ProcessInfo.processInfo.systemUptime }

    /// Whether a call may go to TeamCache now; the first call after a cool-down is the probe.
    /// A probe that never reported (its caller was cancelled) is replaced after a cool-down.
    public func allow() -> Bool {
        lock.withLock {
            if state == .closed { return true }
            if Self.now >= openUntil {
                state = .halfOpen
                openUntil = Self.now + cooldown
                return true
            }
            skipped += 1
            return false
        }
    }

    /// The call ended without a verdict (cancelled): the next call probes.
    public func abandonProbe() {
        lock.withLock {
            if state == .halfOpen {
                state = .open
                openUntil = Self.now
            }
        }
    }

    public func succeeded() {
        lock.withLock {
            state = .closed
            consecutive = 0
            misconfiguration = nil
        }
    }

    /// A failed call; `atOnce` (a timeout) opens the breaker without waiting for a run.
    public func failed(_ error: String, atOnce: Bool = false) {
        lock.withLock {
            failures += 1
            consecutive += 1
            lastError = error
            if state == .halfOpen || atOnce || consecutive >= failureThreshold { open(for: cooldown) }
        }
    }

    /// The token is refused or lacks a scope; `stop`: every call would be refused (401).
    public func misconfigured(_ message: String, stop: Bool) {
        lock.withLock {
            failures += 1
            lastError = message
            misconfiguration = message
            if stop {
                open(for: misconfiguredCooldown)
            } else {
                // The server answered (a scope is missing for this call): it is up.
                state = .closed
                consecutive = 0
            }
        }
    }

    /// Called with the lock held.
    private func open(for seconds: TimeInterval) {
        state = .open
        openUntil = Self.now + seconds
    }

    public var health: Health {
        lock.withLock {
            Health(state: state, failures: failures, consecutiveFailures: consecutive, skipped: skipped,
                   lastError: lastError, misconfiguration: misconfiguration)
        }
    }
}
