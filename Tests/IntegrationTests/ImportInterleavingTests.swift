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

    typealias Outcome = Locked<Result<[ImportOutcome], any Error>?>

    /// A store on a database of the test's own.
    static func store(prefix: String) throws -> (ConnectionPool, EntryStore) {
        let database = try TestDatabase.shared.migratedDatabase(prefix: prefix)
        let pool = ConnectionPool(.init(url: TestDatabase.shared.url,
                                        overrides: TestDatabase.shared.overrides(database: database), maxConnections: 4))
        return (pool, EntryStore(pool: pool, policy: CachePolicy(), clock: SystemClock()))
    }

    /// Runs `work` on a thread of its own; its result lands in `outcome` (set outside the lock:
    /// a reader polls it meanwhile).
    static func start(_ outcome: Outcome, _ work: @escaping @Sendable () throws -> [ImportOutcome]) {
        Thread {
            let result = Result { try work() }
            outcome.withLock { $0 = result }
        }.start()
    }

    /// The result, once there (20 s at most).
    static func awaited(_ outcome: Outcome) throws -> Result<[ImportOutcome], any Error> {
        let deadline = Date().addingTimeInterval(20)
        while outcome.withLock({ $0 }) == nil && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        return try #require(outcome.withLock { $0 })
    }

    /// Whether a session of this database comes to wait on a lock within 20 s.
    static func someoneWaitsOnALock(_ connection: PostgresConnection) throws -> Bool {
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline {
            // Cleared each time: within a transaction the activity view is a snapshot.
            _ = try connection.query("SELECT pg_stat_clear_snapshot()")
            let waiting = try connection.query("""
                SELECT count(*)::int8 AS n FROM pg_stat_activity
                WHERE datname = current_database() AND wait_event_type = 'Lock'
                """).first?.int("n") ?? 0
            if waiting >= 1 { return true }
            Thread.sleep(forTimeInterval: 0.02)
        }
        return false
    }

    /// A writer inserts a key after the chunk read it absent and before the chunk's insert:
    /// the insert waits for it and does not write over the row that won. The chunk is rolled
    /// back and goes entry by entry through `tc_import_entry`, which applies the policy to that
    /// row; the other entries are imported; nothing fails, and nothing is written twice.
    @Test(arguments: [ImportConflictPolicy.skip, .replace])
    func aKeyInsertedDuringTheChunkIsDecidedOnTheRowThatWon(policy: ImportConflictPolicy) throws {
        let (pool, store) = try Self.store(prefix: "imprace")
        let now = Date()
        let chunk = [Self.entry("a", body: "dump a", now: now), Self.entry("race", body: "dump race", now: now),
                     Self.entry("z", body: "dump z", now: now)]
        let outcomes = Outcome(nil)
        try pool.withConnection { holder in
            try holder.transaction { holder in
                _ = try holder.query("""
                    INSERT INTO entries (namespace, key, body, encoding, content_type, identity_size, stored_size, etag,
                                         created_at, updated_at, expires_at)
                    VALUES ('race', 'race', 'held', 'identity', 'text/plain', 4, 4, '"held"', now(), now(),
                            now() + interval '10 minutes')
                    """)
                Self.start(outcomes) { try store.importEntries(chunk, policy: policy) }
                // The import's insert of "race" waits on the holder's uncommitted row.
                #expect(try Self.someoneWaitsOnALock(holder), "the import never waited on the held insert")
                #expect(outcomes.withLock { $0 } == nil, "the import finished before the holder committed")
            }
        }
        let result = try Self.awaited(outcomes).get()
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
        let (pool, store) = try Self.store(prefix: "impdead")
        let now = Date()
        let insert = """
            INSERT INTO entries (namespace, key, body, encoding, content_type, identity_size, stored_size, etag,
                                 created_at, updated_at, expires_at)
            VALUES ('race', $1, $2, 'identity', 'text/plain', 4, 4, '"held"', now(), now(), now() + interval '10 minutes')
            """
        _ = try pool.withConnection { try $0.query(insert, [.bytes(Array("k3".utf8)), .bytes(Array("old3".utf8))]) }
        let chunk = [Self.entry("k2", body: "dump k2", now: now), Self.entry("k3", body: "dump k3", now: now)]
        let outcomes = Outcome(nil)
        try pool.withConnection { holder in
            try holder.transaction { holder in
                _ = try holder.query(insert, [.bytes(Array("k2".utf8)), .bytes(Array("new2".utf8))])
                Self.start(outcomes) { try store.importEntries(chunk, policy: policy) }
                #expect(try Self.someoneWaitsOnALock(holder), "the chunk never waited on the held insert of k2")
                // Past the held key in key order: must not wait for the chunk (1 s is plenty).
                _ = try holder.query("SET LOCAL lock_timeout = '1s'")
                _ = try holder.query("UPDATE entries SET body = 'new3', updated_at = now() WHERE namespace = 'race' AND key = 'k3'")
            }
        }
        let result = try Self.awaited(outcomes).get()
        #expect(result == (policy == .skip ? [.skipped, .skipped] : [.imported, .imported]))
        let bodies = try pool.withConnection { connection in
            try connection.query("SELECT convert_from(body, 'UTF8') AS body FROM entries ORDER BY key").rows
                .map { try $0.string("body") ?? "" }
        }
        #expect(bodies == (policy == .skip ? ["new2", "new3"] : ["dump k2", "dump k3"]))
    }
}

