import CacheCore
import Foundation
import Postgres

/// The entry browser's listing. Looking is not a lookup: nothing is counted and no access row
/// moves.
///
/// Bounded work per page whatever the question: one index range of (namespace, key), from the
/// page's start to the prefix's end, always given as bounds (a generic plan of a prepared
/// statement cannot use `$3 IS NULL OR key < $3` as one), and at most `scanLimit` rows of it
/// read. Tag and model filter those rows; when they leave the page short, the page says where
/// the scan stopped, and the next one goes on from there.
extension EntryStore {
    static let listEntriesStatement = """
        WITH scanned AS (
            SELECT e.id, e.key, e.model, e.tags, e.content_type, e.identity_size, e.stored_size, e.created_at,
                   e.updated_at, e.expires_at
            FROM entries e WHERE e.namespace = $1 AND e.key >= $2 AND e.key < $3
            ORDER BY e.key LIMIT $7),
        matched AS (
            SELECT s.*, coalesce(a.hit_count, 0)::bigint AS hit_count, a.last_accessed_at
            FROM scanned s LEFT JOIN entry_access a ON a.entry_id = s.id
            WHERE ($4::text IS NULL OR s.tags @> ARRAY[$4::text]) AND ($5::text IS NULL OR s.model = $5::text)
            ORDER BY s.key LIMIT $6)
        SELECT false AS cursor, key, model, tags, content_type, identity_size, stored_size, created_at, updated_at,
               expires_at, hit_count, last_accessed_at, 0::bigint AS scanned
        FROM matched
        UNION ALL
        SELECT true, (SELECT key FROM scanned ORDER BY key DESC LIMIT 1), NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
               (SELECT count(*) FROM scanned)::bigint
        ORDER BY 1, 2
        """
    /// Rows of the key range one page reads at most.
    static let scanLimit = 2000
    /// Past every key (keys are at most 512 bytes): the bound of a range with no end.
    static let pastEveryKey = [UInt8](repeating: 0xFF, count: EntryKey.maxBytes + 1)

    public func listEntries(_ namespace: Namespace, _ query: EntryQuery) throws -> EntryPage {
        // The page starts at the later of the prefix and the first key after `after`, which is
        // `after` followed by 0x00 (no key holds NUL).
        var start = query.after ?? []
        if query.after != nil { start.append(0) }
        if let prefix = query.prefix, start.lexicographicallyPrecedes(prefix) { start = prefix }
        let end = query.prefix == nil ? Self.pastEveryKey : query.prefixEnd ?? Self.pastEveryKey
        let limit = min(max(query.limit, 0), EntryQuery.maxLimit)
        return try pool.withConnection { connection in
            var page = EntryPage()
            for row in try connection.query(Self.listEntriesStatement, [
                .text(namespace.name), .bytes(start), .bytes(end), .optionalText(query.tag), .optionalText(query.model),
                .int(limit), .int(Self.scanLimit),
            ]).rows {
                if try row.bool("cursor") == true {
                    // A short page of a full scan: more keys lie past where it stopped.
                    if page.entries.count < limit, try row.int("scanned") ?? 0 >= Self.scanLimit {
                        page.next = try row.bytes("key")
                    }
                    continue
                }
                page.entries.append(try Self.listing(row))
            }
            if page.entries.count == limit, let last = page.entries.last { page.next = last.key }
            return page
        }
    }

    static func listing(_ row: PostgresRow) throws -> EntryListing {
        EntryListing(key: try row.bytes("key") ?? [], model: try row.string("model"),
                     tags: try row.stringArray("tags") ?? [], contentType: try row.string("content_type") ?? "",
                     identitySize: try row.int("identity_size") ?? 0, storedSize: try row.int("stored_size") ?? 0,
                     createdAt: try row.date("created_at") ?? .distantPast,
                     updatedAt: try row.date("updated_at") ?? .distantPast,
                     expiresAt: try row.date("expires_at") ?? .distantPast, hitCount: try row.int("hit_count") ?? 0,
                     lastAccessedAt: try row.date("last_accessed_at"))
    }
}
