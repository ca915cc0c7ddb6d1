import CacheCore
import Foundation
import Observability
import Postgres

/// The scheduled eviction: expired entries past the stale allowance, idle entries, and
/// least-recently-used entries while a namespace or the store is over its byte cap.
///
/// Scheduled cycles are coordinated by time: every replica asks each tick, and only the one
/// that claims the current slot of `interval` seconds runs (`claimSlot`), so N replicas
/// together run one cycle per interval. Any cycle (scheduled or `teamcache evict`) also
/// holds `pg_try_advisory_lock`, so two never overlap. Deletes go in short batches until
/// one comes back short.
public final class EvictionJob: Sendable {
    public enum Reason: String, Sendable, CaseIterable {
        case expired, idle, size, manual
    }

    /// What one cycle removed, per reason.
    public struct Report: Sendable, Equatable {
        public var entries: [Reason: Int] = [:]
        public var bytes: [Reason: Int] = [:]
        /// Changes dropped from the feed (older than the retention).
        public var changesTrimmed = 0
        /// Stats history points dropped (older than their step's retention).
        public var pointsTrimmed = 0
        public var isEmpty: Bool { entries.values.allSatisfy { $0 == 0 } && changesTrimmed == 0 && pointsTrimmed == 0 }
    }

    static let lockKey: Int64 = 0x7463_6576_6963  // "tcevic"
    static let batchSize = 1000
    // The cycle never waits for an entry row: it locks what it picks with SKIP LOCKED, so a
    // row a writer holds right now (it is being rewritten, so it is no candidate) is left to
    // the next cycle, and the cycle can never join a lock cycle with a group of writers.
    // Every DELETE then repeats its condition on the row it deletes: under READ COMMITTED
    // the lock follows a row a writer replaced meanwhile to its new version (PostgreSQL's
    // EvalPlanQual recheck), and a rewritten entry (new TTL, new body) no longer matches, so
    // it survives instead of being deleted after its writer got 200. Conditions on joined
    // tables are not rechecked that way, so each statement states one on the entry row itself
    // (`updated_at`).
    //
    // Expired: past the stale retention (`$1`) and past the entry's own stale-while-revalidate
    // window (`$3` is now), so a window longer than the retention is honoured. Entries kept by
    // their window are still past the retention, first in the index; so that a batch does
    // not scan them again and again, the cycle walks the index once, in (expires_at, id)
    // order from where the last batch stopped (`$4`, `$5`), deleting what is due.
    static let deleteExpired = """
        WITH candidates AS (
            SELECT id, expires_at, expires_at + make_interval(secs => stale_while_revalidate) < $3 AS due
            FROM entries
            WHERE expires_at < $1 AND expires_at >= $4::timestamptz AND (expires_at, id) > ($4::timestamptz, $5::int8)
            ORDER BY expires_at, id LIMIT $2 FOR UPDATE SKIP LOCKED),
        gone AS (
            DELETE FROM entries WHERE id = ANY(ARRAY(SELECT id FROM candidates WHERE due))
              AND expires_at < $1 AND expires_at + make_interval(secs => stale_while_revalidate) < $3
            RETURNING namespace, stored_size),
        counted AS (INSERT INTO counter_deltas (namespace, evicted_expired, at)
                    SELECT namespace, count(*), $3 FROM gone GROUP BY namespace),
        last AS (SELECT expires_at, id FROM candidates ORDER BY expires_at DESC, id DESC LIMIT 1)
        SELECT (SELECT count(*) FROM gone)::bigint AS n, (SELECT coalesce(sum(stored_size), 0) FROM gone)::bigint AS bytes,
               (SELECT count(*) FROM candidates)::bigint AS scanned,
               (SELECT expires_at::text FROM last) AS last_at, (SELECT id FROM last) AS last_id
        """
    /// Idle: neither read (its access row) nor written (`updated_at`, rechecked on the row
    /// deleted) since the cutoff (`$1`; `$3` is now, when the evictions are counted). A write moves the access row only to the minute, so the
    /// entry's own write time is what makes a just-rewritten entry not idle.
    static let deleteIdle = """
        WITH gone AS (DELETE FROM entries WHERE id = ANY(ARRAY(
            SELECT e.id FROM entries e WHERE e.id = ANY(ARRAY(
                SELECT entry_id FROM entry_access WHERE last_accessed_at < $1 ORDER BY last_accessed_at LIMIT $2))
            FOR UPDATE SKIP LOCKED))
            AND updated_at < $1
            RETURNING namespace, stored_size),
        counted AS (INSERT INTO counter_deltas (namespace, evicted_idle, at)
                    SELECT namespace, count(*), $3 FROM gone GROUP BY namespace)
        SELECT count(*)::bigint AS n, coalesce(sum(stored_size), 0)::bigint AS bytes FROM gone
        """
    /// The least recently used entries of a namespace ('' = the whole store) until `excess`
    /// bytes are covered: each row is taken while the bytes before it are still short of it.
    /// An entry written after the cycle began (`$4`) is the most recent of all: it stays.
    static let deleteLeastRecent = """
        WITH ranked AS (
            SELECT e.id, e.stored_size,
                   sum(e.stored_size) OVER (ORDER BY a.last_accessed_at, e.id) - e.stored_size AS before
            FROM entry_access a JOIN entries e ON e.id = a.entry_id
            WHERE ($1 = '' OR a.namespace = $1)
            ORDER BY a.last_accessed_at, e.id LIMIT $3),
        gone AS (DELETE FROM entries WHERE id = ANY(ARRAY(
                     SELECT l.id FROM entries l WHERE l.id IN (SELECT id FROM ranked WHERE before < $2)
                     FOR UPDATE SKIP LOCKED))
                 AND updated_at <= $4
                 RETURNING namespace, stored_size),
        counted AS (INSERT INTO counter_deltas (namespace, evicted_size, at)
                    SELECT namespace, count(*), $4 FROM gone GROUP BY namespace)
        SELECT count(*)::bigint AS n, coalesce(sum(stored_size), 0)::bigint AS bytes FROM gone
        """
    static let overQuota = """
        SELECT s.namespace, s.max_bytes, coalesce(sum(c.stored_bytes), 0)::bigint AS stored
        FROM namespace_settings s JOIN namespace_counters c ON c.namespace = s.namespace
        WHERE s.max_bytes IS NOT NULL GROUP BY s.namespace, s.max_bytes
        HAVING coalesce(sum(c.stored_bytes), 0) > s.max_bytes
        """
    /// Claims the slot `now` falls in, on the database's clock; one row back for one claimer.
    static let claimSlot = """
        UPDATE eviction_schedule SET last_slot = floor(extract(epoch FROM now()) / $1)::bigint
        WHERE id = 1 AND last_slot < floor(extract(epoch FROM now()) / $1)::bigint
        RETURNING last_slot
        """
    static let storeBytes = "SELECT coalesce(sum(stored_bytes), 0)::bigint AS stored FROM namespace_counters WHERE namespace = ''"

