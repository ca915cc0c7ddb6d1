import CacheCore
import CacheKeys
import Foundation
import Postgres

/// A group of plain or create-only writes as one set-based statement: one
/// `INSERT … ON CONFLICT DO UPDATE` over every row of the group, and one for their access
/// rows, instead of a PL/pgSQL call (a locking read, then an update or an insert) per row.
/// The group's keys are distinct (`EntryWriteBatcher` keeps a key's later writes for a
/// later group), so no row is affected twice.
///
/// Semantics are `tc_put_entry`'s:
/// - a plain write replaces whatever is there; a create-only write (`If-None-Match: *`)
///   replaces only an entry past its freshness (absent to writers), else it is
///   `precondition_failed`;
/// - a write over an expired entry is a creation (new `created_at`, outcome `created`);
/// - the hard caps are checked against the folded totals plus the group's own growth
///   (each row's body size minus the size of the row it replaces, as of the statement's
///   snapshot), so they may lag by one fold interval, as `tc_put_entry`'s do.
///
/// Rows are inserted in (namespace, key) byte order, so groups over the same keys take
/// their row locks in one order (docs/consistency.md).
enum EntryGroupWrite {
    /// What a write over an existing row takes from the row it writes (`excluded`): the
    /// import's chunk (`EntryImportGroup`) and `tc_write_group` (migration 0019, a copy: a test
    /// holds them together); each adds its own creation time and writer.
    static let replacedColumns = """
        body = excluded.body, encoding = excluded.encoding, content_type = excluded.content_type,
        identity_size = excluded.identity_size, stored_size = excluded.stored_size, etag = excluded.etag,
        model = excluded.model, version = excluded.version, prompt_digest = excluded.prompt_digest,
        tags = excluded.tags, metadata = excluded.metadata, input_tokens = excluded.input_tokens,
        output_tokens = excluded.output_tokens, updated_at = excluded.updated_at, expires_at = excluded.expires_at,
        stale_while_revalidate = excluded.stale_while_revalidate
        """

    /// The statement is `tc_write_group` (migration 0019): a function, so that it runs one
    /// cached generic plan. Sent as a prepared statement of its own, it was planned anew for
    /// nearly every group under a light load (PostgreSQL keeps planning a prepared statement
    /// whose generic plan, blind to the arrays' lengths, estimates dearer than its first five
    /// runs: any group of fewer than ~10 writes), at 0.5-1 ms a group
    /// (bench/results/2026-12-07-writes-9.md).
    static let statement = """
        SELECT ordinal, entry_id, expires_at, created, admitted
        FROM tc_write_group($1::text[], $2::bytea[], $3::bytea[], $4::text[], $5::text[], $6::int8[], $7::text[],
                            $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::int8[], $14::int8[],
                            $15::int8[], $16::int8[], $17::timestamptz, $18::int8, $19::int8, $20::float8, $21::bool,
                            $22::int4[])
        ORDER BY ordinal
        """

    /// Commits `writes` (distinct keys, all plain or all create-only) in one statement and
    /// returns their outcomes in order.
    static func run(_ writes: [EntryWrite], createOnly: Bool, store: EntryStore) throws -> [WriteOutcome] {
        let now = store.clock.now()
        let parameters: [PostgresValue] = [
            .textArray(writes.map(\.namespace.name)), .bytesArray(writes.map(\.key.bytes)),
            .bytesArray(writes.map(\.storedBytes)), .textArray(writes.map(\.storedEncoding)),
            .textArray(writes.map(\.contentType)), .intArray(writes.map { Int64($0.body.identitySize) }),
            .textArray(writes.map(\.body.etag)), .optionalTextArray(writes.map(\.model)),
            .optionalTextArray(writes.map(\.version)), .optionalTextArray(writes.map(\.promptDigest)),
            .textArray(writes.map { jsonArray($0.tags) }), .optionalTextArray(writes.map(\.storedMetadata)),
            .intArray(writes.map { Int64($0.inputTokens) }), .intArray(writes.map { Int64($0.outputTokens) }),
            .optionalIntArray(writes.map { $0.ttlSeconds.map(Int64.init) }),
            .optionalIntArray(writes.map(\.writerTokenID)),
            store.writeStamp, .int(store.policy.defaultTTL), .int(store.policy.storeHardCap),
            .double(store.policy.hardCapRatio), .bool(createOnly),
            .intArray(writes.map { Int64($0.staleWhileRevalidate) }),
        ]
        let result = try store.pool.withConnection { try $0.query(statement, parameters) }
        guard result.rowCount == writes.count else {
            throw PostgresError(.decoding, serverMessage: "a group write returned \(result.rowCount) rows")
        }
        return try result.rows.map { row in
            if try row.int("entry_id") != nil {
                let expiresAt = try row.date("expires_at") ?? now
                return try row.bool("created") == true ? .created(expiresAt: expiresAt) : .replaced(expiresAt: expiresAt)
            }
            return try row.bool("admitted") == true ? .preconditionFailed : .storeFull
        }
    }

    static func jsonArray(_ items: [String]) -> String {
        items.isEmpty ? "[]" : JSONValue.array(items.map { .string($0) }).serialized
    }
}
