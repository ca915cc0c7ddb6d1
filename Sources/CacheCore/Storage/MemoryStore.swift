import Foundation
import Locking

/// The entry store in memory, with the PostgreSQL store's semantics where the service can
/// see them: conditional writes, expiry (an expired entry is absent to writes, present to
/// `max-stale` reads), TTLs from the write, the namespace or the policy, the hard caps, the
/// eviction predicate, imports by conflict policy, export pages, the change feed. For the
/// domain's tests and the request fuzzer: no database, nothing persists.
///
/// What it does not model: sealing (encrypted namespaces are stored plain), lookup counters
/// (they are the access tracker's, flushed to PostgreSQL; here `stats` counts entries and
/// bytes only), commit positions, and concurrency beyond one lock (each call is atomic). The
/// caps compare exact totals, where PostgreSQL compares totals folded every second; a write's
/// `notAfter` (its request's deadline) is not enforced: writes here never queue. Times are
/// kept to the microsecond, as PostgreSQL keeps them. Its scans
/// (eviction, export, stats) walk every entry: a test store, never a production one.
public final class MemoryStore: EntryStorage {
    public let policy: CachePolicy
    public let clock: any Clock
    public let localChanges = LocalChanges()
    public var tracksPositions: Bool { false }
    /// Changes the feed keeps; the oldest go first, and a cursor before them is gone (410).
    let feedCapacity: Int
    let state = Locked(State())

    public init(policy: CachePolicy = CachePolicy(), clock: any Clock = SystemClock(), feedCapacity: Int = 10_000) {
        self.policy = policy
        self.clock = clock
        self.feedCapacity = max(1, feedCapacity)
    }

    public func fetch(_ namespace: Namespace, _ key: EntryKey) throws -> StoredEntry? {
        state.withLock { $0.rows[RowID(namespace.name, key.bytes)]?.entry }
    }

    public func hitSubjects(_ namespace: Namespace, _ keys: [EntryKey]) throws -> [StoredEntry] {
        state.withLock { state in keys.compactMap { state.rows[RowID(namespace.name, $0.bytes)]?.entry } }
    }

    public func claimHitReport(_ namespace: Namespace, reporter: String, seq: Int) throws -> Bool {
        state.withLock { state in
            let id = RowID(namespace.name, Array(reporter.utf8))
            guard seq > state.reporters[id, default: 0] else { return false }
            state.reporters[id] = seq
            return true
        }
    }

    /// Never blocks: `offLoop` is not needed.
    public func submit(_ write: EntryWrite, committed: (@Sendable (Result<WriteOutcome, any Error>) -> Void)?,
                       offLoop: BlockingWork?,
                       completion: @escaping @Sendable (Result<WriteOutcome, any Error>, String?) -> Void) {
        let now = now()
        let outcome = state.withLock { $0.put(write, now: now, policy: policy, feedCapacity: feedCapacity) }
        localChanges.changed(write.namespace.name, write.key.bytes)
        committed?(.success(outcome))
        completion(.success(outcome), nil)
    }

    public func delete(_ namespace: Namespace, _ key: EntryKey) throws -> Bool {
        defer { localChanges.changed(namespace.name, key.bytes) }
        let now = now()
        return state.withLock { state in
            let id = RowID(namespace.name, key.bytes)
            guard let row = state.rows[id], row.expiresAt > now else { return false }
            state.remove(id, row, feedCapacity: feedCapacity)
            return true
        }
    }

    public func evict(_ namespace: Namespace, _ predicate: EvictionPredicate) throws -> (entries: Int, bytes: Int) {
        guard predicate.isRestrictive else { return (0, 0) }
        defer { localChanges.changed(namespace.name, nil) }
        let now = now()
        return state.withLock { state in
            let doomed = state.rows.filter { $0.key.namespace == namespace.name && predicate.matches($0.value, now: now) }
            var bytes = 0
            for (id, row) in doomed.sorted(by: { $0.key < $1.key }) {
                bytes += row.storedSize
                state.remove(id, row, feedCapacity: feedCapacity)
            }
            return (doomed.count, bytes)
        }
    }

    public func stats(_ namespace: Namespace?, top: Int) throws -> CacheStats {
        state.withLock { state in
            var stats = CacheStats()
            let rows = state.rows.values.filter { namespace == nil || $0.namespace == namespace?.name }
            for row in rows {
                stats.entries += 1
                stats.identityBytes += row.identitySize
                stats.storedBytes += row.storedSize
            }
            stats.top = rows.filter { $0.hitCount > 0 }.sorted { $0.hitCount > $1.hitCount }.prefix(max(0, top)).map {
                TopEntry(namespace: $0.namespace, key: $0.key, promptDigest: $0.promptDigest, model: $0.model,
                         hitCount: $0.hitCount, lastAccessedAt: $0.lastAccessedAt, writerTokenID: $0.writerTokenID.map(Int.init))
            }
            return stats
        }
    }

