import CacheCore
import Foundation
import Locking
import Observability
import Postgres
import Synchronization

/// Counts hits, misses, stale answers and bypasses in memory and writes them to PostgreSQL
/// at each flush (entries in chunks of `flushChunk`, then the namespace counters), so the
/// hit path never writes to the database.
///
/// A crash loses the counts not flushed yet (at most `maxDeferredTicks` + 1 intervals of them,
/// and what a failing database kept back); a graceful stop flushes first.
public final class AccessTracker: Sendable {
    /// String raw values: the metric label without reflection (`"\(lookup)"` costs a
    /// dynamic cast per request).
    public enum Lookup: String, Sendable {
        /// `collapsed`: a hit answered by waiting for another caller's fill (counted as a hit too).
        /// `local`: a hit a client's local tier answered and reported (`POST …/hits`), also a hit.
        case hit, stale, miss, bypass, collapsed, local

        /// An answer that spared a model call: its tokens and price count as saved.
        var saves: Bool { self != .miss && self != .bypass }
    }

    /// The start of the minute `date` falls in, epoch seconds.
    static func minute(_ date: Date) -> Int {
        HistoryRange.floor(Int(date.timeIntervalSince1970.rounded(.down)), 60)
    }

    /// Hit counts and last-access times of one chunk of entries (its own transaction). Rows
    /// another transaction holds (a writer replacing the entry, a DELETE cascading to it) are
    /// skipped rather than waited for, so a flush never waits on a row lock and can never be
    /// part of a deadlock; the statement returns them, and they wait for the next flush. A hit
    /// count saturates: one at bigint's end (a dump's, before imports bounded it) once failed
    /// the statement, and with it every flush of every namespace's counts, for as long as it lived.
    static let flushAccessStatement = """
        WITH locked AS (
            SELECT a.entry_id FROM entry_access a WHERE a.entry_id = ANY($1::bigint[]) FOR UPDATE SKIP LOCKED),
        updated AS (
            UPDATE entry_access a
               SET hit_count = CASE WHEN a.hit_count > 9223372036854775807 - v.hits THEN 9223372036854775807
                                    ELSE a.hit_count + v.hits END,
                   last_accessed_at = greatest(a.last_accessed_at, v.at)
              FROM unnest($1::bigint[], $2::bigint[], $3::timestamptz[]) AS v(entry_id, hits, at)
             WHERE a.entry_id = v.entry_id AND a.entry_id IN (SELECT entry_id FROM locked)
            RETURNING a.entry_id)
        SELECT s.entry_id FROM entry_access s
        WHERE s.entry_id = ANY($1::bigint[]) AND s.entry_id NOT IN (SELECT entry_id FROM updated)
        """
    /// Lookup counts by namespace, as delta rows the counter fold adds to the totals (an
    /// insert waits for no lock; see `EntryStore.foldCounters`).
    /// `at` is the minute the lookups happened in, so the history puts them there.
    static let flushCountersStatement = """
        INSERT INTO counter_deltas (namespace, hits, misses, stale, bypass, input_tokens_saved, output_tokens_saved,
                                    collapsed, cost_saved_nanos, at, local_hits)
        SELECT n, h, m, s, b, i, o, c, k, to_timestamp(t), l
        FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[],
                    $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[])
             AS d(n, h, m, s, b, i, o, c, k, t, l)
        """
    /// Entries per flush transaction: row locks are held only this long, so writers that
    /// replace a hot entry never wait behind a flush of the whole batch.
    public static let flushChunk = 500

