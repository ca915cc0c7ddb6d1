import CacheCore
import Foundation
import Postgres

extension DumpedEntry {
    /// The columns `init(row:)` reads. Times come as binary `timestamptz` and are written
    /// in the dump's form here (`RFC3339.formatPostgresMicroseconds`), not by `to_char`.
    static let columns = """
        e.namespace, e.key, e.body, e.encoding, e.content_type, e.identity_size, e.etag, e.model, e.version,
        e.prompt_digest, e.tags, e.metadata::text AS metadata, e.input_tokens, e.output_tokens,
        e.created_at, e.updated_at, e.expires_at,
        e.expires_at + make_interval(secs => e.stale_while_revalidate::float8) AS stale_until,
        e.stale_while_revalidate, coalesce(a.hit_count, 0) AS hit_count, a.last_accessed_at
        """

    /// A time column in the dump's form: `to_char((t) AT TIME ZONE 'UTC',
    /// 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`, written here for years 1 to 9999 and asked of
    /// PostgreSQL for any other (an imported time can be any it accepts).
    static func dumpTime(_ row: PostgresRow, _ name: String, pool: ConnectionPool) throws -> String? {
        guard let micros = try row.postgresMicroseconds(name) else { return nil }
        if let text = RFC3339.formatPostgresMicroseconds(micros) { return text }
        return try pool.withConnection { connection in
            try connection.query(rareDumpTime, [.optionalTimestampMicrosArray([micros])]).rows.first?.string("text")
        }
    }

    static let rareDumpTime = """
        SELECT to_char(($1::timestamptz[])[1] AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS text
        """

    /// An export row (`columns`), opened if sealed: a dump holds what the entry answers, and
    /// an import seals it again under the target namespace's key. nil when a sealed entry
    /// does not open (the keyring logs and counts it; the export goes on without it).
    init?(row: PostgresRow, keyring: Keyring, pool: ConnectionPool) throws {
        guard let namespace = try row.string("namespace"), let key = try row.bytes("key"),
              let stored = try row.bytes("body"), let storedEncoding = try row.string("encoding"),
              let contentType = try row.string("content_type"), let identitySize = try row.int("identity_size"),
              let etag = try row.string("etag"), let createdAt = try Self.dumpTime(row, "created_at", pool: pool),
              let updatedAt = try Self.dumpTime(row, "updated_at", pool: pool),
              let expiresAt = try Self.dumpTime(row, "expires_at", pool: pool) else {
            throw PostgresError(.decoding, serverMessage: "entry row has unexpected NULLs")
        }
        guard case .plain(let body, let encoding, let metadata) = try keyring.open(
            namespace: namespace, key: key, etag: etag, body: stored, encoding: storedEncoding,
            metadata: try row.string("metadata"), pool: pool) else { return nil }
        self.init(namespace: namespace, key: key, body: body, encoding: encoding, contentType: contentType,
                  identitySize: identitySize, etag: etag, model: try row.string("model"),
                  version: try row.string("version"), promptDigest: try row.string("prompt_digest"),
                  tags: try row.stringArray("tags") ?? [], metadata: metadata,
                  inputTokens: try row.int("input_tokens") ?? 0, outputTokens: try row.int("output_tokens") ?? 0,
                  createdAt: createdAt, updatedAt: updatedAt, expiresAt: expiresAt,
                  staleWhileRevalidate: max(0, try row.int("stale_while_revalidate") ?? 0),
                  hitCount: max(0, try row.int("hit_count") ?? 0), lastAccessedAt: try Self.dumpTime(row, "last_accessed_at", pool: pool),
                  staleUntil: try Self.dumpTime(row, "stale_until", pool: pool))
    }
}
