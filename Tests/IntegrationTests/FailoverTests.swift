import Locking
import Foundation
import Postgres
import TeamCache
import Testing
import TestSupport

/// A primary killed under load and its synchronous standby promoted, as Patroni or
/// CloudNativePG would: the service follows through a libpq multi-host URL with
/// `target_session_attrs=read-write`, without a restart, and loses no acknowledged write.
@Suite(.serialized) struct FailoverTests {
    final class Writers: @unchecked Sendable {
        // @unchecked: every field is a Locked.
        let acknowledged = Locked<[String]>([])
        let failures = Locked<[Int: Int]>([:])
        /// Uptime of each acknowledged write.
        let ackTimes = Locked<[TimeInterval]>([])
        let stop = Locked(false)
    }

    @Test func aKilledPrimaryIsFollowedToThePromotedStandbyLosingNoAcknowledgedWrite() throws {
        let cluster = try ReplicatedCluster("failover")
        defer { cluster.remove() }
        let service = try TestService {
            $0.databaseURL = cluster.failoverURL
            $0.authEnabled = false
        }
        defer { service.stop() }
        #expect(try service.request("GET", "/readyz").status == 200)
        let writers = Writers()
        let group = DispatchGroup()
        for writer in 0..<4 {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                Self.write(service.port, writer: writer, into: writers)
            }
        }
        Thread.sleep(forTimeInterval: 2)
        let beforeKill = writers.acknowledged.value.count
        try cluster.killPrimary()
        let killed = ProcessInfo.processInfo.systemUptime
        // No primary anywhere: the service says so (the standby is reachable but read-only).
        #expect(Self.waitFor(seconds: 3) { (try? service.request("GET", "/readyz").status) == 503 },
                "/readyz stayed ready with no primary")
        let unready = try service.request("GET", "/readyz")
        #expect(unready.header("Retry-After") == "1")
        Thread.sleep(forTimeInterval: max(0, 1.2 - (ProcessInfo.processInfo.systemUptime - killed)))
        // From the promote request: `pg_ctl promote -w` returns once the standby accepts writes.
        let promoted = ProcessInfo.processInfo.systemUptime
        try cluster.promoteStandby()
        #expect(Self.waitFor(seconds: 10) { (try? service.request("GET", "/readyz").status) == 200 },
                "/readyz never became ready on the promoted standby")
        Thread.sleep(forTimeInterval: 2)
        writers.stop.withLock { $0 = true }
        #expect(group.wait(timeout: .now() + 30) == .success)
        let acknowledged = writers.acknowledged.value
        let resumed = writers.ackTimes.value.first { $0 > promoted }.map { $0 - promoted }
        #expect(resumed != nil && resumed! < 3, "writes resumed \(resumed ?? -1) s after the promotion")
        #expect(acknowledged.count > beforeKill + 10, "writes went on after the failover")
        // Every acknowledged write is on the new primary.
        let newPrimary = try PostgresConnection(url: cluster.url(port: cluster.standbyPort))
        let stored = try newPrimary.query("SELECT count(*)::int8 AS n FROM entries WHERE namespace = 'failover' "
                                          + "AND key = ANY($1)", [.bytesArray(acknowledged.map { Array($0.utf8) })]).first?.int("n")
        #expect(stored == acknowledged.count, "\(acknowledged.count - (stored ?? 0)) acknowledged writes lost")
        print("failover: \(acknowledged.count) writes acknowledged, \(acknowledged.count - (stored ?? 0)) lost, "
              + "writes again \(String(format: "%.2f", resumed ?? -1)) s after the promotion; failures \(writers.failures.value)")
        try readsAndWaitsFollow(service)
    }

    /// After the failover, reads (the loops' batched-read connections) and the listener
    /// (a waiter woken by its fill) work on the new primary.
    /// An asynchronous standby promoted before it replayed the last commit: the new primary
    /// numbers its changes on a new timeline past a gap, so a follower whose cursor came from
    /// the lost commit is told to resync (410) instead of silently skipping the changes numbered
    /// again, while a follower from before the loss follows on.
    @Test func aFollowerPastLostCommitsIsToldToResync() throws {
        let cluster = try ReplicatedCluster("feedloss", synchronous: false)
        defer { cluster.remove() }
        let service = try TestService {
            $0.databaseURL = cluster.failoverURL
            $0.authEnabled = false
        }
        defer { service.stop() }
        let namespace = "followed"
        #expect(try service.request("PUT", entryPath(namespace, "kept"), body: [1]).status == 201)
        let before = try ChangeFeedTests.page(service, namespace, since: "0")
        #expect(before.changes.count == 1)
        // The standby has everything so far; then it stops receiving WAL (an asynchronous
        // standby cut off), and one more commit is made (and followed) on the primary only.
        // (Pausing replay is not enough: promotion replays whatever was received.)
        let primary = try PostgresConnection(url: cluster.url(port: cluster.primaryPort), limits: .unbounded)
        let flushed = try #require(try primary.query("SELECT pg_current_wal_lsn()::text AS lsn").first?.string("lsn"))
        let standby = try PostgresConnection(url: cluster.url(port: cluster.standbyPort), limits: .unbounded)
        #expect(Self.waitFor(seconds: 10) {
            (try? standby.query("SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn AS done", [.text(flushed)])
                .first?.bool("done")) == true
        }, "the standby never caught up")
        _ = try standby.query("ALTER SYSTEM SET primary_conninfo = ''")
        _ = try standby.query("SELECT pg_reload_conf()")
        #expect(Self.waitFor(seconds: 10) {
            (try? standby.query("SELECT count(*) AS n FROM pg_stat_wal_receiver").first?.int("n")) == 0
        }, "the standby's WAL receiver did not stop")
        #expect(try service.request("PUT", entryPath(namespace, "lost"), body: [2]).status == 201)
        let followed = try ChangeFeedTests.page(service, namespace, since: before.next)
        #expect(followed.changes.map { $0["key"] as? String } == ["lost"])
        try cluster.killPrimary()
        try cluster.promoteStandby()
        #expect(Self.waitFor(seconds: 10) { (try? service.request("GET", "/readyz").status) == 200 },
                "/readyz never became ready on the promoted standby")
        #expect(Self.waitFor(seconds: 10) {
            (try? service.request("PUT", entryPath(namespace, "after"), body: [3]).status) == 201
        }, "no write succeeded on the promoted standby")
        #expect(try service.request("GET", entryPath(namespace, "lost")).status == 404)
        let past = try ChangeFeedTests.page(service, namespace, since: followed.next)
        #expect(past.status == 410, "\(past.status) \(past.object)")
        #expect(past.object["title"] as? String == "Cursor lost in a failover")
        let resumed = try ChangeFeedTests.page(service, namespace, since: before.next)
        #expect(resumed.status == 200 && resumed.changes.map { $0["key"] as? String } == ["after"], "\(resumed.object)")
    }

    func readsAndWaitsFollow(_ service: TestService) throws {
        let path = entryPath("failover", "after")
        #expect(try service.request("PUT", path, body: Array("after".utf8)).status == 201)
        #expect(try service.request("GET", path).text == "after")
        // The listener reconnects on its own schedule; a waiter parked before that is
        // still answered (it re-checks when the listener comes back), so give it a moment.
        Thread.sleep(forTimeInterval: 1)
        try WaitTests.fillWakesWaiters(service, count: 2, prefix: "failover-wait")
    }

    /// One writer: PUTs of new keys, as fast as answers come, until told to stop.
    static func write(_ port: Int, writer: Int, into writers: Writers) {
        var client: RawClient?
        var sequence = 0
        while !writers.stop.value {
            sequence += 1
            let key = "w\(writer)-\(sequence)"
            do {
                if client == nil { client = try RawClient(port: port, timeout: 10) }
                let response = try client!.request("PUT", entryPath("failover", key),
                                                   headers: [("Connection", "keep-alive")], body: Array(key.utf8))
                if response.status == 201 {
                    writers.acknowledged.withLock { $0.append(key) }
                    writers.ackTimes.withLock { $0.append(ProcessInfo.processInfo.systemUptime) }
                } else {
                    writers.failures.withLock { $0[response.status, default: 0] += 1 }
                    if response.header("Connection") == "close" { client = nil }
                    usleep(20_000)
                }
            } catch {
                client = nil
                writers.failures.withLock { $0[0, default: 0] += 1 }
                usleep(20_000)
            }
        }
    }

    static func waitFor(seconds: Double, _ condition: () -> Bool) -> Bool {
        let end = ProcessInfo.processInfo.systemUptime + seconds
        while ProcessInfo.processInfo.systemUptime < end {
            if condition() { return true }
            Thread.sleep(forTimeInterval: 0.05)
        }
        return condition()
    }
}
