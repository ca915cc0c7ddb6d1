import CacheCore
import CacheKeys
import Foundation
import Postgres

extension EntryStore {
    /// The folded totals plus the deltas not folded yet, in one snapshot: exact as of the last
    /// commit (a fold is either wholly visible or not at all). The pending deltas are at most
    /// one fold interval of statements.
    static let totalsColumns = """
        entries, identity_bytes, stored_bytes, hits, misses, stale, bypass, collapsed, local_hits, input_tokens_saved,
        output_tokens_saved, cost_saved_nanos, writes, evicted_expired + evicted_idle + evicted_size + evicted_manual AS evictions
        """
    static let selectCounters = """
        SELECT coalesce(sum(entries), 0)::bigint AS entries, coalesce(sum(identity_bytes), 0)::bigint AS identity_bytes,
               coalesce(sum(stored_bytes), 0)::bigint AS stored_bytes, coalesce(sum(hits), 0)::bigint AS hits,
               coalesce(sum(misses), 0)::bigint AS misses, coalesce(sum(stale), 0)::bigint AS stale,
               coalesce(sum(bypass), 0)::bigint AS bypass, coalesce(sum(collapsed), 0)::bigint AS collapsed,
               coalesce(sum(local_hits), 0)::bigint AS local_hits,
               coalesce(sum(input_tokens_saved), 0)::bigint AS input_tokens_saved,
               coalesce(sum(output_tokens_saved), 0)::bigint AS output_tokens_saved,
               coalesce(sum(cost_saved_nanos), 0)::bigint AS cost_saved_nanos, coalesce(sum(writes), 0)::bigint AS writes,
               coalesce(sum(evictions), 0)::bigint AS evictions
        FROM (SELECT \(totalsColumns) FROM namespace_counters WHERE namespace = $1
              UNION ALL
              SELECT \(totalsColumns) FROM counter_deltas WHERE $1 = '' OR namespace = $1) AS totals
        """
    static let selectTop = """
        SELECT e.namespace, e.key, e.prompt_digest, e.model, a.hit_count, a.last_accessed_at, e.writer_token_id
        FROM entry_access a JOIN entries e ON e.id = a.entry_id
        WHERE a.namespace = $1 ORDER BY a.hit_count DESC LIMIT $2
        """
    static let selectTopGlobal = """
        SELECT e.namespace, e.key, e.prompt_digest, e.model, a.hit_count, a.last_accessed_at, e.writer_token_id
        FROM entry_access a JOIN entries e ON e.id = a.entry_id
        ORDER BY a.hit_count DESC LIMIT $1
        """
    static let selectAllCounters = """
        SELECT namespace, sum(entries)::bigint AS entries, sum(identity_bytes)::bigint AS identity_bytes,
               sum(stored_bytes)::bigint AS stored_bytes
        FROM (SELECT namespace, entries, identity_bytes, stored_bytes FROM namespace_counters WHERE namespace <> ''
              UNION ALL
              SELECT namespace, entries, identity_bytes, stored_bytes FROM counter_deltas
              WHERE namespace <> '\(NamespaceLabels.other)') AS totals
        GROUP BY namespace
        """
    /// Every namespace's totals (folded plus pending) whose name is LIKE $1, in name order, at
    /// most $2 of them. The store-wide row and the `_other` label are not namespaces.
    static let selectCacheTotals = """
        SELECT namespace, sum(entries)::bigint AS entries, sum(identity_bytes)::bigint AS identity_bytes,
               sum(stored_bytes)::bigint AS stored_bytes, sum(hits)::bigint AS hits, sum(misses)::bigint AS misses,
               sum(stale)::bigint AS stale, sum(bypass)::bigint AS bypass, sum(collapsed)::bigint AS collapsed,
               sum(local_hits)::bigint AS local_hits,
               sum(input_tokens_saved)::bigint AS input_tokens_saved,
               sum(output_tokens_saved)::bigint AS output_tokens_saved, sum(cost_saved_nanos)::bigint AS cost_saved_nanos,
               sum(writes)::bigint AS writes, sum(evictions)::bigint AS evictions
        FROM (SELECT namespace, \(totalsColumns) FROM namespace_counters
              UNION ALL
              SELECT namespace, \(totalsColumns) FROM counter_deltas) AS totals
        WHERE namespace LIKE $1 AND namespace <> '' AND namespace <> '\(NamespaceLabels.other)'
        GROUP BY namespace ORDER BY namespace LIMIT $2
        """
    /// Live miss leases of a namespace ('' = the store): one range of the primary key; and
    /// whether the namespace is encrypted (it has a data key), for clients that keep copies.
    static let selectLeasesHeld = """
        SELECT (SELECT count(*) FROM leases WHERE ($1 = '' OR namespace = $1) AND expires_at > now())::bigint AS held,
               EXISTS (SELECT 1 FROM data_keys WHERE namespace = $1) AS encrypted
        """
    /// Namespaces that have settings, for the namespace labels (bounded: labels are capped).
    static let selectConfigured = "SELECT namespace FROM namespace_settings ORDER BY namespace LIMIT 10000"
    static let selectSettings = """
        SELECT default_ttl_seconds, max_bytes, prices::text AS prices FROM namespace_settings WHERE namespace = $1
        """
    static let upsertSettings = """
        INSERT INTO namespace_settings (namespace, default_ttl_seconds, max_bytes, prices, updated_at)
        VALUES ($1, $2::bigint, $3::bigint, $4::text::jsonb, now())
        ON CONFLICT (namespace) DO UPDATE SET default_ttl_seconds = excluded.default_ttl_seconds,
            max_bytes = excluded.max_bytes, prices = excluded.prices, updated_at = now()
        """
    /// Namespaces with prices of their own (for the tracker's price book; bounded as labels are).
    static let selectNamespacePrices = """
        SELECT namespace, prices::text AS prices FROM namespace_settings WHERE prices IS NOT NULL
        ORDER BY namespace LIMIT 10000
        """

