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
        writers.stop.update { $0 = true }
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
                    writers.acknowledged.update { $0.append(key) }
                    writers.ackTimes.update { $0.append(ProcessInfo.processInfo.systemUptime) }
                } else {
                    writers.failures.update { $0[response.status, default: 0] += 1 }
                    if response.header("Connection") == "close" { client = nil }
                    usleep(20_000)
                }
            } catch {
                client = nil
                writers.failures.update { $0[0, default: 0] += 1 }
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
