import Foundation
import Postgres
import Testing
import TestSupport

@Suite struct ConnectionPoolTests {
    @Test func exhaustedPoolFailsBusyWithinDeadline() throws {
        let database = try TestDatabase.shared.freshDatabase(prefix: "pool")
        let pool = ConnectionPool(.init(url: TestDatabase.shared.url,
                                        overrides: TestDatabase.shared.overrides(database: database),
                                        maxConnections: 1, acquireTimeout: 0.3))
        try pool.withConnection { _ in
            let started = Date()
            let error = try #require(throws: PostgresError.self) {
                try pool.withConnection { _ in }
            }
            let waited = Date().timeIntervalSince(started)
            #expect(error.kind == .poolBusy)
            #expect(error.isUnavailable)
            #expect(waited >= 0.25 && waited < 1.5)
        }
        // Released: the next acquire succeeds at once.
        let one = try pool.withConnection { try $0.query("SELECT 1 AS one").first?.int("one") }
        #expect(one == 1)
    }

    /// A connection handed back inside a transaction is never handed out again: the next
    /// caller's autocommit writes would sit uncommitted in it.
    @Test func aConnectionLeftInATransactionIsNotReused() throws {
        let database = try TestDatabase.shared.freshDatabase(prefix: "pooltx")
        let pool = ConnectionPool(.init(url: TestDatabase.shared.url,
                                        overrides: TestDatabase.shared.overrides(database: database),
                                        maxConnections: 1, acquireTimeout: 2))
        try pool.withConnection { try $0.execute("CREATE TABLE t (n int)") }
        try pool.withConnection { try $0.execute("BEGIN; INSERT INTO t VALUES (1)") }
        #expect(pool.counts.idle == 0, "the connection in a transaction went back to the pool")
        try pool.withConnection { connection in
            #expect(connection.isOutsideTransaction)
            try connection.query("INSERT INTO t VALUES (2)")
        }
        // The second write committed on its own; the first was rolled back with its connection.
        let rows = try TestDatabase.shared.connect(database: database).query("SELECT count(*)::int8 AS n FROM t")
        #expect(try rows.first?.int("n") == 1)
    }

    @Test func poolRecoversAfterPostgresRestarts() throws {
        let database = try PrivateCluster("tc-restart", migrated: false)
        defer { database.remove() }
        let (cluster, url) = (database.cluster, database.url)
        let pool = ConnectionPool(.init(url: url, maxConnections: 4, acquireTimeout: 0.5))
        #expect(try pool.withConnection { try $0.query("SELECT 1 AS one").first?.int("one") } == 1)

        cluster.stop()
        let error = try #require(throws: PostgresError.self) {
            try pool.withConnection { try $0.query("SELECT 1 AS one") }
        }
        #expect(error.isUnavailable)

        _ = try cluster.start()
        var answered: Int?
        for _ in 0..<50 where answered == nil {
            answered = try? pool.withConnection { try $0.query("SELECT 1 AS one").first?.int("one") }
            if answered == nil { Thread.sleep(forTimeInterval: 0.1) }
        }
        #expect(answered == 1)
    }
}