    /// nil: counted in memory and metrics only, each flush dropping what it takes (a store
    /// without PostgreSQL: the domain's tests and the request fuzzer).
    private let pool: ConnectionPool?
    /// Off: lookups are only counted in metrics (for measuring what tracking costs).
    private let enabled: Bool
    private let batchFull: @Sendable () -> Void
    private let batchSize: Int
    /// What the counting shares, only inside `state`'s lock.
    struct State {
        var entries: [Int64: EntryAccess] = [:]
        /// The flusher was woken for a full batch and has not taken it yet.
        var earlyFlushAsked = false
        /// Periodic flushes put off in a row (`flushIfDue`).
        var deferredTicks = 0
        var earlyFlushHeldUntil = Date.distantPast
        /// Never emptied: one per label (see `NamespaceLabels`), as the metrics' label values are.
        var namespaces: [String: NamespaceState] = [:]
        /// Folds namespaces that hold nothing into one label, so `namespaces` stays bounded.
        var labels: NamespaceLabels
        /// Every namespace known to hold entries or settings, past the labels' cap too. The
        /// cap bounds metric series only: such a namespace's counts still go to PostgreSQL
        /// under its own name (its stats, history and dashboard), while its series fold into
        /// `_other`. The store's namespaces at the last refresh (only writers make them), and
        /// those written or hit here since.
        var held: Set<String> = []
        /// Namespaces written or hit here since the last refresh: kept when the next refresh
        /// replaces `held` (its read of the store may have come before them).
        var heldSinceRefresh: Set<String> = []
        /// Counts not written yet of held namespaces without a label of their own; each flush
        /// takes them all, so this holds at most the namespaces asked for since the last one.
        var unlabelled: [String: NamespaceState] = [:]

        /// Counts a lookup (or a report) of a namespace not counted under its own label yet:
        /// its label's state, and, when it holds something but its label is `_other`, the
        /// counts to be written under its own name (the `_other` series only keeps the total).
        mutating func countNew(_ namespace: String, hit: Bool, mayLabel: Bool, pending: Bool,
                               _ record: (inout NamespaceState, _ pending: Bool) -> Void) {
            if hit {
                held.insert(namespace)
                heldSinceRefresh.insert(namespace)
            }
            let label = newLabel(namespace, hit: hit, mayLabel: mayLabel)
            guard label == NamespaceLabels.other, held.contains(namespace) else {
                record(&namespaces[label, default: NamespaceState()], pending)
                return
            }
            record(&namespaces[label, default: NamespaceState()], false)
            record(&unlabelled[namespace, default: NamespaceState()], pending)
        }

        /// The label for a namespace not counted yet.
        mutating func newLabel(_ namespace: String, hit: Bool, mayLabel: Bool) -> String {
            if hit { labels.admit(namespace) } else if mayLabel { labels.admitProvisionally(namespace) }
            // `_other` itself is always in `namespaces` once used, so it never comes here twice.
            return labels.holds(namespace) && namespaces.count < labels.totalCapacity ? namespace : NamespaceLabels.other
        }
    }

    // Not private: the tests read what a failed flush gave back.
    let state: Locked<State>
    /// Held for a whole flush, so flushes run one at a time: a flush called while another is
    /// writing waits for it, and when it returns every count recorded before the call is in
    /// PostgreSQL (but rows a writer held). The service's own flushes (ticks, then the stop's)
    /// run on one thread and never meet here; callers beside it (tests, on a shared service)
    /// do. Without it, a flush that found the counts already taken by another returned before
    /// they were committed (CI read a namespace's hits as 0 just after a flush). A bare lock,
    /// not `Locked`: it is held across the flush's statements, and only flushes (never a hit)
    /// take it.
    private let oneFlushAtATime = NSLock()
    /// What hits are priced at, under a lock of its own: a price not looked up yet scans the
    /// globs, which must not hold up every other lookup's counting. `priced` spares the lock
    /// on every hit when there are no prices at all.
    private let prices = Locked(PriceBook())
    private let priced = Atomic<Bool>(false)
    private let flushes: CounterFamily?
    private let logger = Logger(component: "access-tracker")

