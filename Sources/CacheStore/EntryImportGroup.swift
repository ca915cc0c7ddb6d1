import CacheCore
import Foundation
import Postgres

/// A chunk of an import as one set-based statement: the rows there read, the policy,
/// idempotence and cap checks decided for every entry at once, then one ordered
/// `INSERT … ON CONFLICT DO UPDATE` and the access rows, instead of a `tc_import_entry` call
/// (and its round trip) per entry: that was ~275 µs an entry of PostgreSQL's time and the
/// wire's (bench/dump.sh).
///
/// Semantics are `tc_import_entry`'s (migration 0011), entry for entry:
/// - `expired`: the entry's expiry and window have passed; nothing is written;
/// - `unchanged`: the row there already is the dump's entry (ETag, update time, expiry);
/// - `skipped`: a fresh row is kept by the policy (`skip`, or `newer` and not older);
/// - `imported`: written over the row (hit count and access time raised, never lowered, and
///   only when the access flush does not hold the access row), or inserted with one.
///
/// Locks, as every writer takes them (docs/consistency.md): only by the write, one row at a
/// time in (namespace, key) byte order, new keys and existing ones alike (the input comes
/// sorted). The rows are read without a lock first; an entry the chunk leaves alone
/// (unchanged, skipped, expired) is decided on that read, as if the import ran just before
/// any writer that committed since. A row is written over only if it is still the version
/// read (its `xmin`); a key absent when read and inserted meanwhile is not written either.
///
/// Where the set cannot be exact it answers the entry as `retry`; the statement is then rolled
/// back (a savepoint) and the caller imports the whole chunk entry by entry, in key order:
/// - a cap: when the chunk's growing writes together could pass one (the totals with the
///   pending deltas, this transaction's own among them, as the function counts them). Entry
///   by entry, a refused entry adds nothing and a later, smaller one may still fit; a set
///   cannot say that, so near a cap the statement writes nothing;
/// - a row another writer changed or inserted since the read.
///
/// The keys of one chunk are distinct and in key order, the lock order (`inKeyOrder`): a chunk
/// with a key twice (one statement cannot write a row twice) goes entry by entry.
enum EntryImportGroup {
    static let statement = """
        WITH input AS (
            SELECT b.ordinal, b.namespace, b.key, b.body, b.encoding, b.content_type, b.identity_size, b.etag,
                   b.model, b.version, b.prompt_digest,
                   CASE WHEN b.tags = '[]' THEN '{}'::text[] ELSE ARRAY(SELECT jsonb_array_elements_text(b.tags::jsonb)) END AS tags,
                   b.metadata::jsonb AS metadata, b.input_tokens, b.output_tokens,
                   least(b.created_at, n.now) AS created_at,
                   least(b.updated_at, n.now) AS updated_at,
                   coalesce(b.expires_at,
                            n.now + make_interval(secs => coalesce(s.default_ttl_seconds, $19::int8)::float8)) AS expires_at,
                   b.stale_while_revalidate, b.hit_count,
                   coalesce(least(b.last_accessed_at, n.now), n.now) AS last_accessed_at,
                   s.max_bytes AS quota, n.now
            FROM (SELECT coalesce($18::timestamptz, now()) AS now) n
            CROSS JOIN unnest($1::text[], $2::bytea[], $3::bytea[], $4::text[], $5::text[], $6::int8[], $7::text[],
                              $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::int8[], $14::int8[],
                              $15::timestamptz[], $16::timestamptz[], $17::timestamptz[], $22::int4[], $23::int8[],
                              $24::timestamptz[])
                 WITH ORDINALITY AS b(namespace, key, body, encoding, content_type, identity_size, etag, model, version,
                                      prompt_digest, tags, metadata, input_tokens, output_tokens, created_at,
                                      updated_at, expires_at, stale_while_revalidate, hit_count, last_accessed_at,
                                      ordinal)
            -- LATERAL: one index probe per row (a generic plan knows nothing of the arrays' lengths).
            LEFT JOIN LATERAL (SELECT default_ttl_seconds, max_bytes FROM namespace_settings
                               WHERE namespace = b.namespace) s ON true),
        decided AS (
            SELECT i.*, f.id AS old_id, f.xmin AS old_version,
                   CASE WHEN i.expires_at + make_interval(secs => i.stale_while_revalidate::float8) <= i.now THEN 'expired'
                        WHEN f.id IS NULL THEN 'write'
                        WHEN f.etag = i.etag AND f.updated_at = i.updated_at AND f.expires_at = i.expires_at THEN 'unchanged'
                        -- An expired row is absent to every write (0003), so to an import too.
                        WHEN f.expires_at > i.now AND ($21::text = 'skip'
                                                       OR ($21::text = 'newer' AND f.updated_at >= i.updated_at)) THEN 'skipped'
                        ELSE 'write' END AS verdict,
                   octet_length(i.body) - coalesce(f.stored_size, 0) AS growth
            -- What the statement's snapshot holds, without a lock; `xmin` names the version. One
            -- index probe per entry, joined where it is probed: a separate CTE joined back on the
            -- ordinal was planned as a nested loop over both (500 × 500 comparisons a chunk, 22 of
            -- a re-import's 24 ms), its row count being unknown to the planner.
            FROM input i
            LEFT JOIN LATERAL (SELECT e.id, e.stored_size, e.etag, e.updated_at, e.expires_at, e.xmin FROM entries e
                               WHERE e.namespace = i.namespace AND e.key = i.key) f ON true),
        pending AS MATERIALIZED (
            -- Totals as tc_import_entry reads them: folded, plus every delta not folded yet.
            SELECT (SELECT coalesce(sum(stored_bytes), 0) FROM namespace_counters WHERE namespace = '')
                   + (SELECT coalesce(sum(stored_bytes), 0) FROM counter_deltas) AS store),
        namespace_totals AS MATERIALIZED (
            SELECT q.namespace,
                   (SELECT coalesce(sum(c.stored_bytes), 0) FROM namespace_counters c WHERE c.namespace = q.namespace)
                   + (SELECT coalesce(sum(d.stored_bytes), 0) FROM counter_deltas d WHERE d.namespace = q.namespace) AS total
            FROM (SELECT DISTINCT namespace FROM decided WHERE quota IS NOT NULL) q),
        refusal AS (
            -- Refused when the chunk's growth could pass a cap: the sum of its growing writes
            -- bounds every running sum in key order from above, so within the caps no entry can
            -- pass one. Past them the chunk goes entry by entry, which decides each exactly
            -- (a refused entry adds nothing, a later smaller one may fit): a bound, not the
            -- running sums, spares two window sorts a chunk (~1.5 ms of 500 entries).
            SELECT coalesce(bool_or(($20::int8 > 0 AND g.store_growth > 0 AND p.store + g.store_growth > $20::int8)
                                    OR (n.quota IS NOT NULL AND n.growth > 0
                                        AND t.total + n.growth > n.quota * $25::float8)),
                            false) AS refused
            FROM (SELECT coalesce(sum(d.growth) FILTER (WHERE d.verdict = 'write' AND d.growth > 0), 0) AS store_growth
                  FROM decided d) g
            CROSS JOIN pending p
            LEFT JOIN (SELECT d.namespace, max(d.quota) AS quota,
                              coalesce(sum(d.growth) FILTER (WHERE d.verdict = 'write' AND d.growth > 0), 0) AS growth
                       FROM decided d GROUP BY d.namespace) n ON true
            LEFT JOIN namespace_totals t ON t.namespace = n.namespace),
        expected AS MATERIALIZED (
            -- The versions read of the rows to write over, keyed by namespace and key: looked up
            -- per conflict (a subquery over `decided` there would scan it for each).
            SELECT jsonb_object_agg(d.namespace || '/' || encode(d.key, 'hex'), d.old_version::text) AS versions
            FROM decided d WHERE d.verdict = 'write' AND d.old_version IS NOT NULL),
        written AS (
            INSERT INTO entries AS e (namespace, key, body, encoding, content_type, identity_size, stored_size, etag,
                                      model, version, prompt_digest, tags, metadata, input_tokens, output_tokens,
                                      created_at, updated_at, expires_at, writer_token_id, stale_while_revalidate)
            SELECT d.namespace, d.key, d.body, d.encoding, d.content_type, d.identity_size, octet_length(d.body),
                   d.etag, d.model, d.version, d.prompt_digest, d.tags, d.metadata, d.input_tokens, d.output_tokens,
                   d.created_at, d.updated_at, d.expires_at, NULL, d.stale_while_revalidate
            FROM decided d, refusal r
            WHERE NOT r.refused AND d.verdict = 'write'
            -- Key order, the lock order: the arrays come sorted by (namespace, key) bytes (`run`
            -- checks), so their ordinals are it. The sort still moves the wide rows, but compares
            -- integers, not text and bytea: 0.26-0.28 ms a 500-entry chunk against 0.17-0.70 ms.
            ORDER BY d.ordinal
            ON CONFLICT ON CONSTRAINT entries_namespace_key DO UPDATE
               SET \(EntryGroupWrite.replacedColumns), created_at = excluded.created_at, writer_token_id = NULL
               -- Only the version read (a key absent when read has none: not written over).
               WHERE e.xmin::text = (SELECT x.versions ->> (e.namespace || '/' || encode(e.key, 'hex')) FROM expected x)
            RETURNING e.id, e.namespace, e.key, e.xmax = 0 AS inserted),
        raised AS (
            -- As tc_import_entry: skipped rather than waited for while the access flush holds it.
            UPDATE entry_access a
            SET hit_count = greatest(a.hit_count, d.hit_count),
                last_accessed_at = greatest(a.last_accessed_at, d.last_accessed_at)
            FROM written w JOIN decided d ON d.namespace = w.namespace AND d.key = w.key
            WHERE NOT w.inserted AND a.entry_id = w.id
              AND a.entry_id IN (SELECT l.entry_id FROM entry_access l JOIN written u ON l.entry_id = u.id
                                 WHERE NOT u.inserted ORDER BY l.entry_id FOR UPDATE OF l SKIP LOCKED)),
        accessed AS (
            INSERT INTO entry_access (entry_id, namespace, hit_count, last_accessed_at)
            SELECT w.id, d.namespace, d.hit_count, d.last_accessed_at
            FROM written w JOIN decided d ON d.namespace = w.namespace AND d.key = w.key
            WHERE w.inserted
            ORDER BY w.id)
        SELECT d.ordinal,
               CASE WHEN r.refused THEN 'retry'
                    WHEN d.verdict <> 'write' THEN d.verdict
                    WHEN w.id IS NOT NULL THEN 'imported'
                    ELSE 'retry' END AS outcome
        FROM decided d CROSS JOIN refusal r
        LEFT JOIN written w ON w.namespace = d.namespace AND w.key = d.key
        ORDER BY d.ordinal
        """

