import Cryptography
import Foundation
import Locking

/// Miss leases in memory, with the PostgreSQL lease store's rules: one live lease a key, an
/// expired one taken over, finished only by its holder with its id (kept as a digest, as
/// PostgreSQL keeps it). For the domain's tests and the request fuzzer.
public final class MemoryLeases: LeaseStorage {
    private struct Held {
        let digest: [UInt8]
        let holder: Int64?
        let expiresAt: Date
    }

    private struct Place: Hashable {
        let namespace: String
        let key: [UInt8]
    }

    private let clock: any Clock
    private let leases = Locked<[Place: Held]>([:])

    public init(clock: any Clock = SystemClock()) { self.clock = clock }

    /// (`unlessFilled` is not asked: this store keeps no entries to look at.)
    public func grant(_ namespace: Namespace, _ key: EntryKey, seconds: Int, holder: Int64?,
                      unlessFilled: FillCheck?) throws -> LeaseGrant {
        let id = Lease.newID(), now = clock.now()
        let seconds = min(max(seconds, 1), Lease.maxSeconds)
        return leases.withLock { leases in
            let place = Place(namespace: namespace.name, key: key.bytes)
            if let held = leases[place], held.expiresAt > now {
                return .held(retryAfter: max(1, Int(held.expiresAt.timeIntervalSince(now).rounded(.up))))
            }
            leases[place] = Held(digest: SHA256.hash(id), holder: holder, expiresAt: now.addingTimeInterval(Double(seconds)))
            return .granted(Lease(id: id, expiresIn: seconds))
        }
    }

    public func refresh(_ namespace: Namespace, _ key: EntryKey, seconds: Int, holder: Int64?) -> Lease? {
        guard case .granted(let lease)? = try? grant(namespace, key, seconds: seconds, holder: holder) else { return nil }
        return lease
    }

    public func isKnownHeld(_ namespace: Namespace, _ key: EntryKey) -> Bool {
        let now = clock.now()
        return leases.withLock { ($0[Place(namespace: namespace.name, key: key.bytes)]?.expiresAt ?? .distantPast) > now }
    }

    @discardableResult
    public func complete(_ namespace: Namespace, _ key: EntryKey, id: String, holder: Int64?) throws -> Bool {
        finish(namespace, key, id: id, holder: holder)
    }

    public func release(_ namespace: Namespace, _ key: EntryKey, id: String, holder: Int64?) throws -> Bool {
        finish(namespace, key, id: id, holder: holder)
    }

    public func releaseUndelivered(_ namespace: Namespace, _ key: EntryKey, _ lease: Lease, holder: Int64?) {
        finish(namespace, key, id: lease.id, holder: holder)
    }

    public func countHandOver() {}

    @discardableResult
    private func finish(_ namespace: Namespace, _ key: EntryKey, id: String, holder: Int64?) -> Bool {
        let digest = SHA256.hash(id)
        return leases.withLock { leases in
            let place = Place(namespace: namespace.name, key: key.bytes)
            guard let held = leases[place], held.digest == digest, held.holder == holder else { return false }
            leases[place] = nil
            return true
        }
    }
}
