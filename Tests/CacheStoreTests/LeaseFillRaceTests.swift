import CacheCore
import CacheStore
import Foundation
import Postgres
import Testing
import TestSupport

/// A caller reads a key (nothing there), then asks for a lease; between the two, the
/// lease's holder fills the key and completes its lease. The grant must not go through: the
/// caller would pay for the answer a second time. It is told the key is held (and reads it
/// again), and no lease is left behind.
@Suite struct LeaseFillRaceTests {
    @Test func aGrantAfterTheFillIsWithdrawn() throws {
        let own = try OwnDatabase(prefix: "leasefill")
        defer { own.pool.closeIdle() }
        let (policy, store) = (own.policy, own.store)
        let leases = LeaseStore(pool: own.pool)
        let namespace = try #require(Namespace("raced"))
        let key = try #require(EntryKey(Array("k".utf8)))
        guard case .granted(let filler) = try leases.grant(namespace, key, seconds: 30, holder: 1) else {
            Issue.record("the first caller is the filler")
            return
        }
        // The second caller's read, before the fill.
        #expect(try store.fetch(namespace, key) == nil)
        var write = EntryWrite(namespace: namespace, key: key,
                               body: StoredBody.fromIdentity(Array("answer".utf8), contentType: "text/plain", policy: policy),
                               contentType: "text/plain")
        write.ttlSeconds = 60
        _ = try store.put(write)
        #expect(try leases.complete(namespace, key, id: filler.id, holder: 1))
        // Its grant, after the fill.
        #expect(try leases.grant(namespace, key, seconds: 30, holder: 2, unlessFilled: .anyEntry) == .filled,
                "a lease was granted on a key just filled")
        let connection = try own.connect()
        let left = try connection.query("SELECT count(*)::int8 AS n FROM leases WHERE namespace = 'raced'")
        #expect(try left.first?.int("n") == 0, "the withdrawn lease is gone")
        // An entry the read does not take (another model: a raw PUT under a descriptor's key)
        // leaves the lease granted: withdrawn, the read would find the same miss again.
        guard case .granted(let other) = try leases.grant(namespace, key, seconds: 30, holder: 2,
                                                          unlessFilled: .model("another-model")) else {
            Issue.record("a lease was withdrawn for an entry of another model")
            return
        }
        #expect(try leases.release(namespace, key, id: other.id, holder: 2))
        // Once the entry has expired, a miss gets its lease again.
        try connection.execute("UPDATE entries SET expires_at = now() - interval '1 second' WHERE namespace = 'raced'")
        guard case .granted = try leases.grant(namespace, key, seconds: 30, holder: 2, unlessFilled: .anyEntry) else {
            Issue.record("no lease on an expired entry")
            return
        }
    }
}