    /// Totals and the `top` most-hit entries of `namespace`, or of the whole store when nil.
    public func stats(_ namespace: Namespace?, top: Int) throws -> CacheStats {
        try pool.withConnection { connection in
            var stats = CacheStats()
            if let row = try connection.query(Self.selectCounters, [.text(namespace?.name ?? "")]).first {
                stats = try Self.totals(row)
            }
            let leases = try connection.query(Self.selectLeasesHeld, [.text(namespace?.name ?? "")]).first
            stats.leasesHeld = try leases?.int("held") ?? 0
            stats.encrypted = try leases?.bool("encrypted") ?? false
            let rows = try namespace.map {
                try connection.query(Self.selectTop, [.text($0.name), .int(top)])
            } ?? connection.query(Self.selectTopGlobal, [.int(top)])
            stats.top = try rows.rows.map { row in
                TopEntry(namespace: try row.string("namespace") ?? "", key: try row.bytes("key") ?? [],
                         promptDigest: try row.string("prompt_digest"), model: try row.string("model"),
                         hitCount: try row.int("hit_count") ?? 0,
                         lastAccessedAt: try row.date("last_accessed_at") ?? Date(timeIntervalSince1970: 0),
                         writerTokenID: try row.int("writer_token_id"))
            }
            return stats
        }
    }

    /// Entries and bytes of every namespace (for the metrics gauges).
    public func namespaceTotals() throws -> [String: (entries: Int, identityBytes: Int, storedBytes: Int)] {
        try pool.withConnection { connection in
            var totals: [String: (entries: Int, identityBytes: Int, storedBytes: Int)] = [:]
            for row in try connection.query(Self.selectAllCounters).rows {
                guard let name = try row.string("namespace") else { continue }
                totals[name] = (try row.int("entries") ?? 0, try row.int("identity_bytes") ?? 0,
                                try row.int("stored_bytes") ?? 0)
            }
            return totals
        }
    }

