import CacheCore
import CacheStore
import Foundation
import Postgres
import Testing
import TestSupport

/// The whole store's orderings of access rows (store-wide LRU, idle entries, the most hit)
/// across namespaces and across the cycle's batches of 1,000: what `entry_access_idle` and
/// `entry_access_top_global` serve (a merge of per-namespace ranges was measured in their
/// place and not kept: bench/results/2026-12-05-put-path-2.md).
@Suite struct AccessOrderTests {
    /// Five namespaces of 700 one-byte entries, their access times interleaved across
    /// namespaces (entry i of namespace n was used i * 5 + n seconds ago, n in 0..<5).
    static func store(_ policy: CachePolicy, prefix: String) throws -> (EntryStore, ConnectionPool, Date) {
        let pool = try TestDatabase.shared.migratedPool(prefix: prefix, maxConnections: 2)
        let clock = ManualClock()
        let now = clock.now()
        _ = try pool.withConnection { connection in
            try connection.query("""
                INSERT INTO entries (namespace, key, body, encoding, content_type, identity_size, stored_size, etag,
                                     created_at, updated_at, expires_at)
                SELECT 'ns' || n, convert_to(lpad(i::text, 4, '0'), 'UTF8'), '\\x00', 'identity', 't', 1, 1, 'e',
                       $1 - interval '3 days', $1 - interval '3 days', $1 + interval '1 day'
                FROM generate_series(0, 4) AS n, generate_series(0, 699) AS i
                """, [.timestamp(now)])
            try connection.query("""
                INSERT INTO entry_access (entry_id, namespace, hit_count, last_accessed_at)
                SELECT id, namespace, convert_from(key, 'UTF8')::int * 5 + substring(namespace FROM 3)::int,
                       $1 - (convert_from(key, 'UTF8')::int * 5 + substring(namespace FROM 3)::int) * interval '1 second'
                FROM entries
                """, [.timestamp(now)])
        }
        return (EntryStore(pool: pool, policy: policy, clock: clock), pool, now)
    }

    /// The ages (in seconds) of the entries left, sorted.
    static func agesLeft(_ pool: ConnectionPool) throws -> [Int] {
        try pool.withConnection { connection in
            try connection.query("""
                SELECT convert_from(key, 'UTF8')::int * 5 + substring(namespace FROM 3)::int AS age FROM entries ORDER BY 1
                """).rows.map { try $0.int("age") ?? -1 }
        }
    }

    @Test func theStoreCapEvictsTheWholeStoresLeastRecentlyUsed() throws {
        var policy = CachePolicy()
        policy.storeMaxBytes = 1000  // of 3,500: the 2,500 least recent go, over three batches
        let (store, pool, _) = try Self.store(policy, prefix: "lruall")
        let report = try #require(EvictionJob(store: store).runCycle())
        #expect(report.entries[.size] == 2500)
        #expect(try Self.agesLeft(pool) == Array(0..<1000), "the 1,000 most recently used stay, from every namespace")
    }

    @Test func idleEntriesOfEveryNamespaceGoAcrossBatches() throws {
        var policy = CachePolicy()
        policy.idleTTL = 999  // ages 1000...3499 are idle (older than 999 s): 2,500 entries, 500 of each namespace
        let (store, pool, _) = try Self.store(policy, prefix: "idleall")
        let report = try #require(EvictionJob(store: store).runCycle())
        #expect(report.entries[.idle] == 2500)
        #expect(try Self.agesLeft(pool) == Array(0..<1000))
    }

    @Test func theWholeStoresMostHitComeFromEveryNamespace() throws {
        let (store, _, _) = try Self.store(CachePolicy(), prefix: "topall")
        let top = try store.stats(nil, top: 7).top
        // Hit counts are the ages: the most hit are 3499, 3498, … across the five namespaces.
        #expect(top.map(\.hitCount) == Array((3493...3499).reversed()))
        #expect(Set(top.map(\.namespace)) == ["ns0", "ns1", "ns2", "ns3", "ns4"])
    }
}
