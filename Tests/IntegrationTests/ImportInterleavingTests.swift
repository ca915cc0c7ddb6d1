import CacheCore
import CacheStore
import Foundation
import Locking
import Postgres
import Testing
import TestSupport

/// An import chunk is one set-based statement (`EntryImportGroup`); these interleave it on
/// purpose with the writers it must not trample, under PostgreSQL's real locking rules.
@Suite struct ImportInterleavingTests {
    static func entry(_ key: String, body: String, now: Date) -> DumpedEntry {
        DumpedEntry(namespace: "race", key: Array(key.utf8), body: Array(body.utf8), encoding: .identity,
                    contentType: "text/plain", identitySize: body.utf8.count, etag: "\"\(body)\"", tags: [],
                    inputTokens: 0, outputTokens: 0, createdAt: RFC3339.formatWithFraction(now),
                    updatedAt: RFC3339.formatWithFraction(now),
                    expiresAt: RFC3339.formatWithFraction(now.addingTimeInterval(600)), staleWhileRevalidate: 0,
                    hitCount: 1)
    }

    /// A writer inserts a key after the chunk's snapshot was taken and before its insert: the
    /// insert waits for it, does nothing there, and the entry goes to `tc_import_entry`,
    /// which reads the row that won and applies the policy to it. The chunk's other entries
    /// are imported; nothing fails, and nothing is written twice.
    @Test(arguments: [ImportConflictPolicy.skip, .replace])
    func aKeyInsertedDuringTheChunkIsDecidedOnTheRowThatWon(policy: ImportConflictPolicy) throws {
        let database = try TestDatabase.shared.migratedDatabase(prefix: "imprace")
        let pool = ConnectionPool(.init(url: TestDatabase.shared.url,
                                        overrides: TestDatabase.shared.overrides(database: database), maxConnections: 4))
        let store = EntryStore(pool: pool, policy: CachePolicy(), clock: SystemClock())
        let now = Date()
        let chunk = [Self.entry("a", body: "dump a", now: now), Self.entry("race", body: "dump race", now: now),
                     Self.entry("z", body: "dump z", now: now)]
        let outcomes = Locked<Result<[ImportOutcome], any Error>?>(nil)
        try pool.withConnection { holder in
            try holder.transaction { holder in
                _ = try holder.query("""
                    INSERT INTO entries (namespace, key, body, encoding, content_type, identity_size, stored_size, etag,
                                         created_at, updated_at, expires_at)
                    VALUES ('race', 'race', 'held', 'identity', 'text/plain', 4, 4, '"held"', now(), now(),
                            now() + interval '10 minutes')
                    """)
                let importer = Thread {
                    let result = Result { try store.importEntries(chunk, policy: policy) }
                    outcomes.withLock { $0 = result }
                }
                importer.start()
                // The import's insert of "race" waits on the holder's uncommitted row.
                let deadline = Date().addingTimeInterval(20)
                var waiting = false
                while !waiting && Date() < deadline {
                    // Cleared each time: within a transaction the activity view is a snapshot.
                    _ = try holder.query("SELECT pg_stat_clear_snapshot()")
                    waiting = try holder.query("""
                        SELECT count(*)::int8 AS n FROM pg_stat_activity
                        WHERE datname = current_database() AND wait_event_type = 'Lock'
                        """).first?.int("n") ?? 0 >= 1
                    if !waiting { Thread.sleep(forTimeInterval: 0.02) }
                }
                #expect(waiting, "the import never waited on the held insert")
                #expect(outcomes.withLock { $0 } == nil, "the import finished before the holder committed")
            }
        }
        let deadline = Date().addingTimeInterval(20)
        while outcomes.withLock({ $0 }) == nil && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        let result = try #require(outcomes.withLock { $0 }).get()
        #expect(result == [.imported, policy == .skip ? .skipped : .imported, .imported])
        let bodies = try pool.withConnection { connection in
            try connection.query("SELECT convert_from(key, 'UTF8') AS key, convert_from(body, 'UTF8') AS body "
                                 + "FROM entries ORDER BY key").rows.map { "\(try $0.string("key") ?? "") \(try $0.string("body") ?? "")" }
        }
        #expect(bodies == ["a dump a", "race \(policy == .skip ? "held" : "dump race")", "z dump z"])
        let access = try pool.withConnection { connection in
            try connection.query("SELECT count(*)::int8 AS n FROM entry_access").first?.int("n")
        }
        #expect(access == 2, "access rows: one per inserted entry (the held row had none, and an update makes none)")
    }