    /// `batchFull` is called (outside the lock) when `batchSize` entries have pending hits,
    /// so the flusher can run early instead of letting memory grow until its next tick.
    public init(pool: ConnectionPool?, metrics: StoreMetrics? = nil, enabled: Bool = true, batchSize: Int = 100_000,
                labels: NamespaceLabels = NamespaceLabels(), batchFull: @escaping @Sendable () -> Void = {}) {
        self.pool = pool
        state = Locked(State(labels: labels))
        self.enabled = enabled
        self.batchSize = batchSize
        self.batchFull = batchFull
        flushes = metrics.map { $0.registry.counter($0.accessFlushes) }
        guard let metrics else { return }
        let lookups = metrics.registry.counter(metrics.lookups)
        let tokensSaved = metrics.registry.counter(metrics.tokensSaved)
        let costSaved = metrics.registry.counter(metrics.costSaved)
        metrics.registry.addCollector { [weak self] in
            guard let totals = self?.totals() else { return }
            var lookupValues: [[String]: Double] = [:], tokenValues: [[String]: Double] = [:]
            var costValues: [[String]: Double] = [:]
            for (namespace, total) in totals {
                if total.costNanos > 0 { costValues[[namespace]] = Double(total.costNanos) / 1e9 }
                for (result, count) in [("hit", total.hits), ("miss", total.misses), ("stale", total.stale),
                                        ("bypass", total.bypass), ("collapsed", total.collapsed),
                                        ("local", total.local)] where count > 0 {
                    lookupValues[[namespace, result]] = Double(count)
                }
                for (kind, count) in [("input", total.inputTokens), ("output", total.outputTokens)] where count > 0 {
                    tokenValues[[namespace, kind]] = Double(count)
                }
            }
            lookups.replaceAll(lookupValues)
            tokensSaved.replaceAll(tokenValues)
            costSaved.replaceAll(costValues)
        }
    }

    /// Every namespace's running totals since start.
    func totals() -> [String: NamespaceCounts] {
        state.withLock { $0.namespaces.mapValues(\.total) }
    }

    /// Records a lookup's result; for a hit or stale answer, the entry and its tokens.
    /// `mayLabel`: the caller may write the namespace, so it may have series of its own even
    /// before it holds anything (its first burst of misses is its own, not `_other`'s); the
    /// label bound still holds, as for every other way a namespace becomes known.
    public func record(_ lookup: Lookup, namespace: String, entry: StoredEntry? = nil, at now: Date,
                       mayLabel: Bool = false) {
        count(lookup, namespace, model: entry?.model, input: entry?.inputTokens, output: entry?.outputTokens,
              entryID: entry?.id, at: now, mayLabel: mayLabel)
    }

    /// Records an answer given from a model call in progress rather than from an entry (the
    /// gateway's callers who followed another's call): what it saved is the call's, and no
    /// entry's hit count moves.
    public func record(_ lookup: Lookup, namespace: String, model: String?, inputTokens: Int?, outputTokens: Int?,
                       at now: Date, mayLabel: Bool) {
        count(lookup, namespace, model: model, input: inputTokens, output: outputTokens, entryID: nil, at: now,
              mayLabel: mayLabel)
    }