    public func settings(_ namespace: Namespace) throws -> NamespaceSettings {
        state.withLock { $0.settings[namespace.name] ?? NamespaceSettings() }
    }

    public func setSettings(_ namespace: Namespace, _ settings: NamespaceSettings) throws {
        state.withLock { $0.settings[namespace.name] = settings }
    }

    public func namespaceTotals() throws -> [String: (entries: Int, identityBytes: Int, storedBytes: Int)] {
        state.withLock { state in
            var totals: [String: (entries: Int, identityBytes: Int, storedBytes: Int)] = [:]
            for row in state.rows.values {
                let total = totals[row.namespace] ?? (0, 0, 0)
                totals[row.namespace] = (total.entries + 1, total.identityBytes + row.identitySize,
                                         total.storedBytes + row.storedSize)
            }
            return totals
        }
    }

    public func configuredNamespaces() throws -> Set<String> { state.withLock { Set($0.settings.keys) } }

    public func listEntries(_ namespace: Namespace, _ query: EntryQuery) throws -> EntryPage {
        let listed: [EntryListing] = state.withLock { state in
            state.rows.values.filter { row in
                row.namespace == namespace.name && query.after.map { row.key.lexicographicallyPrecedes($0) == false
                    && row.key != $0 } ?? true
                    && query.prefix.map { row.key.starts(with: $0) } ?? true
                    && query.tag.map { row.tags.contains($0) } ?? true && query.model.map { row.model == $0 } ?? true
            }
            .sorted { $0.key.lexicographicallyPrecedes($1.key) }.prefix(max(0, query.limit)).map { row in
                EntryListing(key: row.key, model: row.model, tags: row.tags, contentType: row.contentType,
                             identitySize: row.identitySize, storedSize: row.storedSize, createdAt: row.createdAt,
                             updatedAt: row.updatedAt, expiresAt: row.expiresAt, hitCount: row.hitCount,
                             lastAccessedAt: row.lastAccessedAt)
            }
        }
        return EntryPage(entries: listed, next: listed.count == query.limit ? listed.last?.key : nil)
    }

    /// Keeps no history (no lookups are counted here either): every point is zeros, at the
    /// namespace's level now.
    public func history(_ namespace: Namespace, _ range: HistoryRange) throws -> [StatsPoint] {
        let stats = try stats(namespace, top: 0)
        return range.points(samples: [], levels: [:], carried: (stats.storedBytes, stats.entries))
    }

    public func cacheTotals(matching pattern: String, limit: Int) throws -> [(namespace: String, stats: CacheStats)] {
        let matching = try namespaceTotals().filter { Glob.matches(pattern, $0.key) }
        return matching.sorted { $0.key < $1.key }.prefix(max(0, limit)).map { name, total in
            var stats = CacheStats()
            (stats.entries, stats.identityBytes, stats.storedBytes) = (total.entries, total.identityBytes, total.storedBytes)
            return (name, stats)
        }
    }

    /// "Now" to the microsecond, as PostgreSQL stores it: an entry exported and imported again
    /// compares equal to itself.
    func now() -> Date { MemoryStore.microseconds(clock.now()) }

    static func microseconds(_ date: Date) -> Date {
        Date(timeIntervalSince1970: (date.timeIntervalSince1970 * 1_000_000).rounded() / 1_000_000)
    }

    /// A dump's timestamp to the microsecond (Foundation's parser keeps milliseconds only);
    /// nil for one that is not RFC 3339.
    static func preciseDate(_ text: String) -> Date? {
        guard let whole = RFC3339.parse(text) else { return nil }
        guard let dot = text.firstIndex(of: "."), text.hasSuffix("Z") else { return whole }
        let digits = text[text.index(after: dot)...].prefix { $0.isASCII && $0.isNumber }
        guard !digits.isEmpty, let seconds = RFC3339.parse(String(text[..<dot]) + "Z"),
              let fraction = Double("0." + digits) else { return whole }
        return microseconds(seconds.addingTimeInterval(fraction))
    }

    /// No standby reads from a memory store: there is no position to wait for.
    public func commitPosition() throws -> String { "0/0" }
}

extension EvictionPredicate {
    /// Whether `row` is one this predicate evicts at `now` (the eviction SQL's conditions).
    func matches(_ row: MemoryStore.Row, now: Date) -> Bool {
        var createdBefore = createdBefore
        if let olderThan { createdBefore = min(createdBefore ?? .distantFuture, now.addingTimeInterval(-Double(olderThan))) }
        var accessedBefore = accessedBefore
        if let idleFor { accessedBefore = min(accessedBefore ?? .distantFuture, now.addingTimeInterval(-Double(idleFor))) }
        if let keys, !keys.contains(row.key) { return false }
        if let tag, !row.tags.contains(tag) { return false }
        if let model, row.model != model { return false }
        if let version, row.version != version { return false }
        if let createdBefore, !(row.createdAt < createdBefore) { return false }
        if let accessedBefore, !(row.lastAccessedAt < accessedBefore) { return false }
        return true
    }
}
