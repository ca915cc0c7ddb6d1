import Foundation

/// Imports and export pages in memory, with `tc_import_entry`'s outcomes.
extension MemoryStore {
    public func importEntries(_ entries: [DumpedEntry], policy conflict: ImportConflictPolicy) throws -> [ImportOutcome] {
        defer { for namespace in Set(entries.map(\.namespace)) { localChanges.changed(namespace, nil) } }
        let now = now()
        return state.withLock { state in
            entries.map { state.importEntry($0, conflict, now: now, policy: policy, feedCapacity: feedCapacity) }
        }
    }

    public func exportPage(namespace: Namespace?, since: String?, after: (namespace: String, key: [UInt8])?,
                           limit: Int, byteBudget: Int, _ emit: (DumpedEntry) throws -> Void) throws
        -> (last: (namespace: String, key: [UInt8])?, more: Bool) {
        let sinceDate = since.flatMap(MemoryStore.preciseDate)
        let pageSize = min(max(1, limit), 1000)
        let page: [Row] = state.withLock { state in
            let start = after.map { RowID($0.namespace, $0.key) }
            return state.rows.filter { id, row in
                (namespace == nil || id.namespace == namespace?.name) && (start.map { $0 < id } ?? true)
                    && (sinceDate.map { row.updatedAt >= $0 } ?? true)
            }.sorted { $0.key < $1.key }.prefix(pageSize).map(\.value)
        }
        var last: (namespace: String, key: [UInt8])?
        var pageBytes = 0
        for row in page {
            // A page ends early once its bodies pass the budget: the next page starts here.
            if last != nil && pageBytes + row.storedSize > byteBudget { return (last, true) }
            pageBytes += row.storedSize
            try emit(row.dumped)
            last = (row.namespace, row.key)
        }
        return (last, page.count == pageSize)
    }
}

extension MemoryStore.Row {
    var dumped: DumpedEntry {
        DumpedEntry(namespace: namespace, key: key, body: body, encoding: encoding, contentType: contentType,
                    identitySize: identitySize, etag: etag, model: model, version: version, promptDigest: promptDigest,
                    tags: tags, metadata: metadata, inputTokens: inputTokens, outputTokens: outputTokens,
                    createdAt: RFC3339.formatMicroseconds(createdAt), updatedAt: RFC3339.formatMicroseconds(updatedAt),
                    expiresAt: RFC3339.formatMicroseconds(expiresAt), staleWhileRevalidate: staleWhileRevalidate,
                    hitCount: hitCount, lastAccessedAt: RFC3339.formatMicroseconds(lastAccessedAt),
                    staleUntil: RFC3339.formatMicroseconds(expiresAt.addingTimeInterval(Double(staleWhileRevalidate))))
    }
}

extension MemoryStore.State {
    /// `tc_import_entry`: times in the future are brought back to now, an entry already
    /// there unchanged is left alone, a live one is kept or replaced by the policy.
    mutating func importEntry(_ entry: DumpedEntry, _ conflict: ImportConflictPolicy, now: Date, policy: CachePolicy,
                              feedCapacity: Int) -> ImportOutcome {
        let id = MemoryStore.RowID(entry.namespace, entry.key)
        let quota = settings[id.namespace]
        let updated = min(MemoryStore.preciseDate(entry.updatedAt) ?? now, now)
        let created = min(MemoryStore.preciseDate(entry.createdAt) ?? now, now)
        let expires = entry.expiresAt.flatMap(MemoryStore.preciseDate)
            ?? now.addingTimeInterval(Double(quota?.defaultTTL ?? policy.defaultTTL))
        if expires.addingTimeInterval(Double(entry.staleWhileRevalidate)) <= now { return .expired }
        let old = rows[id]
        if let old {
            if old.etag == entry.etag && old.updatedAt == updated && old.expiresAt == expires { return .unchanged }
            if old.expiresAt > now && (conflict == .skip || (conflict == .newer && old.updatedAt >= updated)) {
                return .skipped
            }
        }
        let delta = entry.body.count - (old?.storedSize ?? 0)
        if delta > 0, !fits(delta, namespace: id.namespace, quota: quota?.maxBytes, policy: policy) { return .storeFull }
        let accessed = min(entry.lastAccessedAt.flatMap(MemoryStore.preciseDate) ?? now, now)
        var row = MemoryStore.Row(id: old?.id ?? nextID, namespace: id.namespace, key: id.key, body: entry.body,
                      encoding: entry.encoding, contentType: entry.contentType, identitySize: entry.identitySize,
                      etag: entry.etag, model: entry.model, version: entry.version, promptDigest: entry.promptDigest,
                      tags: entry.tags, metadata: entry.metadata, inputTokens: entry.inputTokens,
                      outputTokens: entry.outputTokens, createdAt: created, updatedAt: updated, expiresAt: expires,
                      staleWhileRevalidate: entry.staleWhileRevalidate, writerTokenID: nil, hitCount: entry.hitCount,
                      lastAccessedAt: accessed)
        if let old {
            row.hitCount = max(old.hitCount, entry.hitCount)
            row.lastAccessedAt = max(old.lastAccessedAt, accessed)
        } else {
            nextID += 1
        }
        store(row, replacing: old, feedCapacity: feedCapacity)
        return .imported
    }
}
