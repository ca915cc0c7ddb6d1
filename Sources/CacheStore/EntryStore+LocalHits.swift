import CacheCore
import Foundation
import Postgres

/// What a client's local tier reports it answered (`POST /v1/caches/{ns}/hits`): the entries
/// those hits were on, read without their bodies, so the access tracker counts them as any
/// hit (tokens and cost saved, the entry's hit count and last access).
extension EntryStore {
    static let selectHitSubjects = """
        SELECT id, key, content_type, identity_size, etag, model, input_tokens, output_tokens, updated_at, expires_at,
               stale_while_revalidate
        FROM entries WHERE namespace = $1 AND key = ANY($2::bytea[])
        """

    /// The stored entries among `keys` (one index probe each), with empty bodies and no
    /// metadata: enough to count a hit, nothing to answer one with. Sealed rows need no
    /// opening (their counts and model are not sealed).
    public func hitSubjects(_ namespace: Namespace, _ keys: [EntryKey]) throws -> [StoredEntry] {
        guard !keys.isEmpty else { return [] }
        return try pool.withConnection { connection in
            try connection.query(Self.selectHitSubjects, [.text(namespace.name), .bytesArray(keys.map(\.bytes))]).rows
                .map { row in
                    StoredEntry(id: Int64(try row.int("id") ?? 0), namespace: namespace.name,
                                key: try row.bytes("key") ?? [], body: [], encoding: .identity,
                                contentType: try row.string("content_type") ?? "", identitySize: try row.int("identity_size") ?? 0,
                                etag: try row.string("etag") ?? "", model: try row.string("model"), metadata: nil,
                                inputTokens: try row.int("input_tokens") ?? 0, outputTokens: try row.int("output_tokens") ?? 0,
                                updatedAt: try row.date("updated_at") ?? Date(),
                                expiresAt: try row.date("expires_at") ?? Date(),
                                staleWhileRevalidate: try row.int("stale_while_revalidate") ?? 0)
                }
        }
    }
}

/// Numbered reports, counted once: a report counts only when its `seq` is higher than the
/// reporter's last counted one (migration 0017). A retried report (its answer lost after the
/// service counted it) carries the same number and is not counted again.
extension EntryStore {
    static let claimHitReport = """
        INSERT INTO hit_reporters AS r (namespace, reporter, seq) VALUES ($1, $2, $3)
        ON CONFLICT (namespace, reporter) DO UPDATE SET seq = EXCLUDED.seq, seen_at = now()
            WHERE r.seq < EXCLUDED.seq
        RETURNING seq
        """
    /// The age is checked again on the row deleted: one a report refreshed meanwhile stays.
    static let trimHitReporters = """
        DELETE FROM hit_reporters WHERE ctid = ANY(ARRAY(
            SELECT ctid FROM hit_reporters WHERE seen_at < now() - interval '7 days' LIMIT 10000))
          AND seen_at < now() - interval '7 days'
        """

    /// True when report `seq` of `reporter` is new (and is now the one counted last); false
    /// when it, or a later one, was counted already. Committed before the report is counted:
    /// a crash between the two loses the report's hits rather than counting them twice.
    public func claimHitReport(_ namespace: Namespace, reporter: String, seq: Int) throws -> Bool {
        try pool.withConnection { connection in
            try !connection.query(Self.claimHitReport, [.text(namespace.name), .text(reporter), .int(seq)]).rows.isEmpty
        }
    }

    /// Forgets reporters unheard of for a week (a tier takes a new id each start), in batches
    /// of 10,000 (at most 100 a run). Run last by the eviction cycle.
    @discardableResult
    static func trimHitReporters(on connection: PostgresConnection) throws -> Int {
        var total = 0
        for _ in 0..<100 {
            let trimmed = try connection.query(trimHitReporters).affectedRows
            total += trimmed
            if trimmed < 10_000 { break }
        }
        return total
    }
}
