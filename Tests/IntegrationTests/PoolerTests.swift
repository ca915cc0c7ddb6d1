import Foundation
import Locking
import Postgres
import TeamCache
import Testing
import TestSupport

/// TeamCache behind a real PgBouncer in transaction pooling mode (`TEAMCACHE_DB_POOLER=transaction`).
@Suite(.serialized) struct PoolerTests {
    /// The failure the setting exists for, shown first so the other test means something:
    /// two sessions sharing one server connection, each preparing its first statement as
    /// `tc1`, collide; unnamed statements through the same pooler never do.
    @Test func namedStatementsCollideBehindATransactionPoolerUnnamedOnesDoNot() throws {
        let bouncer = try PgBouncer(serverConnections: 1, ignoring: ["extra_float_digits", "options"])
        defer { bouncer.stop() }
        let database = try TestDatabase.shared.migratedDatabase(prefix: "pooler")
        let url = bouncer.url(database: database)
        let first = try PostgresConnection(url: url), second = try PostgresConnection(url: url)
        try first.query("SELECT $1::int8 + 1 AS n", [.int(1)])
        #expect(throws: PostgresError.self) { try second.query("SELECT $1::text AS t", [.text("x")]) }
        var pooled = SessionLimits()
        pooled.transactionPooler = true
        let third = try PostgresConnection(url: url, limits: pooled)
        let fourth = try PostgresConnection(url: url, limits: pooled)
        for round in 0..<20 {
            #expect(try third.query("SELECT $1::int8 + 1 AS n", [.int(round)]).first?.int("n") == round + 1)
            #expect(try fourth.query("SELECT $1::text AS t", [.text("r\(round)")]).first?.string("t") == "r\(round)")
            _ = try third.transaction { connection in
                try connection.query("SELECT $1::int8 AS n", [.int(round)])
            }
        }
    }

    /// The whole service through 4 shared server connections: raw entries, descriptors,
    /// evictions, stats and leases from 8 clients at once, all answered without a 5xx; a
    /// waiter is woken by its fill (the listener is direct); two eviction cycles both run
    /// (the cycle's session lock is held on a direct session, so it is never left behind on
    /// a pooled one); and the readiness probe is ready through the pooler.
    @Test func theServiceServesThroughATransactionPooler() throws {
        let bouncer = try PgBouncer(serverConnections: 4)
        defer { bouncer.stop() }
        let database = try TestDatabase.shared.migratedDatabase(prefix: "pooler")
        let base = TestDatabase.shared.url
        let direct = base + (base.contains("?") ? "&" : "?") + "dbname=\(database)"
        let service = try TestService {
            $0.databaseURL = bouncer.url(database: database)
            $0.directDatabaseURL = direct
            $0.sessionLimits.transactionPooler = true
            $0.authEnabled = false
        }
        defer { service.stop() }
        #expect(try service.request("GET", "/readyz").status == 200)
        let failures = Locked<[String]>([])
        DispatchQueue.concurrentPerform(iterations: 8) { client in
            do { try Self.workload(service, client: client, failures: failures) } catch {
                failures.withLock { $0.append("client \(client): \(error)") }
            }
        }
        let failed = failures.value
        #expect(failed.isEmpty, "\(failed.count) failed, first: \(failed.prefix(3)); pgbouncer: \(bouncer.log.suffix(800))")
        #expect(service.app.eviction.runCycle() != nil)
        #expect(service.app.eviction.runCycle() != nil, "the first cycle's lock was released")
        try WaitTests.fillWakesWaiters(service, count: 3, prefix: "pooled-wait")
    }

    /// One client's mix of every kind of request, each checked for its expected status.
    static func workload(_ service: TestService, client: Int, failures: Locked<[String]>) throws {
        let namespace = "pooled-\(client)"
        func check(_ what: String, _ response: RawClient.Response, _ expected: Set<Int>) {
            if !expected.contains(response.status) {
                failures.withLock { $0.append("\(what): \(response.status) \(response.text.prefix(200))") }
            }
        }
        for round in 0..<40 {
            let path = entryPath(namespace, "k\(round % 7)")
            let body = Array("client \(client) round \(round)".utf8)
            check("PUT", try service.request("PUT", path, headers: [("Cache-Tag", "t\(round % 3)")], body: body),
                  [200, 201])
            let read = try service.request("GET", path)
            check("GET", read, [200])
            if read.status == 200 && read.body != body { failures.withLock { $0.append("GET answered another body") } }
            let descriptor = "\"model\":\"m\",\"prompt\":\"p\(round % 5)\""
            check("upsert", try service.request("POST", "/v1/caches/\(namespace)/upsert",
                                                json: "{\(descriptor),\"response\":\"r\(round)\"}"), [200, 201])
            check("lookup", try service.request("POST", "/v1/caches/\(namespace)/lookup", json: "{\(descriptor)}"),
                  [200])
            if round % 10 == 9 {
                check("evict", try service.request("POST", "/v1/caches/\(namespace)/evict", json: "{\"tag\":\"t0\"}"),
                      [200])
                check("stats", try service.request("GET", "/v1/caches/\(namespace)/stats"), [200])
                check("DELETE", try service.request("DELETE", path), [204, 404])
            }
        }
    }
}
