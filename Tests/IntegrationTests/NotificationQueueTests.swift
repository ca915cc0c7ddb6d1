import Foundation
import Postgres
import Testing
import TeamCache
import TestSupport

/// A LISTEN session that stops reading holds PostgreSQL's notification queue back (full, every
/// write fails): how full it is, is a metric, so an alert can fire long before that.
@Suite struct NotificationQueueTests {
    @Test func aListenerThatStopsReadingShowsInTheQueueMetric() throws {
        let service = TestService.shared
        let url = try TestDatabase.shared.migratedDefault()
        let stuck = try PostgresConnection(url: url, limits: .unbounded)
        try stuck.execute("LISTEN teamcache_stuck_test")
        // 4 MB of notifications on its channel, which it never reads.
        let notifier = try PostgresConnection(url: url, limits: .unbounded)
        for batch in 0..<8 {
            _ = try notifier.query("""
                SELECT count(pg_notify('teamcache_stuck_test', repeat('x', 7000) || \(batch) || '-' || g))
                FROM generate_series(1, 75) g
                """)
        }
        var usage = -1.0
        for _ in 0..<40 {
            usage = metricSample(try service.metrics(), "teamcache_notification_queue_usage")
            if usage > 0 { break }
            Thread.sleep(forTimeInterval: 0.1)
        }
        #expect(usage > 0 && usage < 1, "usage \(usage)")
        withExtendedLifetime(stuck) {}
    }
}
