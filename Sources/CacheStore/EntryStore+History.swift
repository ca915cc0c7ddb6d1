import CacheCore
import Foundation
import Postgres

/// The stats history (migration 0015): minute and hour rollups the counter fold writes, read
/// by `GET /v1/caches/{ns}/stats/history`, trimmed by the eviction cycle.
extension EntryStore {
    static let historyColumns = """
        hits, misses, stale, collapsed, bypass, writes, evicted_expired, evicted_idle, evicted_size, evicted_manual,
        input_tokens_saved, output_tokens_saved, cost_saved_nanos
        """
    /// The rollups of one step in a range (the primary key's order: one index range scan).
    static let selectHistory = """
        SELECT extract(epoch FROM t)::bigint AS t, \(historyColumns), stored_bytes, entries
        FROM stats_history WHERE namespace = $1 AND step = $2 AND t >= to_timestamp($3) AND t < to_timestamp($4)
        ORDER BY t
        """
    /// Counts not folded yet (at most a fold interval's), by the stored step they fall in.
    static let selectPendingHistory = """
        SELECT extract(epoch FROM date_bin(make_interval(secs => $2), at, timestamptz 'epoch'))::bigint AS t,
               \(["hits", "misses", "stale", "collapsed", "bypass", "writes", "evicted_expired", "evicted_idle",
                  "evicted_size", "evicted_manual", "input_tokens_saved", "output_tokens_saved", "cost_saved_nanos"]
                    .map { "sum(\($0))::bigint AS \($0)" }.joined(separator: ", ")),
               sum(stored_bytes)::bigint AS stored_bytes, sum(entries)::bigint AS entries
        FROM counter_deltas WHERE namespace = $1 GROUP BY 1
        """
    static let selectFoldedLevel = """
        SELECT coalesce(sum(stored_bytes), 0)::bigint AS stored_bytes, coalesce(sum(entries), 0)::bigint AS entries
        FROM namespace_counters WHERE namespace = $1
        """
    /// The level (bytes, entries) a range starts from: the last row before it.
    static let selectCarriedLevel = """
        SELECT stored_bytes, entries FROM stats_history WHERE namespace = $1 AND step = $2 AND t < to_timestamp($3)
        ORDER BY t DESC LIMIT 1
        """
    static let trimHistoryStatement = "SELECT tc_trim_history($1::int4, $2, $3) AS trimmed"
    static let historyTrimBatch = 5000

    /// The namespace's points over `range`: the rollups and what is not folded yet, so the
    /// history agrees with the totals `/stats` reads at every moment.
    public func history(_ namespace: Namespace, _ range: HistoryRange) throws -> [StatsPoint] {
        let step = range.storedStep
        return try pool.withConnection { connection in
            let name = PostgresValue.text(namespace.name)
            var samples: [StatsPoint] = []
            var levels: [Int: (storedBytes: Int, entries: Int)] = [:]
            for row in try connection.query(Self.selectHistory, [name, .int(step), .int(range.since), .int(range.until)])
                .rows {
                let point = try Self.point(row)
                samples.append(point)
                levels[point.t] = (point.storedBytes, point.entries)
            }
            // What waits to be folded: its counts, and its levels as the fold will write them
            // (the folded totals plus the changes up to each step's end).
            let pending = try connection.query(Self.selectPendingHistory, [name, .int(step)]).rows.map(Self.point)
            if !pending.isEmpty {
                var level: (storedBytes: Int, entries: Int) = try connection.query(Self.selectFoldedLevel, [name]).first.map {
                    (storedBytes: try $0.int("stored_bytes") ?? 0, entries: try $0.int("entries") ?? 0)
                } ?? (0, 0)
                for point in pending.sorted(by: { $0.t < $1.t }) {
                    level = (level.storedBytes &+ point.storedBytes, level.entries &+ point.entries)
                    levels[point.t] = level
                }
            }
            samples += pending
            var carried: (storedBytes: Int, entries: Int)?
            // Minute rows older than the range may be trimmed already: the hour rows say the level too.
            for carriedStep in Set([step, 3600]).sorted() where carried == nil {
                if let row = try connection.query(Self.selectCarriedLevel, [name, .int(carriedStep), .int(range.since)])
                    .first {
                    carried = (try row.int("stored_bytes") ?? 0, try row.int("entries") ?? 0)
                }
            }
            return range.points(samples: samples, levels: levels, carried: carried)
        }
    }

    static func point(_ row: PostgresRow) throws -> StatsPoint {
        var point = StatsPoint(t: try row.int("t") ?? 0)
        point.hits = try row.int("hits") ?? 0
        point.misses = try row.int("misses") ?? 0
        point.stale = try row.int("stale") ?? 0
        point.collapsed = try row.int("collapsed") ?? 0
        point.bypass = try row.int("bypass") ?? 0
        point.writes = try row.int("writes") ?? 0
        point.evictedExpired = try row.int("evicted_expired") ?? 0
        point.evictedIdle = try row.int("evicted_idle") ?? 0
        point.evictedSize = try row.int("evicted_size") ?? 0
        point.evictedManual = try row.int("evicted_manual") ?? 0
        point.inputTokensSaved = try row.int("input_tokens_saved") ?? 0
        point.outputTokensSaved = try row.int("output_tokens_saved") ?? 0
        point.costSavedNanos = try row.int("cost_saved_nanos") ?? 0
        point.storedBytes = try row.int("stored_bytes") ?? 0
        point.entries = try row.int("entries") ?? 0
        return point
    }

    /// Drops minute and hour points older than their retention, in batches; how many went.
    static func trimHistory(now: Date, policy: CachePolicy, on connection: PostgresConnection) throws -> Int {
        var total = 0
        for (step, retention) in [(60, policy.minutePointRetention), (3600, policy.hourPointRetention)] {
            let before = now.addingTimeInterval(-Double(retention))
            while true {
                let trimmed = try connection.query(Self.trimHistoryStatement,
                                                   [.int(step), .timestamp(before), .int(Self.historyTrimBatch)])
                    .first?.int("trimmed") ?? 0
                total += trimmed
                if trimmed < Self.historyTrimBatch { break }
            }
        }
        return total
    }
}
