import CacheCore
import Foundation
import Postgres

/// WAL positions, for reading one's own writes from a standby: a write answers the
/// primary's position after its commit, and a read that sends it back is served only by a
/// database that has replayed that far.
extension EntryStore {
    /// Past every commit that has returned. With synchronous commits (the default) that is
    /// the flushed position: COMMIT returned only after its record was flushed, and the
    /// flushed position is written the way a standby's replay position is (the end of the
    /// last record). With `synchronous_commit = off` a commit may return before its record
    /// is flushed, so the insert position it is: past every record inserted, though on a
    /// page boundary it sits a page header past what a caught-up standby shows (such a read
    /// then goes to the primary until more WAL is replayed: safe, only slower).
    static let currentPosition = """
        SELECT (CASE WHEN current_setting('synchronous_commit') = 'off' THEN pg_current_wal_insert_lsn()
                     ELSE pg_current_wal_flush_lsn() END)::text AS position
        """

    /// A write's answer waits at most this long for a connection to learn its position;
    /// past it the answer goes without one (counted), rather than late.
    static let positionAcquireTimeout: TimeInterval = 0.2

    /// The primary's position now: past every commit that has returned.
    public func currentPosition() throws -> WALPosition {
        try position(Self.currentPosition, acquireTimeout: Self.positionAcquireTimeout)
    }

    private func position(_ sql: String, acquireTimeout: TimeInterval? = nil) throws -> WALPosition {
        try pool.withConnection(acquireTimeout: acquireTimeout) { connection in
            guard let text = try connection.query(sql).first?.string("position"),
                  let position = WALPosition(text) else {
                throw PostgresError(.decoding, serverMessage: "no WAL position")
            }
            return position
        }
    }

    /// The flushed position, for judging lag: what a standby can have received at all, and
    /// written the way a standby's replay position is. (The insert position can sit a page
    /// header past a record that ends on a page boundary, where a caught-up standby's replay
    /// position stays, so an idle standby would never look current by it.)
    static let flushedPosition = "SELECT pg_current_wal_flush_lsn()::text AS position"

    /// Records where the primary stands into `history`, stamped with the time before asking
    /// (so the stamp never runs ahead of the position).
    public func samplePosition(into history: WALHistory) throws {
        let before = WALHistory.now
        history.record(try position(Self.flushedPosition), at: before)
    }

    public func commitPosition() throws -> String { try currentPosition().description }
}
