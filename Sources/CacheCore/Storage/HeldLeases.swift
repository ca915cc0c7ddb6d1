import Foundation
import Locking

/// Keys this process knows to be under a live lease, and until when: so that a burst of
/// stale-while-revalidate answers asks PostgreSQL for the refresh lease once, not once per
/// answer (each ask is an `INSERT … ON CONFLICT` that locks the lease row).
///
/// Only ever a shortcut to "no lease for you": an entry is dropped when its lease runs out,
/// when the key changes or its lease ends on any replica (the key listener), and it is never
/// consulted to grant anything. Bounded: past `capacity` keys, nothing more is noted (those
/// keys just ask the database each time), and expired keys are pruned at most once a second.
package final class HeldLeases: Sendable {
    let capacity: Int
    private let state = Locked(State())

    private struct State {
        /// By namespace, so a namespace-wide notification forgets in one step.
        var until: [String: [[UInt8]: TimeInterval]] = [:]
        var held = 0
        var nextPrune: TimeInterval = 0
        /// Forgets. A note based on an answer read before a forget of its key (or its
        /// namespace, or everything) is dropped, so a release that lands while the database
        /// answers "held" is not lost.
        var forgets = RecentChanges()

        mutating func remove(_ namespace: String, _ key: [UInt8]) {
            guard until[namespace]?.removeValue(forKey: key) != nil else { return }
            held -= 1
            if until[namespace]?.isEmpty == true { until[namespace] = nil }
        }

        mutating func prune(_ now: TimeInterval) {
            until = until.compactMapValues { keys in
                let live = keys.filter { $0.value > now }
                return live.isEmpty ? nil : live
            }
            held = until.values.reduce(0) { $0 + $1.count }
        }
    }

    package init(capacity: Int = 10_000) { self.capacity = capacity }

    private static var now: TimeInterval { ProcessInfo.processInfo.systemUptime }

    /// Whether (namespace, key) is known to be leased right now.
    package func isHeld(_ namespace: String, _ key: [UInt8]) -> Bool {
        state.withLock { state in
            guard let end = state.until[namespace]?[key] else { return false }
            if end > Self.now { return true }
            state.remove(namespace, key)
            return false
        }
    }

    /// Where forgetting stands: take it before asking the database, and pass it to `note`.
    package var generation: UInt64 { state.withLock { $0.forgets.count } }

    /// Notes that (namespace, key) is leased for `seconds` more, unless something was
    /// forgotten since `generation` (then the answer may already be out of date).
    package func note(_ namespace: String, _ key: [UInt8], seconds: Int, since generation: UInt64) {
        let now = Self.now
        let capacity = capacity
        state.withLock { state in
            guard !state.forgets.changed(namespace, key, since: generation) else { return }
            if state.held >= capacity && now >= state.nextPrune {
                state.nextPrune = now + 1
                state.prune(now)
            }
            guard state.held < capacity || state.until[namespace]?[key] != nil else { return }
            if state.until[namespace, default: [:]].updateValue(now + Double(max(0, seconds)), forKey: key) == nil {
                state.held += 1
            }
        }
    }

    /// Forgets (namespace, key), or every key of the namespace when `key` is nil.
    package func forget(_ namespace: String, _ key: [UInt8]?) {
        state.withLock { state in
            state.forgets.record(namespace, key)
            guard state.held > 0 else { return }
            if let key {
                state.remove(namespace, key)
            } else if let keys = state.until.removeValue(forKey: namespace) {
                state.held -= keys.count
            }
        }
    }

    /// Forgets everything (notifications may have been missed).
    package func forgetAll() {
        state.withLock { state in
            state.forgets.recordEverything()
            state.until.removeAll()
            state.held = 0
        }
    }

    var count: Int { state.withLock { $0.held } }
}
