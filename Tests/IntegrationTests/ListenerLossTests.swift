import Foundation
import Locking
import Postgres
import Testing
import TestSupport

/// A waiter parked while the listener was up counts on a notification to wake it. When the
/// listener is lost and cannot come back, that notification never comes: the waiter must
/// re-check by itself (within a second, as one parked while the listener is down does), not
/// sleep to its deadline.
@Suite(.serialized) struct ListenerLossTests {
    @Test func aWaiterParkedBeforeTheListenerWasLostSeesAFill() throws {
        let database = try TestDatabase.shared.migratedDatabase(prefix: "listenloss")
        let service = try TestService {
            let base = TestDatabase.shared.url
            $0.databaseURL = base + (base.contains("?") ? "&" : "?") + "dbname=\(database)"
            $0.authEnabled = false
        }
        defer { service.stop() }
        let admin = try TestDatabase.shared.connect(database: "postgres")
        defer { _ = try? admin.execute("ALTER DATABASE \"\(database)\" ALLOW_CONNECTIONS true") }
        func gauge(_ name: String) throws -> Double { try NearCacheReplicaTests.nearGauge(service, name) }
        func waitFor(_ name: String, _ value: Double) throws -> Bool {
            for _ in 0..<200 {
                if try gauge(name) == value { return true }
                Thread.sleep(forTimeInterval: 0.05)
            }
            return false
        }
        // The listener's own gauge (not the near-cache's: CI runs this with the near-cache off).
        #expect(try waitFor("teamcache_notify_listener_up", 1), "the listener is up")
        let path = "/v1/caches/loss/entries/k"
        let answer = Locked<(status: Int, at: Date)?>(nil)
        let port = service.port
        Thread.detachNewThread {
            let client = try? RawClient(port: port, timeout: 40)
            let got = try? client?.request("GET", path + "?wait=30")
            answer.withLock { $0 = got.map { ($0.status, Date()) } }
        }
        #expect(try waitFor("teamcache_waiters", 1), "the GET parked")
        // The listener's connection goes, and no new connection to the database can be made;
        // the pool's open connections stay, so a write still commits.
        try admin.execute("ALTER DATABASE \"\(database)\" ALLOW_CONNECTIONS false")
        try admin.execute("""
            SELECT pg_terminate_backend(pid) FROM pg_stat_activity
            WHERE application_name = 'teamcache-listen' AND datname = '\(database)'
            """)
        #expect(try waitFor("teamcache_notify_listener_up", 0), "the listener is down")
        let written = Date()
        #expect(try service.request("PUT", path, body: [7]).status == 201)
        for _ in 0..<200 where answer.value == nil { Thread.sleep(forTimeInterval: 0.05) }
        let got = try #require(answer.value, "the waiter was not answered within 10 s of the fill")
        #expect(got.status == 200)
        #expect(got.at.timeIntervalSince(written) < 5, "answered \(got.at.timeIntervalSince(written)) s after the fill")
    }
}
