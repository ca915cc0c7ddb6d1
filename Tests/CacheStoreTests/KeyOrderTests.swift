import CacheCore
@testable import CacheStore
import Foundation
import Postgres
import Testing
import TestSupport

/// Group writes and import chunks send their rows in `KeyOrder` and have PostgreSQL write them
/// in the order sent (an import chunk sorts by its arrays' ordinals): that order is the lock
/// order only if it is PostgreSQL's own for `namespace COLLATE "C", key`.
@Suite struct KeyOrderTests {
    /// Random namespaces (multi-byte UTF-8 among them, one a prefix of another) and byte keys
    /// (0x00 and 0xFF bytes, keys that are prefixes of others, the empty key): sorted by
    /// `KeyOrder`, they are in the order PostgreSQL sorts them.
    @Test func keyOrderIsPostgresOrder() throws {
        let pool = try TestDatabase.shared.migratedPool(prefix: "keyorder", maxConnections: 1)
        defer { pool.closeIdle() }
        var generator = SystemRandomNumberGenerator()
        let namespaces = ["a", "ab", "b", "B", "é", "e\u{301}", "z", "日本", "a-b", "a_b", "a0"]
        var rows: [(namespace: String, key: [UInt8])] = []
        for _ in 0..<3_000 {
            let length = Int.random(in: 0...4, using: &generator)
            let key = (0..<length).map { _ in [0x00, 0x01, 0x7F, 0x80, 0xFF, 0x61].randomElement(using: &generator)! }
            rows.append((namespaces.randomElement(using: &generator)!, key.map(UInt8.init)))
        }
        let sorted = rows.indices.sorted { KeyOrder.precedes(rows[$0].namespace, rows[$0].key, rows[$1].namespace, rows[$1].key) }
        let byPostgres = try pool.withConnection { connection in
            try connection.query("""
                SELECT r.ordinal FROM unnest($1::text[], $2::bytea[]) WITH ORDINALITY AS r(namespace, key, ordinal)
                ORDER BY r.namespace COLLATE "C", r.key, r.ordinal
                """, [.textArray(rows.map(\.namespace)), .bytesArray(rows.map(\.key))])
        }
        let postgresOrder = try byPostgres.rows.map { row in try #require(try row.int("ordinal")) - 1 }
        // Equal rows may stand in either order in `sorted`; compare the rows, not the ordinals.
        #expect(postgresOrder.count == rows.count)
        // Bytes, not `String !=`, which holds "é" and "e\u{301}" equal.
        let mismatch = zip(sorted, postgresOrder).first {
            !rows[$0].namespace.utf8.elementsEqual(rows[$1].namespace.utf8) || rows[$0].key != rows[$1].key
        }
        #expect(mismatch == nil, "first row out of PostgreSQL's order: \(mismatch.map { rows[$0.0] } as Any)")
        #expect(!KeyOrder.precedes("a", [1], "a", [1]), "strict: a row does not precede itself")
    }

    /// An import chunk runs as one statement only in key order, each key strictly after the one
    /// before: a tie (one key twice) or an inversion sends it entry by entry instead.
    @Test func aChunkRunsAsOneStatementOnlyInKeyOrder() {
        func stored(_ namespace: String, _ key: [UInt8]) -> EntryImportGroup.Stored {
            let entry = DumpedEntry(namespace: namespace, key: key, body: [0x7B, 0x7D], encoding: .identity,
                                    contentType: "application/json", identitySize: 2, etag: "\"e\"", tags: [],
                                    inputTokens: 0, outputTokens: 0, createdAt: "2026-12-06T10:00:00Z",
                                    updatedAt: "2026-12-06T10:00:00Z", staleWhileRevalidate: 0, hitCount: 0)
            return .init(entry: entry, body: entry.body, encoding: "identity", metadata: nil, promptDigest: nil)
        }
        #expect(EntryImportGroup.inKeyOrder([]))
        #expect(EntryImportGroup.inKeyOrder([stored("a", [1]), stored("a", [1, 0]), stored("a", [2]), stored("b", [0])]))
        #expect(!EntryImportGroup.inKeyOrder([stored("a", [1]), stored("a", [1])]), "one key twice")
        #expect(!EntryImportGroup.inKeyOrder([stored("a", [2]), stored("a", [1])]), "an inversion")
        #expect(!EntryImportGroup.inKeyOrder([stored("b", [0]), stored("a", [9])]), "namespaces first")
        // Bytes decide: 0xFF sorts after 0x7F, where a signed comparison would put it first.
        #expect(EntryImportGroup.inKeyOrder([stored("a", [0x7F]), stored("a", [0xFF])]))
    }
}
