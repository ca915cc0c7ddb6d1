import Foundation

/// The change feed in memory: every put and delete numbered in one sequence, the oldest
/// trimmed past the store's capacity (as PostgreSQL trims past the retention).
extension MemoryStore {
    /// Bodies a page carries at most (as the PostgreSQL store's `feedPageBytes`).
    static let feedPageBytes = 16 * 1024 * 1024

    public func changes(_ namespace: Namespace, after cursor: Int64, limit: Int, bodies: Bool) throws -> FeedPage {
        let limit = min(max(1, limit), 10_000)
        return try state.withLock { state in
            let floor = state.floors[namespace.name] ?? 0
            if cursor < floor { throw FeedCursorError.gone(floor: floor) }
            if cursor > state.head { throw FeedCursorError.ahead(head: state.head) }
            var changes: [FeedChange] = []
            var bodyBytes = 0, cut = false
            // Cursors increase along the feed: start at the first change after `cursor`.
            var index = state.firstIndex(after: cursor)
            while index < state.feed.count, changes.count < limit {
                let record = state.feed[index]
                index += 1
                guard record.namespace == namespace.name else { continue }
                var change = record.change
                // The body, when the entry holds this change's version (its ETag, as PostgreSQL matches it).
                if bodies, change.kind == .put, let row = state.rows[RowID(namespace.name, change.key)],
                   row.etag == change.etag {
                    // A page ends early once its bodies pass the budget (never before its first change).
                    if !changes.isEmpty && bodyBytes + row.storedSize > Self.feedPageBytes {
                        cut = true
                        break
                    }
                    bodyBytes += row.storedSize
                    (change.body, change.encoding) = (row.body, row.encoding)
                }
                changes.append(change)
            }
            return FeedPage(changes: changes, next: changes.last?.cursor ?? cursor, more: changes.count == limit || cut)
        }
    }

    public func feedHead() throws -> Int64 { state.withLock { $0.head } }
    public func feedHeadNow() throws -> Int64 { try feedHead() }
}

extension MemoryStore.State {
    /// The index of the first kept change with a cursor past `cursor` (binary search).
    func firstIndex(after cursor: Int64) -> Int {
        var (low, high) = (feedStart, feed.count)
        while low < high {
            let middle = (low + high) / 2
            if feed[middle].change.cursor <= cursor { low = middle + 1 } else { high = middle }
        }
        return low
    }
}
