import CacheCore
import Foundation
import Postgres

extension EntryStore {
    /// One batch of a predicate eviction: every optional condition is skipped when its
    /// parameter is NULL, so one prepared statement serves every combination. The conditions
    /// on the entry are repeated on the row deleted (see `EvictionJob`: a row rewritten
    /// after selection is rechecked in its new version), and an entry written after the
    /// eviction began (`$9`) is newer than the request: it stays. That condition is in the
    /// select too: a row it locks and then finds rewritten (PostgreSQL rechecks a locked row's
    /// new version) is passed over for the next one, so a batch is short only when no match
    /// is left. Without it the batch kept the rewritten row, deleted one fewer than a batch,
    /// and the loop took that for the end.
    ///
    /// Rows are locked in key order, the order in which a group of writes locks them, so an
    /// eviction and a group of writes over the same keys queue behind each other and never
    /// wait on each other in a cycle. (Skipping locked rows, as the scheduled cycle does,
    /// would be wrong here: a row held by a write that then fails its precondition would
    /// survive an eviction that was asked for it.)
    ///
    /// An entry without an access row is found too (a LEFT JOIN): no writer leaves one, but a
    /// store restored by hand from a dump of `entries` alone is all such entries, and a wipe
    /// asked for them must not report 0. Only an access-time condition (`idle_for`,
    /// `accessed_before`) passes over them: their access time is unknown, so they are not known
    /// to be idle. Reading it as their creation instead (`coalesce`) would cost that condition
    /// its index: a custom plan turns this LEFT JOIN with a condition on `a` into the inner join
    /// that reads `entry_access_idle`, and would scan the whole namespace instead.
    static let evictBatch = """
        WITH gone AS (DELETE FROM entries WHERE id = ANY(ARRAY(
            SELECT e.id FROM entries e LEFT JOIN entry_access a ON a.entry_id = e.id
            WHERE e.namespace = $1
              AND ($2::bytea[] IS NULL OR e.key = ANY($2::bytea[]))
              AND ($3::text IS NULL OR e.tags @> ARRAY[$3::text])
              AND ($4::text IS NULL OR e.model = $4::text)
              AND ($5::text IS NULL OR e.version = $5::text)
              AND ($6::timestamptz IS NULL OR e.created_at < $6::timestamptz)
              AND ($7::timestamptz IS NULL OR a.last_accessed_at < $7::timestamptz)
              AND e.updated_at <= $9
            ORDER BY e.key LIMIT $8 FOR UPDATE OF e))
              AND namespace = $1 AND updated_at <= $9
              AND ($2::bytea[] IS NULL OR key = ANY($2::bytea[]))
              AND ($3::text IS NULL OR tags @> ARRAY[$3::text])
              AND ($4::text IS NULL OR model = $4::text)
              AND ($5::text IS NULL OR version = $5::text)
              AND ($6::timestamptz IS NULL OR created_at < $6::timestamptz)
            RETURNING namespace, stored_size),
        counted AS (INSERT INTO counter_deltas (namespace, evicted_manual, at)
                    SELECT namespace, count(*), $9 FROM gone GROUP BY namespace)
        SELECT count(*)::bigint AS n, coalesce(sum(stored_size), 0)::bigint AS bytes FROM gone
        """

    /// Rows deleted per statement: short transactions that never hold many locks for long.
    public static let evictionBatchSize = 1000

    /// Deletes the namespace's entries matching `predicate`, in batches until one comes back
    /// short; returns how many went and their stored bytes.
    public func evict(_ namespace: Namespace, _ predicate: EvictionPredicate) throws -> (entries: Int, bytes: Int) {
        precondition(predicate.isRestrictive, "an empty predicate would wipe the namespace")
        // Whatever went (batches may have committed before a failure), kept copies go.
        defer { localChanges.changed(namespace.name, nil) }
        // The clock writes are stamped with: an entry written after this is newer than the request.
        let now = try pool.withConnection { try stampNow(on: $0) }
        var createdBefore = predicate.createdBefore
        if let olderThan = predicate.olderThan {
            let limit = now.addingTimeInterval(-Double(olderThan))
            createdBefore = min(createdBefore ?? limit, limit)
        }
        var accessedBefore = predicate.accessedBefore
        if let idleFor = predicate.idleFor {
            let limit = now.addingTimeInterval(-Double(idleFor))
            accessedBefore = min(accessedBefore ?? limit, limit)
        }
        let parameters: [PostgresValue] = [
            .text(namespace.name), predicate.keys.map { .bytesArray($0) } ?? .null, .optionalText(predicate.tag),
            .optionalText(predicate.model), .optionalText(predicate.version),
            createdBefore.map { .timestamp($0) } ?? .null, accessedBefore.map { .timestamp($0) } ?? .null,
            .int(Self.evictionBatchSize), .timestamp(now),
        ]
        var total = (entries: 0, bytes: 0)
        while true {
            let row = try pool.withConnection { try $0.query(Self.evictBatch, parameters).first }
            let deleted = try row?.int("n") ?? 0
            total.entries += deleted
            total.bytes += try row?.int("bytes") ?? 0
            if deleted < Self.evictionBatchSize { return total }
        }
    }
}
