import CacheStore
import Foundation
import Postgres
import TeamCache
import Testing
import TestSupport

/// Fresh hits read from a hot standby (`TEAMCACHE_READ_DATABASE_URL`), with a real primary
/// and a standby made by `pg_basebackup`; replay is paused to make the standby lag on purpose.
@Suite(.serialized) struct ReadReplicaTests {
    static func service(_ cluster: ReplicatedCluster, maxLag: TimeInterval) throws -> TestService {
        try TestService {
            $0.databaseURL = cluster.url(port: cluster.primaryPort)
            $0.readDatabaseURL = cluster.url(port: cluster.standbyPort)
            $0.readMaxLag = maxLag
            $0.authEnabled = false
            // What is read from where is the question here, not what is kept in memory.
            $0.nearCacheBytes = 0
            // One loop: each loop has a standby reader of its own, which knows its lag only
            // once it has read; with two, a request on the loop that has not read yet goes to
            // the primary (rightly), and a test that saw the standby answer on the other loop
            // reads the primary's newer copy (CI, once).
            $0.http.eventLoops = 1
        }
    }

    static func reads(_ service: TestService, _ database: String) throws -> Double {
        metricSample(try service.metrics(), "teamcache_db_reads_total{database=\"\(database)\"}")
    }

    /// Waits until a read naming `position` is served by the standby (it has replayed that far).
    static func waitForStandby(_ service: TestService, _ path: String, _ position: String) throws -> Bool {
        for _ in 0..<100 {
            let before = try reads(service, "standby")
            _ = try service.request("GET", path, headers: [("TeamCache-Min-Position", position)])
            if try reads(service, "standby") > before { return true }
            Thread.sleep(forTimeInterval: 0.05)
        }
        return false
    }

    /// Within the allowed lag the standby answers, stale as it is; a read that names the
    /// position of its own write is answered by the primary until the standby has replayed
    /// it, then by the standby; a key the standby lacks is read from the primary.
    @Test func aReadNamingItsWritesPositionSeesItWhateverTheStandbyLags() throws {
        let cluster = try ReplicatedCluster("replica", synchronous: false)
        defer { cluster.remove() }
        let service = try Self.service(cluster, maxLag: 60)
        defer { service.stop() }
        let path = entryPath("replica", "k")
        let first = try service.request("PUT", path, body: Array("v1".utf8))
        #expect(first.status == 201)
        let p1 = try #require(first.header("TeamCache-Position"))
        #expect(WALPosition(p1) != nil, "a position as PostgreSQL writes it: \(p1)")
        #expect(try Self.waitForStandby(service, path, p1), "the standby never served the first write")
        try cluster.setStandbyReplay(paused: true)
        let second = try service.request("PUT", path, body: Array("v2".utf8))
        let p2 = try #require(second.header("TeamCache-Position"))
        #expect(try #require(WALPosition(p2)) > WALPosition(p1)!)
        // Plain reads come from the standby, which has not replayed v2 (and lags under 60 s).
        let standbyBefore = try Self.reads(service, "standby")
        #expect(try service.request("GET", path).text == "v1")
        #expect(try Self.reads(service, "standby") == standbyBefore + 1)
        // Naming v2's position: the primary answers.
        #expect(try service.request("GET", path, headers: [("TeamCache-Min-Position", p2)]).text == "v2")
        // A key only the primary has is a standby miss, read again from the primary.
        #expect(try service.request("PUT", entryPath("replica", "new"), body: [7]).status == 201)
        #expect(try service.request("GET", entryPath("replica", "new")).body == [7])
        try cluster.setStandbyReplay(paused: false)
        #expect(try Self.waitForStandby(service, path, p2), "the standby never caught up")
        #expect(try service.request("GET", path, headers: [("TeamCache-Min-Position", p2)]).text == "v2")
        // Every write answers its position, DELETE and evict included.
        let deleted = try service.request("DELETE", entryPath("replica", "new"))
        #expect(deleted.status == 204 && deleted.header("TeamCache-Position").flatMap(WALPosition.init) != nil)
        let evicted = try service.request("POST", "/v1/caches/replica/evict", json: "{\"all\":true}")
        #expect(evicted.status == 200 && evicted.header("TeamCache-Position") != nil)
        #expect(try service.request("GET", path, headers: [("TeamCache-Min-Position", "nope")]).status == 400)
        #expect(try service.request("GET", path, headers: [("TeamCache-Min-Position", "1/2/3")]).status == 400)
    }

