import CacheCore
import Foundation
import Postgres

/// The entry browser's listing: one index range of (namespace, key) from the page's start to
/// the prefix's end, filtered by tag or model, at most `EntryQuery.maxLimit` rows. Reads
/// only: looking is not a lookup, so nothing is counted and no access row moves.
extension EntryStore {
    static let listEntriesStatement = """
        SELECT e.key, e.model, e.tags, e.content_type, e.identity_size, e.stored_size, e.created_at, e.updated_at,
               e.expires_at, coalesce(a.hit_count, 0)::bigint AS hit_count, a.last_accessed_at
        FROM entries e LEFT JOIN entry_access a ON a.entry_id = e.id
        WHERE e.namespace = $1 AND e.key > $2 AND ($3::bytea IS NULL OR e.key >= $3)
          AND ($4::bytea IS NULL OR e.key < $4)
          AND ($5::text IS NULL OR e.tags @> ARRAY[$5::text]) AND ($6::text IS NULL OR e.model = $6::text)
        ORDER BY e.key LIMIT $7
        """

    public func listEntries(_ namespace: Namespace, _ query: EntryQuery) throws -> [EntryListing] {
        // With a prefix but no end (all 0xFF bytes), `key >= prefix` alone bounds it: nothing sorts past it but itself.
        let end: PostgresValue = query.prefixEnd.map { .bytes($0) } ?? .null
        return try pool.withConnection { connection in
            try connection.query(Self.listEntriesStatement, [
                .text(namespace.name), .bytes(query.after ?? []), query.prefix.map { .bytes($0) } ?? .null, end,
                .optionalText(query.tag), .optionalText(query.model), .int(min(max(query.limit, 0), EntryQuery.maxLimit)),
            ]).rows.map { row in
                EntryListing(key: try row.bytes("key") ?? [], model: try row.string("model"),
                             tags: try row.stringArray("tags") ?? [], contentType: try row.string("content_type") ?? "",
                             identitySize: try row.int("identity_size") ?? 0, storedSize: try row.int("stored_size") ?? 0,
                             createdAt: try row.date("created_at") ?? .distantPast,
                             updatedAt: try row.date("updated_at") ?? .distantPast,
                             expiresAt: try row.date("expires_at") ?? .distantPast, hitCount: try row.int("hit_count") ?? 0,
                             lastAccessedAt: try row.date("last_accessed_at"))
            }
        }
    }
}
