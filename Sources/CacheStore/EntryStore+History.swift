import CacheCore
import Foundation
import Postgres

/// The stats history (migration 0015): minute and hour rollups the counter fold writes, read
/// by `GET /v1/caches/{ns}/stats/history`, trimmed by the eviction cycle.
extension EntryStore {
    static let countColumns = ["hits", "misses", "stale", "collapsed", "bypass", "writes", "evicted_expired",
                               "evicted_idle", "evicted_size", "evicted_manual", "input_tokens_saved",
                               "output_tokens_saved", "cost_saved_nanos", "local_hits"]
    static var zeros: String { countColumns.map { "0::bigint AS \($0)" }.joined(separator: ", ") }

    /// Everything a history answer needs, in ONE statement, so one snapshot: the fold moves
    /// deltas from `counter_deltas` into the rollups in one transaction, and two statements
    /// could see them in neither (or in both). Rows by `kind`:
    /// - `row`: the rollups of the stored step in the range (one primary-key range scan);
    /// - `pending`: deltas not folded yet (at most a fold interval's), binned the same way;
    /// - `folded`: the namespace's folded totals (the level the pending changes start from);
    /// - `carried`: the last row before the range, of the step and of hours (minute rows
    ///   older than the range may be trimmed already), for the level the range starts at.
    static let selectHistory = """
        SELECT 'row' AS kind, extract(epoch FROM t)::bigint AS t, \(countColumns.joined(separator: ", ")),
               stored_bytes, entries
        FROM stats_history WHERE namespace = $1 AND step = $2 AND t >= to_timestamp($3) AND t < to_timestamp($4)
        UNION ALL
        SELECT 'pending', extract(epoch FROM date_bin(make_interval(secs => $2), at, timestamptz 'epoch'))::bigint,
               \(countColumns.map { "sum(\($0))::bigint" }.joined(separator: ", ")),
               sum(stored_bytes)::bigint, sum(entries)::bigint
        FROM counter_deltas WHERE namespace = $1 GROUP BY 2
        UNION ALL
        SELECT 'folded', 0, \(zeros), coalesce(sum(stored_bytes), 0)::bigint, coalesce(sum(entries), 0)::bigint
        FROM namespace_counters WHERE namespace = $1
        UNION ALL
        (SELECT 'carried', step::bigint, \(zeros), stored_bytes, entries FROM stats_history
         WHERE namespace = $1 AND step = $2 AND t < to_timestamp($3) ORDER BY t DESC LIMIT 1)
        UNION ALL
        (SELECT 'carried', step::bigint, \(zeros), stored_bytes, entries FROM stats_history
         WHERE namespace = $1 AND step = 3600 AND t < to_timestamp($3) ORDER BY t DESC LIMIT 1)
        """
    static let trimHistoryStatement = "SELECT tc_trim_history($1::int4, $2, $3) AS trimmed"
    static let historyTrimBatch = 5000

    /// The namespace's points over `range`: the rollups and what is not folded yet, so the
    /// history agrees with the totals `/stats` reads at every moment.
    public func history(_ namespace: Namespace, _ range: HistoryRange) throws -> [StatsPoint] {
        let step = range.storedStep
        let rows = try pool.withConnection { connection in
            try connection.query(Self.selectHistory, [.text(namespace.name), .int(step), .int(range.since),
                                                      .int(range.until)]).rows.map { (try $0.string("kind") ?? "", try Self.point($0)) }
        }
        var samples: [StatsPoint] = []
        var levels: [Int: (storedBytes: Int, entries: Int)] = [:]
        var folded = (storedBytes: 0, entries: 0)
        var carried: [Int: (storedBytes: Int, entries: Int)] = [:]
        var pending: [StatsPoint] = []
        for (kind, point) in rows {
            switch kind {
            case "row":
                samples.append(point)
                levels[point.t] = (point.storedBytes, point.entries)
            case "pending": pending.append(point)
            case "folded": folded = (point.storedBytes, point.entries)
            default: carried[point.t] = (point.storedBytes, point.entries)  // by step
            }
        }
        // What waits to be folded: its counts, and its levels as the fold will write them (the
        // folded totals plus the changes up to each step's end; but a step that no pending change
        // at or before it moves keeps the level kept at or before it, as 0016's fold does for late
        // lookup counts).
        let kept = levels.sorted { $0.key < $1.key }
        var level = folded
        var moved = false
        for point in pending.sorted(by: { $0.t < $1.t }) {
            level = (level.storedBytes &+ point.storedBytes, level.entries &+ point.entries)
            moved = moved || point.storedBytes != 0 || point.entries != 0
            let prior = kept.last { $0.key <= point.t }?.value ?? carried[step]
            levels[point.t] = !moved ? prior ?? level : level
        }
        samples += pending
        // No row before the range and none in it: the level has not moved in the range (a
        // namespace untouched since before the history began), so it is the folded one.
        let start = carried[step] ?? carried[3600] ?? (levels.isEmpty ? folded : nil)
        return range.points(samples: samples, levels: levels, carried: start)
    }

    static func point(_ row: PostgresRow) throws -> StatsPoint {
        var point = StatsPoint(t: try row.int("t") ?? 0)
        point.hits = try row.int("hits") ?? 0
        point.misses = try row.int("misses") ?? 0
        point.stale = try row.int("stale") ?? 0
        point.collapsed = try row.int("collapsed") ?? 0
        point.localHits = try row.int("local_hits") ?? 0
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