    private func count(_ lookup: Lookup, _ namespace: String, model: String?, input: Int?, output: Int?,
                       entryID: Int64?, at now: Date, mayLabel: Bool) {
        let enabled = self.enabled, batchSize = self.batchSize
        let minute = Self.minute(now)
        var cost = 0
        if lookup.saves, priced.load(ordering: .relaxed) {
            cost = prices.withLock { $0.nanos(namespace: namespace, model: model, input: input ?? 0, output: output ?? 0) }
        }
        let full = state.withLock { state in
            // The common case, a namespace already counted, costs one hash and changes the
            // state in place (no copy out and back).
            if let index = state.namespaces.index(forKey: namespace) {
                state.namespaces.values[index].record(lookup, input: input, output: output, costNanos: cost,
                                                      minute: minute, pending: enabled)
            } else {
                state.countNew(namespace, hit: entryID != nil, mayLabel: mayLabel, pending: enabled) { counted, pending in
                    counted.record(lookup, input: input, output: output, costNanos: cost, minute: minute, pending: pending)
                }
            }
            guard enabled, let entryID else { return false }
            // Not `entries[id, default: …]`: its default's closure context, capturing the
            // namespace, was a heap allocation on every hit.
            if let index = state.entries.index(forKey: entryID) {
                state.entries.values[index].add(at: now)
            } else {
                var access = EntryAccess(namespace: namespace, lastAccess: now)
                access.add(at: now)
                state.entries[entryID] = access
            }
            // At (not only exactly at) the batch size: after a failed flush the restored
            // entries can already be past it. Once per flush, and not again for a second
            // after a failure, so a database that is down is not asked in a tight loop.
            guard state.entries.count >= batchSize, !state.earlyFlushAsked, Date() >= state.earlyFlushHeldUntil else {
                return false
            }
            state.earlyFlushAsked = true
            return true
        }
        if full { batchFull() }
    }

    /// An entry read by a request that is not counted as a lookup (a watch): its last access
    /// moves, so idle and LRU eviction see it in use; its hit count does not.
    public func touch(_ entry: StoredEntry, at now: Date) {
        guard enabled else { return }
        state.withLock { state in
            if let index = state.entries.index(forKey: entry.id) {
                state.entries.values[index].lastAccess = max(state.entries.values[index].lastAccess, now)
            } else {
                state.entries[entry.id] = EntryAccess(namespace: entry.namespace, lastAccess: now)
            }
        }
    }

    /// `count` hits a client's local tier answered (`POST …/hits`): counted as hits, and as
    /// local ones; with `entry` (the version they were answered from), with its tokens and
    /// cost, and on its hit count.
    public func recordLocal(namespace: String, entry: StoredEntry?, count: Int, at now: Date) {
        guard count > 0 else { return }
        let minute = Self.minute(now)
        var cost = 0
        if let entry, priced.load(ordering: .relaxed) {
            cost = prices.withLock {
                $0.nanos(namespace: namespace, model: entry.model, input: entry.inputTokens, output: entry.outputTokens)
            }
        }
        let counts = NamespaceCounts.local(count: count, entry, costNanos: cost)
        let enabled = self.enabled, batchSize = self.batchSize
        let full = state.withLock { state -> Bool in
            // A report on keys the namespace does not hold admits no label of its own (else a
            // reader could fill the labels with names and push real namespaces into `_other`).
            if let index = state.namespaces.index(forKey: namespace) {
                state.namespaces.values[index].record(counts, minute: minute, pending: enabled)
            } else {
                state.countNew(namespace, hit: entry != nil, mayLabel: false, pending: enabled) { counted, pending in
                    counted.record(counts, minute: minute, pending: pending)
                }
            }
            guard enabled, let entry else { return false }
            var access = state.entries[entry.id] ?? EntryAccess(namespace: namespace, lastAccess: now)
            access.hits = NamespaceCounts.saturating(access.hits, count)
            access.lastAccess = max(access.lastAccess, now)
            state.entries[entry.id] = access
            guard state.entries.count >= batchSize, !state.earlyFlushAsked, Date() >= state.earlyFlushHeldUntil else {
                return false
            }
            state.earlyFlushAsked = true
            return true
        }
        if full { batchFull() }
    }

    /// The server's price table (at start).
    public func setServerPrices(_ table: PriceTable) {
        changePrices { $0 = PriceBook(server: table) }
    }

    /// Every namespace's own prices (the periodic refresh: a change made on another replica
    /// is in force here within one refresh). Compared outside the lock: usually unchanged.
    public func setNamespacePrices(_ tables: [String: PriceTable]) {
        guard prices.withLock({ $0.namespaces }) != tables else { return }
        changePrices { $0.setNamespaces(tables) }
    }