    public func cacheTotals(matching pattern: String, limit: Int) throws -> [(namespace: String, stats: CacheStats)] {
        try pool.withConnection { connection in
            try connection.query(Self.selectCacheTotals, [.text(Self.like(pattern)), .int(limit)]).rows.map { row in
                (try row.string("namespace") ?? "", try Self.totals(row))
            }
        }
    }

    /// The counters of a totals row (`selectCounters`, `selectCacheTotals`); no top entries.
    static func totals(_ row: PostgresRow) throws -> CacheStats {
        var stats = CacheStats()
        stats.entries = try row.int("entries") ?? 0
        stats.identityBytes = try row.int("identity_bytes") ?? 0
        stats.storedBytes = try row.int("stored_bytes") ?? 0
        stats.hits = try row.int("hits") ?? 0
        stats.misses = try row.int("misses") ?? 0
        stats.stale = try row.int("stale") ?? 0
        stats.bypass = try row.int("bypass") ?? 0
        stats.collapsed = try row.int("collapsed") ?? 0
        stats.localHits = try row.int("local_hits") ?? 0
        stats.inputTokensSaved = try row.int("input_tokens_saved") ?? 0
        stats.outputTokensSaved = try row.int("output_tokens_saved") ?? 0
        stats.costSavedNanos = try row.int("cost_saved_nanos") ?? 0
        stats.writes = try row.int("writes") ?? 0
        stats.evictions = try row.int("evictions") ?? 0
        return stats
    }

    /// A token's pattern (`*`: any run) as a LIKE pattern: LIKE's own `%`, `_` and `\` escaped.
    static func like(_ pattern: String) -> String {
        var out = ""
        for character in pattern {
            switch character {
            case "*": out += "%"
            case "%", "_", "\\": out += "\\" + String(character)
            default: out.append(character)
            }
        }
        return out
    }

    /// Namespaces with settings (at most 10,000).
    public func configuredNamespaces() throws -> Set<String> {
        try pool.withConnection { connection in
            Set(try connection.query(Self.selectConfigured).rows.compactMap { try $0.string("namespace") })
        }
    }

    public func settings(_ namespace: Namespace) throws -> NamespaceSettings {
        try pool.withConnection { connection in
            guard let row = try connection.query(Self.selectSettings, [.text(namespace.name)]).first else {
                return NamespaceSettings()
            }
            return NamespaceSettings(defaultTTL: try row.int("default_ttl_seconds"), maxBytes: try row.int("max_bytes"),
                                     prices: try Self.prices(row.string("prices")))
        }
    }

    public func setSettings(_ namespace: Namespace, _ settings: NamespaceSettings) throws {
        try pool.withConnection { connection in
            _ = try connection.query(Self.upsertSettings, [
                .text(namespace.name), settings.defaultTTL.map { .int($0) } ?? .null,
                settings.maxBytes.map { .int($0) } ?? .null, settings.prices.map { .text($0.json.serialized) } ?? .null,
            ])
        }
    }

    /// Every namespace's own prices.
    public func namespacePrices() throws -> [String: PriceTable] {
        try pool.withConnection { connection in
            var tables: [String: PriceTable] = [:]
            for row in try connection.query(Self.selectNamespacePrices).rows {
                if let name = try row.string("namespace"), let table = try Self.prices(row.string("prices")) {
                    tables[name] = table
                }
            }
            return tables
        }
    }

    /// A stored price table (written by the settings route, so valid; one that is not reads
    /// as none rather than failing every settings read).
    static func prices(_ text: String?) -> PriceTable? {
        guard let text, let json = try? JSONParser.parse(text) else { return nil }
        return try? PriceTable.parse(json)
    }
}
