import CacheCore
import Foundation
import Postgres

/// Moving entries in and out whole (`teamcache export` / `import`).
extension EntryStore {
    /// Keys in (namespace, key) order after a position, with their stored sizes: the export
    /// walks the unique index in pages and never holds more than a page of bodies. One
    /// statement per combination of filters, each a plain index range: a prepared statement
    /// with `$n IS NULL OR …` would, once PostgreSQL switches it to a generic plan, lose the
    /// range and rescan the index from its start for every page.
    static func exportKeys(namespace: Bool, since: Bool, after: Bool) -> String {
        var conditions: [String] = []
        if namespace { conditions.append("namespace = $1") }
        if after { conditions.append(namespace ? "key > $2" : "(namespace, key) > ($1, $2)") }
        let next = 1 + (namespace ? 1 : 0) + (after ? (namespace ? 1 : 2) : 0)
        if since { conditions.append("updated_at >= $\(next)::text::timestamptz") }
        let filter = conditions.isEmpty ? "" : "WHERE " + conditions.joined(separator: " AND ")
        return "SELECT id, namespace, key, stored_size FROM entries \(filter) ORDER BY namespace, key "
            + "LIMIT $\(next + (since ? 1 : 0))"
    }

    static let exportEntries = """
        SELECT \(DumpedEntry.columns) FROM entries e LEFT JOIN entry_access a ON a.entry_id = e.id
        WHERE e.id = ANY($1) ORDER BY e.namespace, e.key
        """
    /// For the import's transaction: its writes are dated now in the history (migration 0015).
    static let importing = "SELECT set_config('teamcache.counting', 'import', true)"
    static let importEntry = """
        SELECT tc_import_entry($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12::text::jsonb, $13, $14,
            least($15::text::timestamptz, coalesce($22::timestamptz, now())),
            least($16::text::timestamptz, coalesce($22::timestamptz, now())), $17::text::timestamptz, $18::int4, $19,
            least($20::text::timestamptz, coalesce($22::timestamptz, now())), $21, coalesce($22::timestamptz, now()),
            $23, $24, $25) AS outcome
        """

    /// Keys per page of the export walk, and bodies per fetch at most (by stored bytes).
    static let exportPage = 1000
    static let exportBytes = 16 * 1024 * 1024

    /// Every entry (of `namespace`, updated since `since`), in (namespace, key) order, handed
    /// to `emit` one at a time. The next page is read on a background queue while this one is
    /// emitted (writing the lines was half an export's time, and the database sat idle
    /// through it). Memory: two pages, each at most `exportBytes` of bodies (or one body, if
    /// larger). An entry written meanwhile is exported as it is when its page is read; one
    /// deleted meanwhile is left out.
    public func export(namespace: Namespace?, since: String?, _ emit: (DumpedEntry) throws -> Void) throws {
        let read = { [self] (after: (namespace: String, key: [UInt8])?) in
            Prefetch { try self.readExportPage(namespace: namespace, since: since, after: after,
                                               limit: Self.exportPage, byteBudget: Self.exportBytes) }
        }
        var next: Prefetch<ExportEntries>? = read(nil)
        while let pending = next {
            let page = try pending.value()
            next = page.more ? page.last.map(read) : nil
            for entry in page.entries { try emit(entry) }
        }
    }

    /// One page of the export, read and opened: its entries, where the next page starts
    /// (`last`), and whether one may follow (`more`).
    struct ExportEntries: Sendable {
        let entries: [DumpedEntry]
        let last: (namespace: String, key: [UInt8])?
        let more: Bool
    }

    /// Up to `limit` entries after `after`; past the first, only while their bodies fit
    /// `byteBudget` and `exportBytes` (one fetch of bodies a page).
    private func readExportPage(namespace: Namespace?, since: String?, after: (namespace: String, key: [UInt8])?,
                               limit: Int, byteBudget: Int) throws -> ExportEntries {
        let keys = try exportKeyPage(namespace: namespace, since: since, after: after, limit: limit)
        let budget = min(byteBudget, Self.exportBytes)
        var ids: [Int64] = [], bytes = 0
        var more = keys.full
        for key in keys.rows {
            // A page ends early once its bodies pass the budget: the next page starts here.
            if !ids.isEmpty && bytes + key.size > budget {
                more = true
                break
            }
            ids.append(key.id)
            bytes += key.size
        }
        let rows = ids.isEmpty ? [] : try pool.withConnection { try $0.query(Self.exportEntries, [.intArray(ids)]).rows }
        let last = ids.isEmpty ? nil : keys.rows[ids.count - 1]
        return ExportEntries(entries: try rows.compactMap { try DumpedEntry(row: $0, keyring: keyring, pool: pool) },
                             last: last.map { ($0.namespace, $0.key) }, more: more)
    }

    /// Keys after `after`, with their stored sizes; `full`: the page was as long as asked.
    private func exportKeyPage(namespace: Namespace?, since: String?, after: (namespace: String, key: [UInt8])?,
                               limit: Int) throws -> (rows: [(id: Int64, size: Int, namespace: String, key: [UInt8])], full: Bool) {
        var parameters: [PostgresValue] = namespace.map { [.text($0.name)] } ?? []
        if let after {
            if namespace == nil { parameters.append(.text(after.namespace)) }
            parameters.append(.bytes(after.key))
        }
        if let since { parameters.append(.text(since)) }
        let pageSize = min(max(1, limit), Self.exportPage)
        parameters.append(.int(pageSize))
        let sql = Self.exportKeys(namespace: namespace != nil, since: since != nil, after: after != nil)
        let page = try pool.withConnection { try $0.query(sql, parameters).rows }
        let rows = try page.compactMap { row -> (id: Int64, size: Int, namespace: String, key: [UInt8])? in
            guard let id = try row.int("id"), let size = try row.int("stored_size"),
                  let rowNamespace = try row.string("namespace"), let key = try row.bytes("key") else { return nil }
            return (Int64(id), size, rowNamespace, key)
        }
        return (rows, page.count == pageSize)
    }

