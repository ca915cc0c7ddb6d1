import Foundation

/// Keys this process knows to be under a live lease, and until when: so that a burst of
/// stale-while-revalidate answers asks PostgreSQL for the refresh lease once, not once per
/// answer (each ask is an `INSERT … ON CONFLICT` that locks the lease row).
///
/// Only ever a shortcut to "no lease for you": an entry is dropped when its lease runs out,
/// when the key changes or its lease ends on any replica (the key listener), and it is never
/// consulted to grant anything. Bounded: past `capacity` keys, nothing more is noted (those
/// keys just ask the database each time).
final class HeldLeases: @unchecked Sendable {
    // @unchecked: `until` is guarded by `lock`.
    private struct Held: Hashable {
        let namespace: String
        let key: [UInt8]
    }

    let capacity: Int
    private let lock = NSLock()
    private var until: [Held: TimeInterval] = [:]

    init(capacity: Int = 10_000) { self.capacity = capacity }

    private static var now: TimeInterval { ProcessInfo.processInfo.systemUptime }

    /// Whether (namespace, key) is known to be leased right now.
    func isHeld(_ namespace: String, _ key: [UInt8]) -> Bool {
        lock.withLock {
            guard let end = until[Held(namespace: namespace, key: key)] else { return false }
            if end > Self.now { return true }
            until[Held(namespace: namespace, key: key)] = nil
            return false
        }
    }

    /// Notes that (namespace, key) is leased for `seconds` more.
    func note(_ namespace: String, _ key: [UInt8], seconds: Int) {
        let end = Self.now + Double(max(0, seconds))
        lock.withLock {
            if until.count >= capacity {
                let now = Self.now
                until = until.filter { $0.value > now }
                guard until.count < capacity else { return }
            }
            until[Held(namespace: namespace, key: key)] = end
        }
    }

    /// Forgets (namespace, key), or every key of the namespace when `key` is nil.
    func forget(_ namespace: String, _ key: [UInt8]?) {
        lock.withLock {
            guard !until.isEmpty else { return }
            if let key {
                until[Held(namespace: namespace, key: key)] = nil
            } else {
                until = until.filter { $0.key.namespace != namespace }
            }
        }
    }

    /// Forgets everything (notifications may have been missed).
    func forgetAll() { lock.withLock { until.removeAll() } }

    var count: Int { lock.withLock { until.count } }
}
