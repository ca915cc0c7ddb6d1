import Foundation

/// Keys this process knows to be under a live lease, and until when: so that a burst of
/// stale-while-revalidate answers asks PostgreSQL for the refresh lease once, not once per
/// answer (each ask is an `INSERT … ON CONFLICT` that locks the lease row).
///
/// Only ever a shortcut to "no lease for you": an entry is dropped when its lease runs out,
/// when the key changes or its lease ends on any replica (the key listener), and it is never
/// consulted to grant anything. Bounded: past `capacity` keys, nothing more is noted (those
/// keys just ask the database each time), and expired keys are pruned at most once a second.
final class HeldLeases: @unchecked Sendable {
    // @unchecked: `until`, `count` and `nextPrune` are guarded by `lock`.
    let capacity: Int
    private let lock = NSLock()
    /// By namespace, so a namespace-wide notification forgets in one step.
    private var until: [String: [[UInt8]: TimeInterval]] = [:]
    private var held = 0
    private var nextPrune: TimeInterval = 0
    /// Forgets. A note based on an answer read before a forget of its key (or its namespace,
    /// or everything) is dropped, so a release that lands while the database answers "held"
    /// is not lost.
    private var forgets = RecentChanges()

    init(capacity: Int = 10_000) { self.capacity = capacity }

    private static var now: TimeInterval { ProcessInfo.processInfo.systemUptime }

    /// Whether (namespace, key) is known to be leased right now.
    func isHeld(_ namespace: String, _ key: [UInt8]) -> Bool {
        lock.withLock {
            guard let end = until[namespace]?[key] else { return false }
            if end > Self.now { return true }
            remove(namespace, key)
            return false
        }
    }

    /// Where forgetting stands: take it before asking the database, and pass it to `note`.
    var generation: UInt64 { lock.withLock { forgets.count } }

    /// Notes that (namespace, key) is leased for `seconds` more, unless something was
    /// forgotten since `generation` (then the answer may already be out of date).
    func note(_ namespace: String, _ key: [UInt8], seconds: Int, since generation: UInt64) {
        let now = Self.now
        lock.withLock {
            guard !forgets.changed(namespace, key, since: generation) else { return }
            if held >= capacity && now >= nextPrune {
                nextPrune = now + 1
                prune(now)
            }
            guard held < capacity || until[namespace]?[key] != nil else { return }
            if until[namespace, default: [:]].updateValue(now + Double(max(0, seconds)), forKey: key) == nil {
                held += 1
            }
        }
    }

    /// Forgets (namespace, key), or every key of the namespace when `key` is nil.
    func forget(_ namespace: String, _ key: [UInt8]?) {
        lock.withLock {
            forgets.record(namespace, key)
            guard held > 0 else { return }
            if let key {
                remove(namespace, key)
            } else if let keys = until.removeValue(forKey: namespace) {
                held -= keys.count
            }
        }
    }

    /// Forgets everything (notifications may have been missed).
    func forgetAll() {
        lock.withLock {
            forgets.recordEverything()
            until.removeAll()
            held = 0
        }
    }

    var count: Int { lock.withLock { held } }

    /// Under `lock`.
    private func remove(_ namespace: String, _ key: [UInt8]) {
        guard until[namespace]?.removeValue(forKey: key) != nil else { return }
        held -= 1
        if until[namespace]?.isEmpty == true { until[namespace] = nil }
    }

    /// Under `lock`.
    private func prune(_ now: TimeInterval) {
        until = until.compactMapValues { keys in
            let live = keys.filter { $0.value > now }
            return live.isEmpty ? nil : live
        }
        held = until.values.reduce(0) { $0 + $1.count }
    }
}
