import Foundation

extension MemoryStore {
    /// An entry's place: its namespace and key, ordered as the export walks them.
    struct RowID: Hashable, Comparable {
        let namespace: String
        let key: [UInt8]

        init(_ namespace: String, _ key: [UInt8]) {
            self.namespace = namespace
            self.key = key
        }

        static func < (a: RowID, b: RowID) -> Bool {
            a.namespace != b.namespace ? Array(a.namespace.utf8).lexicographicallyPrecedes(b.namespace.utf8)
                : a.key.lexicographicallyPrecedes(b.key)
        }
    }

    /// An entry's row and its access row, as PostgreSQL keeps them.
    struct Row {
        var id: Int64
        var namespace: String
        var key: [UInt8]
        var body: [UInt8]
        var encoding: BodyEncoding
        var contentType: String
        var identitySize: Int
        var etag: String
        var model: String?
        var version: String?
        var promptDigest: String?
        var tags: [String]
        var metadata: String?
        var inputTokens: Int
        var outputTokens: Int
        var createdAt: Date
        var updatedAt: Date
        var expiresAt: Date
        var staleWhileRevalidate: Int
        var writerTokenID: Int64?
        var hitCount = 0
        var lastAccessedAt: Date

        var storedSize: Int { body.count }

        var entry: StoredEntry {
            StoredEntry(id: id, namespace: namespace, key: key, body: body, encoding: encoding, contentType: contentType,
                        identitySize: identitySize, etag: etag, model: model, metadata: metadata,
                        inputTokens: inputTokens, outputTokens: outputTokens, updatedAt: updatedAt,
                        expiresAt: expiresAt, staleWhileRevalidate: staleWhileRevalidate)
        }
    }

    /// One change of the feed, with the namespace it belongs to.
    struct FeedRecord {
        let namespace: String
        let change: FeedChange
    }

    struct State {
        var rows: [RowID: Row] = [:]
        var nextID: Int64 = 1
        var settings: [String: NamespaceSettings] = [:]
        /// Stored bytes by namespace and in all (what the hard caps compare).
        var bytes: [String: Int] = [:]
        var totalBytes = 0
        /// The feed, oldest first; `feedStart` is the first kept (older ones are trimmed).
        var feed: [FeedRecord] = []
        var feedStart = 0
        var head: Int64 = 0
        /// Per namespace, the newest cursor trimmed: a follower behind it must resync.
        var floors: [String: Int64] = [:]
        /// Per namespace and reporter, the last local-hit report counted.
        var reporters: [RowID: Int] = [:]

        /// `tc_put_entry`: a write under its condition and the caps, as one atomic step.
        mutating func put(_ write: EntryWrite, now: Date, policy: CachePolicy, feedCapacity: Int) -> WriteOutcome {
            let id = RowID(write.namespace.name, write.key.bytes)
            let quota = settings[id.namespace]
            let ttl = write.ttlSeconds ?? quota?.defaultTTL ?? policy.defaultTTL
            let expires = now.addingTimeInterval(Double(ttl))
            let old = rows[id]
            let expired = old.map { $0.expiresAt <= now } ?? true
            switch write.condition {
            case .none: break
            case .absent where !expired: return .preconditionFailed
            case .absent: break
            case .match where expired: return .preconditionFailed
            case .match(let tags):
                if !tags.contains("*"), let old, !tags.contains(old.etag) { return .preconditionFailed }
            }
            let delta = write.body.bytes.count - (old?.storedSize ?? 0)
            if delta > 0, !fits(delta, namespace: id.namespace, quota: quota?.maxBytes, policy: policy) { return .storeFull }
            var row = Row(id: old?.id ?? nextID, namespace: id.namespace, key: id.key, body: write.body.bytes,
                          encoding: write.body.encoding, contentType: write.contentType,
                          identitySize: write.body.identitySize, etag: write.body.etag, model: write.model,
                          version: write.version, promptDigest: write.promptDigest, tags: write.tags,
                          metadata: write.metadata, inputTokens: write.inputTokens, outputTokens: write.outputTokens,
                          createdAt: expired ? now : old?.createdAt ?? now, updatedAt: now, expiresAt: expires,
                          staleWhileRevalidate: write.staleWhileRevalidate, writerTokenID: write.writerTokenID,
                          lastAccessedAt: now)
            if let old {
                row.hitCount = old.hitCount
                row.lastAccessedAt = Self.accessedByWrite(old.lastAccessedAt, now: now, condition: write.condition)
            } else {
                nextID += 1
            }
            store(row, replacing: old, feedCapacity: feedCapacity)
            return expired ? .created(expiresAt: expires) : .replaced(expiresAt: expires)
        }

        /// A rewrite counts as an access as PostgreSQL's writes count it: an `If-Match` write
        /// (tc_put_entry) every time; a plain or create-only one (the group write) only when the
        /// last access is a minute old, sparing a row version per rewrite of a busy key.
        static func accessedByWrite(_ last: Date, now: Date, condition: WriteCondition) -> Date {
            if case .match = condition { return max(last, now) }
            return last < now.addingTimeInterval(-60) ? now : last
        }

        /// Whether `delta` more stored bytes stay within the store's and the namespace's hard caps.
        func fits(_ delta: Int, namespace: String, quota: Int?, policy: CachePolicy) -> Bool {
            if policy.storeHardCap > 0, Int64(totalBytes + delta) > policy.storeHardCap { return false }
            if let quota, Double(bytes[namespace, default: 0] + delta) > Double(quota) * policy.hardCapRatio { return false }
            return true
        }

        mutating func store(_ row: Row, replacing old: Row?, feedCapacity: Int) {
            let id = RowID(row.namespace, row.key)
            let delta = row.storedSize - (old?.storedSize ?? 0)
            rows[id] = row
            bytes[row.namespace, default: 0] += delta
            totalBytes += delta
            append(FeedRecord(namespace: row.namespace, change: FeedChange(
                cursor: head + 1, kind: .put, key: row.key, etag: row.etag, identitySize: row.identitySize,
                storedSize: row.storedSize, contentType: row.contentType,
                expiresAt: RFC3339.formatMicroseconds(row.expiresAt),
                staleUntil: RFC3339.formatMicroseconds(row.expiresAt.addingTimeInterval(Double(row.staleWhileRevalidate))),
                entryID: row.id)), capacity: feedCapacity)
        }

        mutating func remove(_ id: RowID, _ row: Row, feedCapacity: Int) {
            rows[id] = nil
            bytes[row.namespace, default: 0] -= row.storedSize
            totalBytes -= row.storedSize
            append(FeedRecord(namespace: row.namespace, change: FeedChange(cursor: head + 1, kind: .delete, key: row.key)),
                   capacity: feedCapacity)
        }

        /// Numbers a change and keeps it, trimming the oldest past `capacity`.
        mutating func append(_ record: FeedRecord, capacity: Int) {
            head += 1
            feed.append(record)
            while feed.count - feedStart > capacity {
                let trimmed = feed[feedStart]
                floors[trimmed.namespace] = trimmed.change.cursor
                feedStart += 1
            }
            // Compacted now and then, so trimming costs O(1) a change over time.
            if feedStart > capacity {
                feed.removeFirst(feedStart)
                feedStart = 0
            }
        }
    }
}