    /// The deadlock a chunk must not make: another writer holds a new key the chunk inserts
    /// (k2) and then writes an existing key after it (k3). Had the chunk locked its existing
    /// rows before inserting its new ones, each would wait for the other. It takes its locks
    /// in key order only as it writes: the writer's update of k3 goes through at once, and
    /// the chunk, finding both rows changed since it read them, imports entry by entry.
    @Test(arguments: [ImportConflictPolicy.skip, .replace])
    func aWriterAheadInKeyOrderNeverDeadlocksWithAChunk(policy: ImportConflictPolicy) throws {
        let database = try TestDatabase.shared.migratedDatabase(prefix: "impdead")
        let pool = ConnectionPool(.init(url: TestDatabase.shared.url,
                                        overrides: TestDatabase.shared.overrides(database: database), maxConnections: 4))
        let store = EntryStore(pool: pool, policy: CachePolicy(), clock: SystemClock())
        let now = Date()
        let insert = """
            INSERT INTO entries (namespace, key, body, encoding, content_type, identity_size, stored_size, etag,
                                 created_at, updated_at, expires_at)
            VALUES ('race', $1, $2, 'identity', 'text/plain', 4, 4, '"held"', now(), now(), now() + interval '10 minutes')
            """
        _ = try pool.withConnection { try $0.query(insert, [.bytes(Array("k3".utf8)), .bytes(Array("old3".utf8))]) }
        let chunk = [Self.entry("k2", body: "dump k2", now: now), Self.entry("k3", body: "dump k3", now: now)]
        let outcomes = Locked<Result<[ImportOutcome], any Error>?>(nil)
        try pool.withConnection { holder in
            try holder.transaction { holder in
                _ = try holder.query(insert, [.bytes(Array("k2".utf8)), .bytes(Array("new2".utf8))])
                let importer = Thread {
                    let result = Result { try store.importEntries(chunk, policy: policy) }
                    outcomes.withLock { $0 = result }
                }
                importer.start()
                let deadline = Date().addingTimeInterval(20)
                var waiting = false
                while !waiting && Date() < deadline {
                    _ = try holder.query("SELECT pg_stat_clear_snapshot()")
                    waiting = try holder.query("""
                        SELECT count(*)::int8 AS n FROM pg_stat_activity
                        WHERE datname = current_database() AND wait_event_type = 'Lock'
                        """).first?.int("n") ?? 0 >= 1
                    if !waiting { Thread.sleep(forTimeInterval: 0.02) }
                }
                #expect(waiting, "the chunk never waited on the held insert of k2")
                // Past the held key in key order: must not wait for the chunk (1 s is plenty).
                _ = try holder.query("SET LOCAL lock_timeout = '1s'")
                _ = try holder.query("UPDATE entries SET body = 'new3', updated_at = now() WHERE namespace = 'race' AND key = 'k3'")
            }
        }
        let deadline = Date().addingTimeInterval(20)
        while outcomes.withLock({ $0 }) == nil && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        let result = try #require(outcomes.withLock { $0 }).get()
        #expect(result == (policy == .skip ? [.skipped, .skipped] : [.imported, .imported]))
        let bodies = try pool.withConnection { connection in
            try connection.query("SELECT convert_from(body, 'UTF8') AS body FROM entries ORDER BY key").rows
                .map { try $0.string("body") ?? "" }
        }
        #expect(bodies == (policy == .skip ? ["new2", "new3"] : ["dump k2", "dump k3"]))
    }
}