    /// One namespace's own prices, changed through this replica (in force at once).
    public func setNamespacePrices(_ namespace: String, _ table: PriceTable?) {
        changePrices { $0.setNamespace(namespace, table) }
    }

    /// The flag is set inside the lock, so two changes at once leave it as the last one left the book.
    private func changePrices(_ change: (inout PriceBook) -> Void) {
        prices.withLock { book in
            change(&book)
            priced.store(!book.isEmpty, ordering: .relaxed)
        }
    }

    /// The metric label for `namespace` (itself, or `_other` when it holds nothing known).
    public func label(for namespace: String) -> String {
        state.withLock { $0.labels.holds(namespace) ? namespace : NamespaceLabels.other }
    }

    /// A namespace that now holds an entry or settings (this replica's own write).
    public func admitNamespace(_ namespace: String) {
        state.withLock { state in
            state.labels.admit(namespace)
            state.held.insert(namespace)
            state.heldSinceRefresh.insert(namespace)
        }
    }

    /// The namespaces the store holds entries or settings for (from the periodic refresh),
    /// replacing those known before: one emptied or dropped since leaves (so the set is the
    /// store's, not every name ever written), but those written or hit here since the last
    /// refresh stay (the store may have been read before them).
    public func learnNamespaces(_ held: Set<String>) {
        state.withLock { state in
            state.labels.learn(held)
            state.held = held.union(state.heldSinceRefresh)
            state.heldSinceRefresh = []
        }
    }

    /// Entries with hits pending past which a periodic flush may wait (`flushIfDue`): at ~16 µs
    /// of PostgreSQL a row (a new version of the access row and its five index entries), this
    /// many rows every 2 s is under 1% of a core.
    public static let deferrableEntries = 1_000
    /// Periodic flushes put off in a row at most: under load the stats lag by at most this many
    /// intervals and one more (6 s at the default 2 s), plus the flushes' own time and one fold:
    /// still the "few seconds" API.md allows.
    static let maxDeferredTicks = 2

    /// The periodic flush. It writes now when few entries have hits pending, so stats read at
    /// a light load lag by one interval. When many do, it waits up to `maxDeferredTicks`
    /// intervals more (unless a full batch asked for it): an entry's row is written once per
    /// flush however many hits it took, so under load a hot entry's hits share one row write
    /// instead of one every interval (bench/results/2026-12-07-hits-7.md). The lookup counts
    /// wait with the rows, so a stats document's counts and top entries agree (but for rows a
    /// writer held at the flush: written at the next flush). A stop flushes at once (`flush`);
    /// after a failed flush, the next tick tries again.
    public func flushIfDue() throws {
        let due = state.withLock { state -> Bool in
            guard state.entries.count > Self.deferrableEntries, !state.earlyFlushAsked,
                  state.deferredTicks < Self.maxDeferredTicks else {
                state.deferredTicks = 0
                return true
            }
            state.deferredTicks += 1
            return false
        }
        if due { try flush() }
    }

    /// Entries with hits not written yet.
    var pendingEntries: Int { state.withLock { $0.entries.count } }

    /// Writes what was counted since the last flush, after any flush already writing (see
    /// `oneFlushAtATime`). On failure the counts are kept for the next one.
    public func flush() throws {
        oneFlushAtATime.lock()
        defer { oneFlushAtATime.unlock() }
        try writePending()
    }

