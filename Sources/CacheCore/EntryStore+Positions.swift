import Foundation
import Postgres

/// WAL positions, for reading one's own writes from a standby: a write answers the
/// primary's position after its commit, and a read that sends it back is served only by a
/// database that has replayed that far.
extension EntryStore {
    /// `pg_current_wal_insert_lsn`, not `pg_current_wal_lsn`: the insert position is past
    /// every record inserted so far, this commit's included, even when commits are
    /// asynchronous (`synchronous_commit = off`) and not yet written out.
    static let currentPosition = "SELECT pg_current_wal_insert_lsn()::text AS position"

    /// The primary's position now: past every commit that has returned.
    public func currentPosition() throws -> WALPosition {
        try position(Self.currentPosition)
    }

    private func position(_ sql: String) throws -> WALPosition {
        try pool.withConnection { connection in
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
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        let before = UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
        history.record(try position(Self.flushedPosition), at: before)
    }
}
