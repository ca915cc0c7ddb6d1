import CacheCore
import CacheStore
import Foundation
import Locking
import Postgres
import Testing
import TestSupport

@Suite struct EvictionJobTests {
    /// 10,000 entries in a database of their own; two jobs race; exactly the expired, idle
    /// and over-quota entries go, each once.
    @Test func twoRacingJobsEvictExactlyTheRightEntriesOnce() throws {
        let database = try TestDatabase.shared.migratedDatabase(prefix: "evjob")
        let pool = ConnectionPool(.init(url: TestDatabase.shared.url,
                                        overrides: TestDatabase.shared.overrides(database: database),
                                        maxConnections: 8))
        var policy = CachePolicy()
        policy.staleRetention = 3600
        policy.idleTTL = 86400
        let clock = ManualClock()
        let store = EntryStore(pool: pool, policy: policy, clock: clock)
        let now = clock.now()
        try pool.withConnection { connection in
            // 'main': 10,000 entries: every 10th expired past retention, every 10th (offset 5) idle
            // (neither read nor written for two days).
            try connection.query("""
                INSERT INTO entries (namespace, key, body, encoding, content_type, identity_size, stored_size, etag,
                                     created_at, updated_at, expires_at)
                SELECT 'main', convert_to('k' || i, 'UTF8'), '\\x00', 'identity', 't', 1, 1, 'e',
                       CASE WHEN i % 10 = 5 THEN $1 - interval '2 days' ELSE $1 END,
                       CASE WHEN i % 10 = 5 THEN $1 - interval '2 days' ELSE $1 END,
                       CASE WHEN i % 10 = 0 THEN $1 - interval '2 hours' ELSE $1 + interval '1 day' END
                FROM generate_series(1, 10000) AS i
                """, [.timestamp(now)])
            try connection.query("""
                INSERT INTO entry_access (entry_id, namespace, hit_count, last_accessed_at)
                SELECT id, namespace, 0, CASE WHEN convert_from(key, 'UTF8') ~ '5$' THEN $1 - interval '2 days'
                                              ELSE $1 - (substring(convert_from(key, 'UTF8') FROM 2)::int * interval '1 second') END
                FROM entries
                """, [.timestamp(now)])
            // 'quota': 100 entries of 10 bytes under a 500-byte quota: the 50 least recent go.
            try connection.query("""
                INSERT INTO entries (namespace, key, body, encoding, content_type, identity_size, stored_size, etag,
                                     created_at, updated_at, expires_at)
                SELECT 'quota', convert_to('q' || i, 'UTF8'), '\\x00010203040506070809', 'identity', 't', 10, 10, 'e',
                       $1, $1, $1 + interval '1 day' FROM generate_series(1, 100) AS i
                """, [.timestamp(now)])
            try connection.query("""
                INSERT INTO entry_access (entry_id, namespace, hit_count, last_accessed_at)
                SELECT id, namespace, 0, $1 - (substring(convert_from(key, 'UTF8') FROM 2)::int * interval '1 minute')
                FROM entries WHERE namespace = 'quota'
                """, [.timestamp(now)])
            try connection.query("INSERT INTO namespace_settings (namespace, max_bytes) VALUES ('quota', 500)")
        }
        let reports = Locked<[EvictionJob.Report]>([])
        DispatchQueue.concurrentPerform(iterations: 2) { _ in
            if let report = EvictionJob(store: store).runCycle() { reports.withLock { $0.append(report) } }
        }
        let total = reports.value.reduce(into: [EvictionJob.Reason: Int]()) { sum, report in
            for (reason, count) in report.entries { sum[reason, default: 0] += count }
        }
        #expect(total[.expired] == 1000)
        #expect(total[.idle] == 1000)  // keys ending in 5: never a multiple of 10
        #expect(total[.size] == 50)
        try pool.withConnection { connection in
            let main = try connection.query("""
                SELECT count(*)::int AS n FROM entries WHERE namespace = 'main'
                  AND (expires_at < $1 OR convert_from(key, 'UTF8') ~ '5$')
                """, [.timestamp(now)])
            #expect(try main.first?.int("n") == 0)
            #expect(try connection.query("SELECT count(*)::int AS n FROM entries WHERE namespace = 'main'").first?
                .int("n") == 8000)
            // The 50 most recently used (q1..q50: smallest age) stay.
            let kept = try connection.query("""
                SELECT count(*)::int AS n FROM entries WHERE namespace = 'quota'
                  AND substring(convert_from(key, 'UTF8') FROM 2)::int <= 50
                """)
            #expect(try kept.first?.int("n") == 50)
        }
        let stats = try store.stats(Namespace("quota")!, top: 0)
        #expect(stats.entries == 50 && stats.storedBytes == 500)
        // A second cycle finds nothing more to do.
        #expect(EvictionJob(store: store).runCycle()?.isEmpty == true)
        // The stats and the history count each eviction once, by reason, at the cycle's time.
        #expect(try store.stats(Namespace("main")!, top: 0).evictions == 2000 && stats.evictions == 50)
        let range = try HistoryRange(since: now.addingTimeInterval(-60), until: nil, step: 60, now: now, policy: policy)
        let points = try store.history(Namespace("main")!, range)
        #expect(points.map(\.evictedExpired).reduce(0, +) == 1000 && points.map(\.evictedIdle).reduce(0, +) == 1000)
        #expect(points.last?.evictions == 2000 && points.last?.entries == 8000)
        #expect(try store.history(Namespace("quota")!, range).last?.evictedSize == 50)
    }
}