    private let store: EntryStore
    /// Where a cycle runs: it holds a session-level advisory lock throughout, so behind a
    /// transaction pooler this is a pool of direct sessions (else the store's own pool).
    private let sessions: ConnectionPool
    private let leases: LeaseStore?
    private let metrics: EvictionMetrics?
    private let logger = Logger(component: "eviction")

    public init(store: EntryStore, metrics registry: StoreMetrics? = nil, leases: LeaseStore? = nil,
                sessions: ConnectionPool? = nil) {
        self.store = store
        self.sessions = sessions ?? store.pool
        self.leases = leases
        metrics = registry.map(EvictionMetrics.init)
    }

    /// The scheduled cycle: runs only if this replica claims the current slot of `interval`
    /// seconds; nil when another replica has it (or the database is down).
    @discardableResult
    public func runScheduledCycle(interval: TimeInterval) -> Report? {
        do {
            let claimed = try store.pool.withConnection { connection in
                try connection.query(Self.claimSlot, [.double(max(interval, 0.001))]).rowCount == 1
            }
            guard claimed else {
                metrics?.runs.inc(["skipped"])
                return nil
            }
        } catch {
            metrics?.runs.inc(["error"])
            logger.warn("eviction slot claim failed", [("error", .string("\(error)"))])
            return nil
        }
        return runCycle()
    }

    /// Runs one cycle now (the CLI's `evict`, tests); nil when another cycle is running
    /// (or the database is down).
    @discardableResult
    public func runCycle() -> Report? {
        let started = Date()
        do {
            let report = try sessions.withConnection { connection -> Report? in
                guard try connection.query("SELECT pg_try_advisory_lock($1) AS locked", [.int(Self.lockKey)])
                    .first?.bool("locked") == true else { return nil }
                defer { _ = try? connection.query("SELECT pg_advisory_unlock($1)", [.int(Self.lockKey)]) }
                return try cycle(on: connection)
            }
            guard let report else {
                metrics?.runs.inc(["skipped"])
                return nil
            }
            metrics?.record(report, seconds: Date().timeIntervalSince(started))
            if !report.isEmpty {
                logger.info("eviction cycle", Reason.allCases.map { ($0.rawValue, .int(report.entries[$0] ?? 0)) }
                    + [("bytes", .int(report.bytes.values.reduce(0, +))), ("changes_trimmed", .int(report.changesTrimmed)),
                       ("points_trimmed", .int(report.pointsTrimmed))])
            }
            return report
        } catch {
            metrics?.runs.inc(["error"])
            logger.warn("eviction cycle failed", [("error", .string("\(error)"))])
            return nil
        }
    }

