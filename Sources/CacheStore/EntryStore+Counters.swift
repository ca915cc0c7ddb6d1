import CacheCore
import Foundation
import Postgres

extension EntryStore {
    /// One fold of pending counter deltas into the totals (see migration 0005): -1 when
    /// another session (another replica) is folding right now and `$2` (wait) is false.
    static let foldCounters = "SELECT tc_fold_counters($1, $2) AS folded"
    /// Deltas per fold transaction: one short transaction even after a long outage.
    static let foldChunk = 10_000

    /// Folds every pending counter delta into `namespace_counters`, in chunks; returns how
    /// many it folded, or nil when another replica is folding (it will fold these too).
    ///
    /// Nothing on a request path writes `namespace_counters`: writes, deletes, evictions
    /// and the access tracker only insert deltas, so no request waits on a counter row.
    @discardableResult
    public func foldCounters() throws -> Int? {
        try pool.withConnection { try Self.foldCounters(on: $0, wait: false) }
    }

    /// Folds on `connection`; with `wait`, waits for another session's fold rather than
    /// leaving the deltas to it (so the totals read next are current).
    @discardableResult
    static func foldCounters(on connection: PostgresConnection, wait: Bool) throws -> Int? {
        var total = 0
        while true {
            guard let folded = try connection.query(foldCounters, [.int(foldChunk), .bool(wait)]).first?
                .int("folded"), folded >= 0 else { return total > 0 ? total : nil }
            total += folded
            if folded < foldChunk { return total }
        }
    }
}