    /// A read that may wait or take a lease is read from the primary even with a standby that
    /// is current enough for plain reads: a watch (`wait` with the old ETag) answered by the
    /// standby's older copy would park for a change that has already happened.
    @Test func aReadThatMayWaitOrTakeALeaseGoesToThePrimary() throws {
        let cluster = try ReplicatedCluster("replica-wait", synchronous: false)
        defer { cluster.remove() }
        let service = try Self.service(cluster, maxLag: 60)
        defer { service.stop() }
        let path = entryPath("watch", "k")
        let first = try service.request("PUT", path, body: Array("v1".utf8))
        let etag = try #require(first.header("ETag"))
        #expect(try Self.waitForStandby(service, path, try #require(first.header("TeamCache-Position"))))
        try cluster.setStandbyReplay(paused: true)
        #expect(try service.request("PUT", path, body: Array("v2".utf8)).status == 200)
        #expect(try service.request("GET", path).text == "v1", "the standby serves plain reads (lag under 60 s)")
        let started = ProcessInfo.processInfo.systemUptime
        let watch = try service.request("GET", path + "?wait=5", headers: [("If-None-Match", etag)])
        #expect(watch.status == 200 && watch.text == "v2", "\(watch.status) \(watch.text)")
        #expect(ProcessInfo.processInfo.systemUptime - started < 2, "the watch parked on the standby's old copy")
        let standbyBefore = try Self.reads(service, "standby")
        #expect(try service.request("GET", path + "?lease=30").text == "v2")
        #expect(try service.request("POST", "/v1/caches/watch/lookup",
                                    json: "{\"model\":\"m\",\"prompt\":\"p\",\"wait\":1}").status == 200)
        #expect(try Self.reads(service, "standby") == standbyBefore)
        try cluster.setStandbyReplay(paused: false)
    }

    /// A service whose primary URL reaches a standby serves nothing from it: not ready, and
    /// every read and write answers 503 (its sessions refuse a server in recovery).
    @Test func aPrimaryURLThatReachesAStandbyIsRefused() throws {
        let cluster = try ReplicatedCluster("replica-misconfigured", synchronous: false)
        defer { cluster.remove() }
        let service = try TestService {
            $0.databaseURL = cluster.url(port: cluster.standbyPort)
            $0.authEnabled = false
        }
        defer { service.stop() }
        let ready = try service.request("GET", "/readyz")
        #expect(ready.status == 503 && ready.text.contains("standby"), "\(ready.status) \(ready.text)")
        #expect(try service.request("GET", entryPath("x", "k")).status == 503)
        #expect(try service.request("PUT", entryPath("x", "k"), body: [1]).status == 503)
    }

    /// A standby further behind than TEAMCACHE_READ_MAX_LAG serves nothing: reads go to the
    /// primary until it catches up, even while nothing is being written.
    @Test func aStandbyLaggingPastTheLimitIsNotReadFrom() throws {
        let cluster = try ReplicatedCluster("replica-lag", synchronous: false)
        defer { cluster.remove() }
        let service = try Self.service(cluster, maxLag: 0.5)
        defer { service.stop() }
        let path = entryPath("lag", "k")
        let first = try service.request("PUT", path, body: Array("v1".utf8))
        #expect(try Self.waitForStandby(service, path, try #require(first.header("TeamCache-Position"))))
        try cluster.setStandbyReplay(paused: true)
        #expect(try service.request("PUT", path, body: Array("v2".utf8)).status == 200)
        Thread.sleep(forTimeInterval: 1.2)
        let standbyBefore = try Self.reads(service, "standby")
        for _ in 0..<5 { #expect(try service.request("GET", path).text == "v2") }
        #expect(try Self.reads(service, "standby") == standbyBefore, "a standby 1.2 s behind answered")
        let lagging = metricSample(try service.metrics(), "teamcache_read_standby_lag_seconds")
        #expect(lagging >= 1, "the lag gauge said \(lagging) s for a standby paused 1.2 s")
        try cluster.setStandbyReplay(paused: false)
        // Caught up, and idle: the standby is current again and serves.
        Thread.sleep(forTimeInterval: 0.5)
        #expect(try service.request("GET", path).text == "v2")
        #expect(try Self.reads(service, "standby") > standbyBefore)
        let current = metricSample(try service.metrics(), "teamcache_read_standby_lag_seconds")
        #expect(current >= 0 && current < 0.5, "the lag gauge said \(current) s for a caught-up standby")
    }
}