    private func writePending() throws {
        let (pendingEntries, pendingNamespaces) = state.withLock { state in
            var counts: [PendingCounts] = []
            for name in state.namespaces.keys where state.namespaces[name]?.hasPending == true {
                for (minute, taken) in state.namespaces[name]?.takePending() ?? [] {
                    counts.append(PendingCounts(namespace: name, minute: minute, counts: taken))
                }
            }
            for (name, var unlabelled) in state.unlabelled {
                for (minute, taken) in unlabelled.takePending() {
                    counts.append(PendingCounts(namespace: name, minute: minute, counts: taken))
                }
            }
            state.unlabelled = [:]
            let entries = state.entries
            state.entries = [:]
            state.earlyFlushAsked = false
            return (entries, counts)
        }
        guard let pool, !pendingEntries.isEmpty || !pendingNamespaces.isEmpty else { return }
        // In id order: neighbouring rows share index pages. (Locks are skipped, never waited for.)
        let sortedEntries = pendingEntries.sorted { $0.key < $1.key }
        var flushed = 0
        var busy: [Int64: EntryAccess] = [:]
        do {
            try pool.withConnection { connection in
                while flushed < sortedEntries.count {
                    let chunk = sortedEntries[flushed..<min(flushed + Self.flushChunk, sortedEntries.count)]
                    let skipped = try connection.query(Self.flushAccessStatement, [
                        .intArray(chunk.map(\.key)), .intArray(chunk.map { Int64($0.value.hits) }),
                        .timestampArray(chunk.map(\.value.lastAccess)),
                    ])
                    for row in skipped.rows {
                        if let id = try row.int("entry_id").map(Int64.init), let access = pendingEntries[id] {
                            busy[id] = access
                        }
                    }
                    flushed += chunk.count
                }
                try flushCounters(pendingNamespaces, on: connection)
            }
            // Rows held by a writer or a delete just now: counted at the next flush.
            if !busy.isEmpty { restore(busy, []) }
            flushes?.inc(["ok"])
        } catch {
            // What was committed stays committed; the rest waits for the next flush.
            flushes?.inc(["error"])
            state.withLock { state in
                state.earlyFlushHeldUntil = Date().addingTimeInterval(1)
                // These counts waited their turn already: the next tick tries again, as before
                // there were ticks put off, rather than waiting out another deferral.
                state.deferredTicks = Self.maxDeferredTicks
            }
            restore(Dictionary(uniqueKeysWithValues: sortedEntries[flushed...].map { ($0.key, $0.value) })
                        .merging(busy) { pending, _ in pending },
                    pendingNamespaces)
            throw error
        }
    }

    /// One namespace's counts of one minute, as one delta row.
    struct PendingCounts {
        let namespace: String
        let minute: Int
        let counts: NamespaceCounts
    }

    private func flushCounters(_ pending: [PendingCounts], on connection: PostgresConnection) throws {
        guard !pending.isEmpty else { return }
        let sorted = pending.sorted { ($0.namespace, $0.minute) < ($1.namespace, $1.minute) }
        func column(_ value: (NamespaceCounts) -> Int) -> PostgresValue { .intArray(sorted.map { Int64(value($0.counts)) }) }
        try connection.query(Self.flushCountersStatement, [
            .textArray(sorted.map(\.namespace)), column(\.hits), column(\.misses), column(\.stale), column(\.bypass),
            column(\.inputTokens), column(\.outputTokens), column(\.collapsed), column(\.costNanos),
            .intArray(sorted.map { Int64($0.minute) }), column(\.local),
        ])
    }

    private func restore(_ pendingEntries: [Int64: EntryAccess], _ pendingNamespaces: [PendingCounts]) {
        state.withLock { state in
            for (id, access) in pendingEntries {
                var merged = state.entries[id] ?? EntryAccess(namespace: access.namespace, lastAccess: access.lastAccess)
                merged.hits += access.hits
                merged.lastAccess = max(merged.lastAccess, access.lastAccess)
                state.entries[id] = merged
            }
            // Back into pending only: the running totals counted them already.
            for pending in pendingNamespaces {
                if let index = state.namespaces.index(forKey: pending.namespace) {
                    state.namespaces.values[index].restore(pending.minute, pending.counts)
                } else {
                    state.unlabelled[pending.namespace, default: NamespaceState()].restore(pending.minute, pending.counts)
                }
            }
        }
    }

}
