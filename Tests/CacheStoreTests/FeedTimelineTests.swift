import CacheCore
@testable import CacheStore
import Foundation
import Postgres
import Testing
import TestSupport

/// A cursor past the feed's head, right after a promotion: before the sequencer's first run on
/// the new WAL timeline records the gap of the lost history, the head still carries the old
/// timeline. Such a cursor comes from the lost history, and says so ("Cursor lost in a
/// failover"), not "Cursor unknown" (a CI run of `FailoverTests` asked in that window). The
/// window is made here by writing another timeline into the head, in a database of its own.
@Suite struct FeedTimelineTests {
    @Test func aCursorPastAHeadFromAnotherTimelineIsLost() throws {
        let database = try TestDatabase.shared.migratedDatabase(prefix: "feedtimeline")
        let pool = TestDatabase.shared.pool(on: database, maxConnections: 2)
        defer { pool.closeIdle() }
        let store = EntryStore(pool: pool, policy: CachePolicy())
        let namespace = try #require(Namespace("followed"))
        let connection = try TestDatabase.shared.connect(database: database)
        let head = Int64(try #require(try connection.query("SELECT last FROM change_feed_head").first?.int("last")))
        #expect(throws: FeedCursorError.ahead(head: head)) {
            try store.changes(namespace, after: head + 5, limit: 10, bodies: false)
        }
        // The head as numbered before a promotion, and the sequencer's next run held off (its
        // row locked), so no gap is recorded yet.
        try connection.execute("UPDATE change_feed_head SET timeline = 'FFFFFFFF'")
        try connection.execute("BEGIN")
        _ = try connection.query("SELECT last FROM change_feed_head FOR UPDATE")
        #expect(throws: FeedCursorError.lost) { try store.changes(namespace, after: head + 5, limit: 10, bodies: false) }
        try connection.execute("ROLLBACK")
    }
}
