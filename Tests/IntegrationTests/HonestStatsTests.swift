import CacheStore
import Foundation
import Glibc
import Locking
import Postgres
import TeamCache
import Testing
import TestSupport

/// The figures users read, checked against counts made by hand: a burst that paid the model
/// once reads as one miss and the rest hits (a collapsed waiter is a hit, never also a
/// miss), and a new namespace's first misses are its own, not `_other`'s.
@Suite struct HonestStatsTests {
    /// `count` clients send `request` (a head and body, without the connection header) at
    /// once to `ports` (round robin); their answers' statuses and bodies.
    static func burst(_ count: Int, ports: [Int], _ make: @escaping @Sendable () -> [UInt8])
        -> (DispatchGroup, Locked<[RawClient.Response]>) {
        Burst.start(count, ports: ports) { client in
            guard (try? client.send(make())) != nil else { return nil }
            return try? client.readResponse(head: false)
        }
    }

    static func lookupRequest(_ namespace: String, _ body: String, token: String?) -> [UInt8] {
        let auth = token.map { "Authorization: Bearer \($0)\r\n" } ?? ""
        return Array(("POST /v1/caches/\(namespace)/lookup HTTP/1.1\r\nHost: t\r\n\(auth)Content-Type: application/json\r\n"
            + "Content-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)").utf8)
    }

    static func getRequest(_ path: String, token: String?) -> [UInt8] {
        let auth = token.map { "Authorization: Bearer \($0)\r\n" } ?? ""
        return Array("GET \(path) HTTP/1.1\r\nHost: t\r\n\(auth)Connection: close\r\n\r\n".utf8)
    }

