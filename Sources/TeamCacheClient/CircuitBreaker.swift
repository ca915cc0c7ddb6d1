import Foundation
import Locking

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
public final class CircuitBreaker: Sendable {

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
    private let tally = Locked(Tally())

    /// What the breaker knows, reachable only under its lock.
    private struct Tally {
        var state = Health.State.closed
        var openUntil: TimeInterval = 0
        var failures = 0
        var consecutive = 0
        var skipped = 0
        var lastError: String?
        var misconfiguration: String?

        mutating func open(for seconds: TimeInterval) {
            state = .open
            openUntil = CircuitBreaker.now + seconds
        }
    }

    public init(failureThreshold: Int = 3, cooldown: TimeInterval = 5, misconfiguredCooldown: TimeInterval = 30) {
        self.failureThreshold = max(1, failureThreshold)
        self.cooldown = cooldown
        self.misconfiguredCooldown = misconfiguredCooldown
    }

    fileprivate static var now: TimeInterval { ProcessInfo.processInfo.systemUptime }

    /// Whether a call may go to TeamCache now; the first call after a cool-down is the probe.
    /// A probe that never reported (its caller was cancelled) is replaced after a cool-down.
    public func allow() -> Bool {
        tally.withLock { tally in
            if tally.state == .closed { return true }
            if Self.now >= tally.openUntil {
                tally.state = .halfOpen
                tally.openUntil = Self.now + cooldown
                return true
            }
            tally.skipped += 1
            return false
        }
    }

    /// The call ended without a verdict (cancelled): the next call probes.
    public func abandonProbe() {
        tally.withLock { tally in
            if tally.state == .halfOpen {
                tally.state = .open
                tally.openUntil = Self.now
            }
        }
    }

    public func succeeded() {
        tally.withLock { tally in
            tally.state = .closed
            tally.consecutive = 0
            tally.misconfiguration = nil
        }
    }

    /// A failed call; `atOnce` (a timeout) opens the breaker without waiting for a run.
    public func failed(_ error: String, atOnce: Bool = false) {
        tally.withLock { tally in
            tally.failures += 1
            tally.consecutive += 1
            tally.lastError = error
            if tally.state == .halfOpen || atOnce || tally.consecutive >= failureThreshold { tally.open(for: cooldown) }
        }
    }

    /// The token is refused or lacks a scope; `stop`: every call would be refused (401).
    public func misconfigured(_ message: String, stop: Bool) {
        tally.withLock { tally in
            tally.failures += 1
            tally.lastError = message
            tally.misconfiguration = message
            if stop {
                tally.open(for: misconfiguredCooldown)
            } else {
                // The server answered (a scope is missing for this call): it is up.
                tally.state = .closed
                tally.consecutive = 0
            }
        }
    }

    public var health: Health {
        tally.withLock { tally in
            Health(state: tally.state, failures: tally.failures, consecutiveFailures: tally.consecutive,
                   skipped: tally.skipped, lastError: tally.lastError, misconfiguration: tally.misconfiguration)
        }
    }
}
