import CacheCore
import CacheStore
import Foundation
import Postgres
import Testing
import TestSupport

/// An entry's access row goes with the entry, whichever way it goes: a DELETE of one key, an
/// eviction by predicate, the eviction cycle, a DELETE by hand and a TRUNCATE (migration 0018's
/// triggers, which replaced the foreign key's cascade). An access row left behind would be
/// counted by the LRU and idle passes and the `top` lists, and hold its id forever.
@Suite struct AccessRowLifetimeTests {
    /// (access rows, access rows without an entry, entries).
    static func counts(_ pool: ConnectionPool) throws -> (access: Int, orphans: Int, entries: Int) {
        try pool.withConnection { connection in
            let row = try connection.query("""
                SELECT (SELECT count(*) FROM entry_access) AS access,
                       (SELECT count(*) FROM entry_access a
                        WHERE NOT EXISTS (SELECT 1 FROM entries e WHERE e.id = a.entry_id)) AS orphans,
                       (SELECT count(*) FROM entries) AS entries
                """).first
            return (try row?.int("access") ?? -1, try row?.int("orphans") ?? -1, try row?.int("entries") ?? -1)
        }
    }

    static func expectPaired(_ pool: ConnectionPool, entries: Int, _ step: String) throws {
        let counts = try Self.counts(pool)
        #expect(counts.orphans == 0 && counts.access == entries && counts.entries == entries, "\(step): \(counts)")
    }

    @Test func accessRowsGoWithTheirEntriesEveryWay() throws {
        var policy = CachePolicy()
        policy.idleTTL = 3000  // ages 3001...3499 are idle: 499 entries, across the five namespaces
        let (store, pool, _) = try AccessOrderTests.store(policy, prefix: "accessgone")
        try Self.expectPaired(pool, entries: 3500, "filled")

        let ns0 = try #require(Namespace("ns0")), ns1 = try #require(Namespace("ns1"))
        #expect(try store.delete(ns0, try #require(EntryKey(Array("0000".utf8)))))
        try Self.expectPaired(pool, entries: 3499, "one key deleted")

        var predicate = EvictionPredicate()
        predicate.keys = (1...100).map { Array(String(format: "%04d", $0).utf8) }
        #expect(try store.evict(ns1, predicate).entries == 100)
        try Self.expectPaired(pool, entries: 3399, "evicted by key list")

        let report = try #require(EvictionJob(store: store).runCycle())
        let idle = try #require(report.entries[.idle])
        #expect(idle > 0)
        try Self.expectPaired(pool, entries: 3399 - idle, "the eviction cycle's idle pass")

        let left = try Self.counts(pool).entries
        let byHand = try pool.withConnection { try $0.query("DELETE FROM entries WHERE namespace = 'ns4'").affectedRows }
        #expect(byHand > 0)
        try Self.expectPaired(pool, entries: left - byHand, "a DELETE by hand")

        try pool.withConnection { try $0.execute("TRUNCATE entries") }
        try Self.expectPaired(pool, entries: 0, "TRUNCATE")
    }

    /// A store restored by hand from `entries` alone (a `pg_dump --table=entries`, say) has no
    /// access rows. A predicate eviction still finds its entries (it joined `entry_access`, and
    /// so evicted none of them); an idle one does not, their access time being unknown.
    @Test func entriesWithoutAccessRowsAreStillEvictedByPredicate() throws {
        let (store, pool, now) = try AccessOrderTests.store(CachePolicy(), prefix: "accessless")
        let removed = try pool.withConnection {
            try $0.query("DELETE FROM entry_access WHERE namespace IN ('ns2', 'ns3')").affectedRows
        }
        #expect(removed == 1400)
        let ns2 = try #require(Namespace("ns2")), ns3 = try #require(Namespace("ns3"))
        var all = EvictionPredicate()
        all.all = true
        #expect(try store.evict(ns2, all).entries == 700)
        var old = EvictionPredicate()
        old.createdBefore = now.addingTimeInterval(-86_400)
        old.keys = (0..<100).map { Array(String(format: "%04d", $0).utf8) }
        #expect(try store.evict(ns3, old).entries == 100)
        var idle = EvictionPredicate()
        idle.accessedBefore = now
        #expect(try store.evict(ns3, idle).entries == 0, "not known to be idle")
        #expect(try Self.counts(pool).entries == 2700, "the other namespaces untouched")
        // The repair docs/export-import.md gives: every entry paired again, last accessed when
        // written (three days ago), so now found idle.
        try pool.withConnection { try $0.execute("""
            INSERT INTO entry_access (entry_id, namespace, hit_count, last_accessed_at)
            SELECT e.id, e.namespace, 0, e.updated_at FROM entries e
            WHERE NOT EXISTS (SELECT 1 FROM entry_access a WHERE a.entry_id = e.id)
            ON CONFLICT (entry_id) DO NOTHING;
            """) }
        try Self.expectPaired(pool, entries: 2700, "repaired")
        #expect(try store.evict(ns3, idle).entries == 600)
    }

    /// Every way to truncate empties both tables: the trigger deletes the access rows, since a
    /// nested TRUNCATE refused `TRUNCATE entries, entry_access` (both tables still open).
    @Test(arguments: ["TRUNCATE entries", "TRUNCATE entries CASCADE", "TRUNCATE entries, entry_access",
                      "TRUNCATE entry_access, entries"])
    func everyTruncateEmptiesBoth(_ statement: String) throws {
        let (_, pool, _) = try AccessOrderTests.store(CachePolicy(), prefix: "accesstrunc")
        try Self.expectPaired(pool, entries: 3500, "filled")
        try pool.withConnection { try $0.execute(statement) }
        try Self.expectPaired(pool, entries: 0, statement)
    }
}
