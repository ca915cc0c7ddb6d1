import CacheCore
import CacheStore
import Foundation
import Postgres
import Testing
import TestSupport

/// The export walk reads its next page in the background while this one is written: every
/// entry comes out once, in (namespace, key) order, across pages cut by count (1,000 keys)
/// and by bytes (16 MiB of bodies).
@Suite struct ExportWalkTests {
    @Test func everyEntryOnceInOrderAcrossPageCuts() throws {
        let pool = try TestDatabase.shared.migratedPool(prefix: "expwalk", maxConnections: 4)
        let store = EntryStore(pool: pool, policy: CachePolicy(), clock: SystemClock())
        _ = try pool.withConnection { connection in
            // 1,200 bodies of 40 KB first (pages cut by bytes), then 1,300 small (cut by count),
            // over two namespaces.
            try connection.query("""
                INSERT INTO entries (namespace, key, body, encoding, content_type, identity_size, stored_size, etag,
                                     created_at, updated_at, expires_at)
                SELECT CASE WHEN i < 2000 THEN 'walk' ELSE 'walk2' END, convert_to(lpad(i::text, 5, '0'), 'UTF8'),
                       CASE WHEN i < 1200 THEN convert_to(repeat('x', 40000), 'UTF8') ELSE '\\x00' END,
                       'identity', 't', 1, CASE WHEN i < 1200 THEN 40000 ELSE 1 END, 'e', now(), now(),
                       now() + interval '1 hour'
                FROM generate_series(0, 2499) AS i
                """)
        }
        for namespace in [nil, Namespace("walk")] {
            var keys: [String] = []
            try store.export(namespace: namespace, since: nil) { entry in
                keys.append(entry.namespace + "/" + String(decoding: entry.key, as: UTF8.self))
            }
            let expected = (0..<(namespace == nil ? 2500 : 2000)).map {
                ($0 < 2000 ? "walk/" : "walk2/") + String(repeating: "0", count: 5 - String($0).count) + String($0)
            }
            #expect(keys == expected, "\(namespace?.name ?? "every namespace"): \(keys.count) keys")
        }
    }

    /// Times are read as binary and written here for years 1 to 9999; any other time PostgreSQL
    /// holds (an import or a long TTL can put one there) is still written as `to_char` writes
    /// it, and a missing access time stays missing.
    @Test func timesOutsideFourDigitYearsAreWrittenAsPostgresWritesThem() throws {
        let pool = try TestDatabase.shared.migratedPool(prefix: "exptimes", maxConnections: 2)
        let store = EntryStore(pool: pool, policy: CachePolicy(), clock: SystemClock())
        _ = try pool.withConnection { connection in
            try connection.query("""
                INSERT INTO entries (namespace, key, body, encoding, content_type, identity_size, stored_size, etag,
                                     created_at, updated_at, expires_at, stale_while_revalidate)
                VALUES ('times', 'k', '\\x00', 'identity', 't', 1, 1, 'e', '0001-01-01 00:00:00.5+00',
                        '2026-12-05 10:11:12.000001+00', '12000-06-01 00:00:00+00', 30)
                """)
        }
        var entries: [DumpedEntry] = []
        try store.export(namespace: Namespace("times"), since: nil) { entries.append($0) }
        try #require(entries.count == 1)
        #expect(entries[0].createdAt == "0001-01-01T00:00:00.500000Z")
        #expect(entries[0].updatedAt == "2026-12-05T10:11:12.000001Z")
        #expect(entries[0].expiresAt == "12000-06-01T00:00:00.000000Z")
        #expect(String(decoding: entries[0].line(), as: UTF8.self).contains("\"stale_until\":\"12000-06-01T00:00:30.000000Z\""))
        #expect(entries[0].lastAccessedAt == nil)
    }
}