    private func cycle(on connection: PostgresConnection) throws -> Report {
        // The caps below read the folded totals: fold first (or wait for the fold running
        // elsewhere), so they are current.
        try EntryStore.foldCounters(on: connection, wait: true)
        // The database's clock, as writes are stamped: one clock for every replica.
        let now = try store.stampNow(on: connection)
        let policy = store.policy
        var report = Report()
        let expiredBefore = now.addingTimeInterval(-Double(policy.staleRetention))
        try drainExpired(before: expiredBefore, now: now, on: connection, into: &report)
        let idleBefore = now.addingTimeInterval(-Double(policy.idleTTL))
        try drain(.idle, into: &report) {
            try connection.query(Self.deleteIdle, [.timestamp(idleBefore), .int(Self.batchSize), .timestamp(now)])
        }
        for row in try connection.query(Self.overQuota).rows {
            guard let namespace = try row.string("namespace"), let quota = try row.int("max_bytes"),
                  let stored = try row.int("stored") else { continue }
            try shrink(namespace, excess: stored - quota, started: now, on: connection, into: &report)
        }
        // Leases that ran out unfilled: their keys are free for the next caller either way.
        try leases?.sweep(on: connection)
        // The change feed keeps what a follower may still ask for; older changes go.
        report.changesTrimmed = try EntryStore.trimChanges(
            before: now.addingTimeInterval(-Double(policy.changeRetention)), on: connection)
        report.pointsTrimmed = try EntryStore.trimHistory(now: now, policy: policy, on: connection)
        if policy.storeMaxBytes > 0, let stored = try connection.query(Self.storeBytes).first?.int("stored"),
           stored > Int(policy.storeMaxBytes) {
            try shrink("", excess: stored - Int(policy.storeMaxBytes), started: now, on: connection, into: &report)
        }
        // Last, and never at the cost of the cycle: a failure here only leaves old rows a while.
        _ = try? EntryStore.trimHitReporters(on: connection)
        return report
    }

    /// Deletes least-recently-used entries until `excess` bytes are gone.
    private func shrink(_ namespace: String, excess: Int, started: Date, on connection: PostgresConnection,
                        into report: inout Report) throws {
        var remaining = excess
        while remaining > 0 {
            let result = try connection.query(Self.deleteLeastRecent,
                                              [.text(namespace), .int(remaining), .int(Self.batchSize), .timestamp(started)])
            let count = try result.first?.int("n") ?? 0, bytes = try result.first?.int("bytes") ?? 0
            report.entries[.size, default: 0] += count
            report.bytes[.size, default: 0] += bytes
            remaining -= bytes
            if count == 0 { return }
        }
    }

    /// Expired entries, batch by batch along the index (see `deleteExpired`).
    private func drainExpired(before: Date, now: Date, on connection: PostgresConnection,
                              into report: inout Report) throws {
        var after: (at: String, id: Int) = ("-infinity", 0)
        while true {
            let row = try connection.query(Self.deleteExpired, [
                .timestamp(before), .int(Self.batchSize), .timestamp(now), .text(after.at), .int(after.id),
            ]).first
            report.entries[.expired, default: 0] += try row?.int("n") ?? 0
            report.bytes[.expired, default: 0] += try row?.int("bytes") ?? 0
            guard try row?.int("scanned") ?? 0 >= Self.batchSize, let at = try row?.string("last_at"),
                  let id = try row?.int("last_id") else { return }
            after = (at, id)
        }
    }

    private func drain(_ reason: Reason, into report: inout Report, batch: () throws -> PostgresResult) throws {
        while true {
            let result = try batch()
            let count = try result.first?.int("n") ?? 0
            report.entries[reason, default: 0] += count
            report.bytes[reason, default: 0] += try result.first?.int("bytes") ?? 0
            if count < Self.batchSize { return }
        }
    }

    /// Counts a manual (API) eviction in the same metrics.
    public func recordManual(entries: Int, bytes: Int) {
        metrics?.evicted.inc([Reason.manual.rawValue], by: Double(entries))
        metrics?.evictedBytes.inc([Reason.manual.rawValue], by: Double(bytes))
    }
}

/// The eviction job's Prometheus families.
struct EvictionMetrics {
    let runs: CounterFamily
    let evicted: CounterFamily
    let evictedBytes: CounterFamily
    let duration: HistogramFamily
    let lastSuccess: GaugeFamily

    init(_ metrics: StoreMetrics) {
        let registry = metrics.registry
        runs = registry.counter(metrics.evictionRuns)
        evicted = registry.counter(metrics.evictions)
        evictedBytes = registry.counter(metrics.evictedBytes)
        duration = registry.histogram(metrics.evictionDuration, bounds: latencyBuckets)
        lastSuccess = registry.gauge(metrics.evictionLastSuccess)
    }

    func record(_ report: EvictionJob.Report, seconds: Double) {
        runs.inc(["ok"])
        duration.observe([], seconds)
        lastSuccess.set([], Date().timeIntervalSince1970)
        for reason in EvictionJob.Reason.allCases where reason != .manual {
            evicted.inc([reason.rawValue], by: Double(report.entries[reason] ?? 0))
            evictedBytes.inc([reason.rawValue], by: Double(report.bytes[reason] ?? 0))
        }
    }
}