    /// One page of the export: up to `limit` entries after `after` (and, past the first,
    /// only while their bodies fit `byteBudget`, and 16 MiB), handed to `emit`. `last`: the
    /// position to go on from; `more`: whether entries may follow it.
    @discardableResult
    public func exportPage(namespace: Namespace?, since: String?, after: (namespace: String, key: [UInt8])?,
                           limit: Int, byteBudget: Int, _ emit: (DumpedEntry) throws -> Void) throws
        -> (last: (namespace: String, key: [UInt8])?, more: Bool) {
        let page = try readExportPage(namespace: namespace, since: since, after: after, limit: limit, byteBudget: byteBudget)
        for entry in page.entries { try emit(entry) }
        return (page.last, page.more)
    }

    /// Imports `entries` in one transaction, taking their rows in (namespace, key) order (the
    /// lock order every writer keeps). The outcomes come back in the order given. A statement
    /// the server rejects rolls the whole transaction back; the caller then imports the
    /// entries one at a time to find the one at fault.
    public func importEntries(_ entries: [DumpedEntry], policy conflict: ImportConflictPolicy) throws -> [ImportOutcome] {
        // Whatever was imported (an unknown outcome may have committed), this process's kept
        // copies of each namespace go; other replicas hear of each key from its notification.
        defer { for namespace in Set(entries.map(\.namespace)) { localChanges.changed(namespace, nil) } }
        return try forgettingStaleSealingKeys { try importSorted(entries, conflict) }
    }

    private func importSorted(_ entries: [DumpedEntry], _ conflict: ImportConflictPolicy) throws -> [ImportOutcome] {
        // Ties (one key twice, as a --namespace merge makes) keep the input's order: the later line wins.
        let order = entries.indices.sorted { left, right in
            let (a, b) = (entries[left], entries[right])
            if KeyOrder.precedes(a.namespace, a.key, b.namespace, b.key) { return true }
            if KeyOrder.precedes(b.namespace, b.key, a.namespace, a.key) { return false }
            return left < right
        }
        // Sealed as every write to an encrypted namespace is (keys read before the transaction).
        var sealing: [String: Keyring.DataKey?] = [:]
        for entry in entries where sealing[entry.namespace] == nil {
            sealing[entry.namespace] = .some(try keyring.sealingKey(for: entry.namespace, pool))
        }
        let stored = try order.map { index in try sealed(entries[index], with: sealing[entries[index].namespace] ?? nil) }
        return try pool.withConnection { connection in
            try connection.transaction { connection in
                // Imported rows carry the dump's write times: the history counts them now.
                _ = try connection.query(Self.importing)
                var outcomes = [ImportOutcome?](repeating: nil, count: entries.count)
                // One statement; or, where it cannot be (a key twice) or was not exact (nothing of
                // it kept), entry by entry, taking the locks in key order from the first.
                if let group = try EntryImportGroup.run(stored, policy: conflict, store: self, on: connection) {
                    for (position, outcome) in group.enumerated() { outcomes[order[position]] = outcome }
                }
                for (position, index) in order.enumerated() where outcomes[index] == nil {
                    let text = try connection.query(Self.importEntry, parameters(stored[position], conflict))
                        .first?.string("outcome")
                    guard let outcome = text.flatMap(ImportOutcome.init) else {
                        throw PostgresError(.decoding, serverMessage: "tc_import_entry gave no outcome")
                    }
                    outcomes[index] = outcome
                }
                return outcomes.map { $0 ?? .skipped }
            }
        }
    }

    /// `entry` as stored: sealed under its namespace's key when it has one (its prompt digest
    /// then not kept, migration 0014).
    private func sealed(_ entry: DumpedEntry, with dataKey: Keyring.DataKey?) throws -> EntryImportGroup.Stored {
        guard let dataKey else {
            return EntryImportGroup.Stored(entry: entry, body: entry.body, encoding: entry.encoding.rawValue,
                                           metadata: entry.metadata, promptDigest: entry.promptDigest)
        }
        let sealed = try Sealing.seal(body: entry.body, encoding: entry.encoding, metadata: entry.metadata,
                                      namespace: entry.namespace, key: entry.key, etag: entry.etag, with: dataKey)
        return EntryImportGroup.Stored(entry: entry, body: sealed.body, encoding: sealed.encoding,
                                       metadata: sealed.metadata, promptDigest: nil)
    }

    /// The import's timestamps are clamped to the database's "now" (in the statement): an
    /// entry dated in the future could never be evicted.
    private func parameters(_ stored: EntryImportGroup.Stored, _ conflict: ImportConflictPolicy) -> [PostgresValue] {
        let entry = stored.entry
        return [
            .text(entry.namespace), .bytes(entry.key), .bytes(stored.body), .text(stored.encoding),
            .text(entry.contentType), .int(entry.identitySize), .text(entry.etag), .optionalText(entry.model),
            .optionalText(entry.version), .optionalText(stored.promptDigest), .textArray(entry.tags),
            .optionalText(stored.metadata), .int(entry.inputTokens), .int(entry.outputTokens), .text(entry.createdAt),
            .text(entry.updatedAt), .optionalText(entry.expiresAt), .int(entry.staleWhileRevalidate), .int(entry.hitCount),
            .optionalText(entry.lastAccessedAt), .text(conflict.rawValue), writeStamp, .int(policy.defaultTTL),
            .int(policy.storeHardCap), .double(policy.hardCapRatio),
        ]
    }
}
