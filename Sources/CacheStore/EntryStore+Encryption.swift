import CacheCore
import Foundation
import Postgres

/// Rewriting a namespace's entries under its newest data key (`teamcache namespaces set NS
/// --encrypt` for the entries stored before, `teamcache keys rotate --reencrypt NS`).
extension EntryStore {
    /// What a re-encryption did.
    public struct Reencryption: Sendable, Equatable {
        /// Sealed again (or for the first time) under the newest key.
        public var rewritten = 0
        /// Already under the newest key, or changed by a writer meanwhile (it sealed them itself).
        public var unchanged = 0
        /// Did not open (logged and counted by the keyring): left as they are.
        public var broken = 0
    }

    static let reencryptPage = """
        SELECT id, key, body, encoding, metadata::text AS metadata, etag, updated_at::text AS updated_at FROM entries
        WHERE namespace = $1 AND key > $2 ORDER BY key LIMIT $3
        """
    /// Locks the page's rows in key order (the order every writer takes them in).
    static let lockRows = "SELECT id FROM entries WHERE id = ANY($1) ORDER BY key FOR UPDATE"
    /// Rewrites each row only if it is still the version read (ETag, encoding and write time:
    /// a writer that replaced it meanwhile sealed its own version); the timestamps stay.
    static let rewriteRows = """
        UPDATE entries e SET body = u.body, encoding = u.encoding, metadata = u.metadata::jsonb,
            stored_size = octet_length(u.body), prompt_digest = NULL
        FROM unnest($1::int8[], $2::bytea[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[])
             AS u(id, body, encoding, metadata, old_etag, old_encoding, old_updated_at)
        WHERE e.id = u.id AND e.etag = u.old_etag AND e.encoding = u.old_encoding
          AND e.updated_at = u.old_updated_at::timestamptz
        """
    static let reencryptBatch = 200
    /// For this transaction, the entry triggers count rewritten rows as rewrites, not writes
    /// (and date their size changes now; migration 0015's `tc_change_time`).
    static let notWrites = "SELECT set_config('teamcache.counting', 'rewrite', true)"

    /// Seals every entry of `namespace` under its newest data key, `reencryptBatch` rows to a
    /// short transaction, so the service goes on meanwhile; `progress` hears after each batch.
    public func reencrypt(_ namespace: Namespace, progress: (Reencryption) -> Void = { _ in }) throws -> Reencryption {
        guard let target = try keyring.sealingKey(for: namespace.name, pool, fresh: true) else {
            throw Keyring.Unavailable(namespace: namespace.name)
        }
        var report = Reencryption()
        var after: [UInt8] = []
        while true {
            let rows = try pool.withConnection {
                try $0.query(Self.reencryptPage, [.text(namespace.name), .bytes(after), .int(Self.reencryptBatch)]).rows
            }
            guard let last = try rows.last?.bytes("key") else { return report }
            after = last
            var rewrites: [(id: Int64, body: [UInt8], encoding: String, metadata: String?, etag: String, oldEncoding: String,
                            updatedAt: String)] = []
            for row in rows {
                guard let id = try row.int("id"), let key = try row.bytes("key"), let stored = try row.bytes("body"),
                      let encoding = try row.string("encoding"), let etag = try row.string("etag"),
                      let updatedAt = try row.string("updated_at") else { continue }
                if encoding.hasPrefix(Keyring.sealedPrefix), Sealing.keyID(stored[...]) == target.id {
                    report.unchanged += 1
                    continue
                }
                guard case .plain(let body, let inner, let metadata) = try keyring.open(
                    namespace: namespace.name, key: key, etag: etag, body: stored, encoding: encoding,
                    metadata: try row.string("metadata"), pool: pool) else {
                    report.broken += 1
                    continue
                }
                let sealed = try Sealing.seal(body: body, encoding: inner, metadata: metadata, namespace: namespace.name,
                                          key: key, etag: etag, with: target)
                rewrites.append((Int64(id), sealed.body, sealed.encoding, sealed.metadata, etag, encoding, updatedAt))
            }
            if !rewrites.isEmpty {
                let changed = try pool.withConnection { connection in
                    try connection.transaction { connection in
                        _ = try connection.query(Self.lockRows, [.intArray(rewrites.map(\.id))])
                        // Not writes: the history's write count is left alone (migration 0015).
                        _ = try connection.query(Self.notWrites)
                        return try connection.query(Self.rewriteRows, [
                            .intArray(rewrites.map(\.id)), .bytesArray(rewrites.map(\.body)),
                            .textArray(rewrites.map(\.encoding)), .optionalTextArray(rewrites.map(\.metadata)),
                            .textArray(rewrites.map(\.etag)), .textArray(rewrites.map(\.oldEncoding)),
                            .textArray(rewrites.map(\.updatedAt)),
                        ]).affectedRows
                    }
                }
                report.rewritten += changed
                report.unchanged += rewrites.count - changed
            }
            progress(report)
            if rows.count < Self.reencryptBatch { return report }
        }
    }
}