    /// An entry as the import stores it (sealed when its namespace is encrypted), with the
    /// dump's own fields.
    struct Stored {
        let entry: DumpedEntry
        let body: [UInt8]
        let encoding: String
        let metadata: String?
        let promptDigest: String?
    }

    /// Runs the statement over `entries` (sorted by key) from a savepoint, in the caller's
    /// transaction: an outcome per entry, in order; or nil, with nothing of it kept, when the
    /// chunk must go entry by entry. So it is when the set could not be exact (rolled back to
    /// the savepoint), and without a statement at all when a key comes twice (the statement
    /// writes in the arrays' order, which must be strictly the lock order) or a time cannot be
    /// sent exactly as PostgreSQL reads it (more than six fractional digits, a form only the
    /// formatter takes: `tc_import_entry` reads each entry's text as it always has).
    static func run(_ entries: [Stored], policy conflict: ImportConflictPolicy, store: EntryStore,
                    on connection: PostgresConnection) throws -> [ImportOutcome]? {
        guard Self.inKeyOrder(entries), let created = Self.micros(entries.map(\.entry.createdAt)),
              let updated = Self.micros(entries.map(\.entry.updatedAt)),
              let expires = Self.micros(entries.map(\.entry.expiresAt)),
              let accessed = Self.micros(entries.map(\.entry.lastAccessedAt)) else { return nil }
        let parameters: [PostgresValue] = [
            .textArray(entries.map(\.entry.namespace)), .bytesArray(entries.map(\.entry.key)),
            .bytesArray(entries.map(\.body)), .textArray(entries.map(\.encoding)),
            .textArray(entries.map(\.entry.contentType)), .intArray(entries.map { Int64($0.entry.identitySize) }),
            .textArray(entries.map(\.entry.etag)), .optionalTextArray(entries.map(\.entry.model)),
            .optionalTextArray(entries.map(\.entry.version)), .optionalTextArray(entries.map(\.promptDigest)),
            .textArray(entries.map { EntryGroupWrite.jsonArray($0.entry.tags) }), .optionalTextArray(entries.map(\.metadata)),
            .intArray(entries.map { Int64($0.entry.inputTokens) }), .intArray(entries.map { Int64($0.entry.outputTokens) }),
            .optionalTimestampMicrosArray(created), .optionalTimestampMicrosArray(updated),
            .optionalTimestampMicrosArray(expires), store.writeStamp, .int(store.policy.defaultTTL),
            .int(store.policy.storeHardCap), .text(conflict.rawValue),
            .intArray(entries.map { Int64($0.entry.staleWhileRevalidate) }), .intArray(entries.map { Int64($0.entry.hitCount) }),
            .optionalTimestampMicrosArray(accessed), .double(store.policy.hardCapRatio),
        ]
        _ = try connection.query("SAVEPOINT import_group")
        let result = try connection.query(statement, parameters)
        guard result.rowCount == entries.count else {
            throw PostgresError(.decoding, serverMessage: "an import group returned \(result.rowCount) rows")
        }
        let outcomes = try result.rows.map { row -> ImportOutcome? in
            guard let text = try row.string("outcome") else {
                throw PostgresError(.decoding, serverMessage: "an import group gave no outcome")
            }
            if text == "retry" { return nil }
            guard let outcome = ImportOutcome(rawValue: text) else {
                throw PostgresError(.decoding, serverMessage: "an import group gave outcome \(text)")
            }
            return outcome
        }
        // Where the set cannot be exact, none of it stays.
        guard outcomes.allSatisfy({ $0 != nil }) else {
            _ = try connection.query("ROLLBACK TO SAVEPOINT import_group")
            return nil
        }
        return outcomes.compactMap { $0 }
    }

    /// Distinct keys in `KeyOrder`, the lock order.
    static func inKeyOrder(_ entries: [Stored]) -> Bool {
        zip(entries, entries.dropFirst()).allSatisfy { earlier, later in
            KeyOrder.precedes(earlier.entry.namespace, earlier.entry.key, later.entry.namespace, later.entry.key)
        }
    }

    /// Each time as PostgreSQL's microseconds (nil stays NULL); nil when one cannot be exact.
    private static func micros(_ texts: [String?]) -> [Int64?]? {
        var values = [Int64?]()
        values.reserveCapacity(texts.count)
        for text in texts {
            guard let text else { values.append(nil); continue }
            guard let value = RFC3339.postgresMicroseconds(text) else { return nil }
            values.append(value)
        }
        return values
    }
}