    /// Waits until one answer of the burst holds a lease (descriptor body or raw header).
    static func lease(_ answers: Locked<[RawClient.Response]>) -> String? {
        for _ in 0..<200 {
            for answer in answers.value {
                if let header = answer.header("TeamCache-Lease") { return String(header.prefix { $0 != ";" }) }
                if let object = try? JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: Any],
                   let id = (object["lease"] as? [String: Any])?["id"] as? String { return id }
            }
            Thread.sleep(forTimeInterval: 0.05)
        }
        return nil
    }

    static func lookups(_ stats: [String: Any]) -> [String: Int] { stats["lookups"] as? [String: Int] ?? [:] }

    /// Waits (up to 10 s) until `count` requests are parked on `service` (its own: on the shared
    /// one, other suites' long polls are parked too), rather than sleeping a fixed time a
    /// loaded machine can outrun: a caller not parked yet when the fill lands is a plain hit.
    static func waitForParked(_ count: Int, on service: TestService) throws -> Bool {
        for _ in 0..<200 {
            if metricSample(try service.metrics(), "teamcache_waiters") >= Double(count) { return true }
            Thread.sleep(forTimeInterval: 0.05)
        }
        return false
    }

    /// 20 identical descriptor lookups with a lease and a wait: one fills, 19 collapse.
    /// Stats say miss 1, hit 19 (collapsed 19), hit ratio 0.95; the metrics name the
    /// namespace itself although it held nothing when the burst began.
    @Test func aDescriptorBurstReadsAsOneMissAndNineteenHits() throws {
        let service = try TestService()
        defer { service.stop() }
        let namespace = TestService.namespace("burst-stats")
        let token = try service.token([.read, .write], namespaces: namespace)
        let descriptor = "\"model\":\"m\",\"prompt\":\"counted once\""
        let body = "{\(descriptor),\"lease\":30,\"wait\":10}"
        let (group, answers) = Self.burst(20, ports: [service.port]) { Self.lookupRequest(namespace, body, token: token) }
        let lease = try #require(Self.lease(answers))
        #expect(try Self.waitForParked(19, on: service))
        #expect(try service.request("POST", "/v1/caches/\(namespace)/upsert", token: token,
                                    json: "{\(descriptor),\"response\":\"r\",\"lease\":\"\(lease)\"}").status == 201)
        #expect(group.wait(timeout: .now() + 15) == .success)
        let objects = answers.value.compactMap { try? JSONSerialization.jsonObject(with: Data($0.body)) as? [String: Any] }
        #expect(objects.filter { $0["collapsed"] as? Bool == true }.count == 19)
        try service.app.tracker.flush()
        let stats = try object(try service.request("GET", "/v1/caches/\(namespace)/stats", token: token))
        #expect(Self.lookups(stats) == ["hit": 19, "miss": 1, "stale": 0, "bypass": 0, "collapsed": 19, "local": 0], "\(stats)")
        #expect(stats["hit_ratio"] as? Double == 0.95)
        let metrics = try service.metrics()
        #expect(metrics.contains("teamcache_lookups_total{namespace=\"\(namespace)\",result=\"miss\"} 1\n"))
        #expect(metrics.contains("teamcache_lookups_total{namespace=\"\(namespace)\",result=\"hit\"} 19\n"))
        #expect(metrics.contains("teamcache_lookups_total{namespace=\"\(namespace)\",result=\"collapsed\"} 19\n"))
    }

    /// The same on raw entries: `GET …?lease=30&wait=10` from 20 clients, one PUT.
    @Test func aRawBurstReadsAsOneMissAndNineteenHits() throws {
        let service = try TestService()
        defer { service.stop() }
        let namespace = TestService.namespace("raw-burst-stats")
        let token = try service.token([.read, .write], namespaces: namespace)
        let path = entryPath(namespace, "k")
        let (group, answers) = Self.burst(20, ports: [service.port]) {
            Self.getRequest(path + "?lease=30&wait=10", token: token)
        }
        let lease = try #require(Self.lease(answers))
        #expect(try Self.waitForParked(19, on: service))
        #expect(try service.request("PUT", path, token: token, headers: [("TeamCache-Lease", lease)], body: [1]).status == 201)
        #expect(group.wait(timeout: .now() + 15) == .success)
        #expect(answers.value.filter { $0.status == 200 }.count == 19)
        try service.app.tracker.flush()
        let stats = try object(try service.request("GET", "/v1/caches/\(namespace)/stats", token: token))
        #expect(Self.lookups(stats) == ["hit": 19, "miss": 1, "stale": 0, "bypass": 0, "collapsed": 19, "local": 0], "\(stats)")
        #expect(stats["hit_ratio"] as? Double == 0.95)
    }

    /// Over two replicas, whose counts meet in the database: still miss 1, hit 19.
    @Test func aBurstOverTwoReplicasReadsTheSame() throws {
        let database = try TestDatabase.shared.migratedDatabase(prefix: "burststats")
        let replicas = [try ServeProcess(database: database), try ServeProcess(database: database)]
        defer { for replica in replicas { replica.stop(SIGTERM) } }
        for replica in replicas { try #require(replica.waitUntilListening()) }
        let descriptor = "\"model\":\"m\",\"prompt\":\"counted once, two replicas\""
        let body = "{\(descriptor),\"lease\":30,\"wait\":10}"
        let (group, answers) = Self.burst(20, ports: replicas.map(\.port)) { Self.lookupRequest("two", body, token: nil) }
        let lease = try #require(Self.lease(answers))
        #expect(WaitTests.waitForParked(19, ports: replicas.map(\.port)))
        #expect(try WaitTests.upsert(replicas[1].port, "two", descriptor, lease: lease) == 201)
        #expect(group.wait(timeout: .now() + 15) == .success)
        var counted: [String: Int] = [:]
        // Each replica flushes its counts every 2 s; the totals fold once a second.
        for _ in 0..<60 {
            let stats = try object(try RawClient(port: replicas[0].port, timeout: 10).request("GET", "/v1/caches/two/stats"))
            counted = Self.lookups(stats)
            if counted["hit"] == 19 && counted["miss"] == 1 { break }
            Thread.sleep(forTimeInterval: 0.25)
        }
        #expect(counted == ["hit": 19, "miss": 1, "stale": 0, "bypass": 0, "collapsed": 19, "local": 0])
    }

    /// A watch (`wait` with If-None-Match) is not a lookup: one that ends unchanged (304), or
    /// on a key that was never there, counts nothing; a plain read beside it counts.
    @Test func aWatchCountsNothing() throws {
        let service = TestService.shared
        let namespace = TestService.namespace("watch-stats")
        let token = try writer(namespace)
        let put = try service.request("PUT", entryPath(namespace, "k"), token: token, body: [1])
        let etag = try #require(put.header("ETag"))
        #expect(try service.request("GET", entryPath(namespace, "k"), token: token).status == 200)
        let watching = Date()
        let unchanged = try service.request("GET", entryPath(namespace, "k") + "?wait=1", token: token,
                                            headers: [("If-None-Match", etag)])
        #expect(unchanged.status == 304)
        let absent = try service.request("GET", entryPath(namespace, "none") + "?wait=1", token: token,
                                         headers: [("If-None-Match", etag)])
        #expect(absent.status == 404)
        try service.app.tracker.flush()
        let stats = try object(try service.request("GET", "/v1/caches/\(namespace)/stats", token: token))
        #expect(Self.lookups(stats) == ["hit": 1, "miss": 0, "stale": 0, "bypass": 0, "collapsed": 0, "local": 0],
                "\(stats)")
        // Not counted, but in use: the entry's last access is the watch's end (idle and LRU
        // eviction must not take a watched entry for an idle one), its hit count the read's.
        let connection = try PostgresConnection(url: try TestDatabase.shared.migratedDefault())
        let access = try connection.query("""
            SELECT a.hit_count, a.last_accessed_at FROM entry_access a JOIN entries e ON e.id = a.entry_id
            WHERE e.namespace = $1 AND e.key = 'k'::bytea
            """, [.text(namespace)]).first
        #expect(try access?.int("hit_count") == 1)
        #expect(try (access?.date("last_accessed_at") ?? .distantPast) >= watching.addingTimeInterval(0.9))
    }
}
