import Foundation
import Glibc
import Locking
import Postgres
import TeamCache
import Testing
import TestSupport

/// The near-cache across replicas: a write acknowledged on one replica is never hidden on
/// another by that one's kept copy for longer than the notification takes.
@Suite struct NearCacheReplicaTests {
    /// A writer on A, two readers on B, for 20 s (TEAMCACHE_NEAR_TEST_SECONDS): every read
    /// that starts more than 50 ms after a write's 2xx sees that write or a later one.
    @Test func aWriteOnOneReplicaIsSeenOnTheOtherWithin50ms() throws {
        let seconds = ProcessInfo.processInfo.environment["TEAMCACHE_NEAR_TEST_SECONDS"].flatMap(Double.init) ?? 20
        let database = try TestDatabase.shared.migratedDatabase(prefix: "near")
        let a = try ServeProcess(database: database), b = try ServeProcess(database: database)
        defer {
            a.stop(SIGTERM)
            b.stop(SIGTERM)
        }
        try #require(a.waitUntilListening() && b.waitUntilListening())
        let path = "/v1/caches/near/entries/hot"
        let writerPort = a.port, readerPort = b.port
        #expect(try RawClient(port: a.port, timeout: 10).request("PUT", path, body: Array("0".utf8)).status == 201)
        let acks = Locked<[(version: Int, at: TimeInterval)]>([(0, ProcessInfo.processInfo.systemUptime)])
        let reads = Locked<[(started: TimeInterval, version: Int)]>([])
        let end = ProcessInfo.processInfo.systemUptime + seconds
        let group = DispatchGroup()
        group.enter()
        Thread.detachNewThread {
            defer { group.leave() }
            guard let writer = try? RawClient(port: writerPort, timeout: 10) else { return }
            var version = 0
            while ProcessInfo.processInfo.systemUptime < end {
                version += 1
                guard let put = try? writer.request("PUT", path, headers: [("Connection", "keep-alive")],
                                                    body: Array(String(version).utf8)), put.status == 200 else {
                    continue
                }
                acks.withLock { $0.append((version, ProcessInfo.processInfo.systemUptime)) }
                // Long enough between writes for B to keep and serve the entry from memory.
                Thread.sleep(forTimeInterval: 0.03)
            }
        }
        for _ in 0..<2 {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                guard let reader = try? RawClient(port: readerPort, timeout: 10) else { return }
                while ProcessInfo.processInfo.systemUptime < end {
                    let started = ProcessInfo.processInfo.systemUptime
                    guard let get = try? reader.request("GET", path, headers: [("Connection", "keep-alive")]),
                          get.status == 200, let version = Int(String(decoding: get.body, as: UTF8.self)) else { continue }
                    reads.withLock { $0.append((started, version)) }
                    // Paced: this runs beside the other suites (some of which time latencies)
                    // for 20 s, and a few hundred reads a second per reader are plenty here.
                    Thread.sleep(forTimeInterval: 0.002)
                }
            }
        }
        #expect(group.wait(timeout: .now() + seconds + 30) == .success)
        let written = acks.value, seen = reads.value
        #expect(written.count > Int(seconds * 10) && seen.count > written.count * 3, "\(written.count) writes, \(seen.count) reads")
        // A read's lag: how long before it began the first write it does not show was
        // acknowledged (0 when it shows every write acknowledged before it began).
        var ackOf: [Int: TimeInterval] = [:]
        for write in written { ackOf[write.version] = write.at }
        var late = 0, worst = 0.0
        for read in seen {
            guard let missed = ackOf[read.version + 1], missed < read.started else { continue }
            let lag = read.started - missed
            worst = max(worst, lag)
            if lag > 0.05 {
                late += 1
                if late <= 8 {
                    let newest = written.last(where: { $0.at < read.started })?.version ?? -1
                    print("LATE read at \(read.started) saw \(read.version), newest acked \(newest), lag \(lag)")
                }
            }
        }
        #expect(late == 0, "\(late) reads missed a write acknowledged over 50 ms before; worst \(worst * 1000) ms")
        // B answered from memory, not only from the database.
        let metrics = String(decoding: try RawClient(port: b.port, timeout: 10).request("GET", "/metrics").body,
                             as: UTF8.self)
        let nearHits = metrics.split(separator: "\n").first { $0.hasPrefix("teamcache_near_cache_hits_total ") }
            .flatMap { Double($0.split(separator: " ").last ?? "") } ?? 0
        #expect(nearHits > Double(seen.count) / 4, "near-cache hits \(nearHits) of \(seen.count) reads")
        print("near-cache across replicas: \(written.count) writes, \(seen.count) reads, \(Int(nearHits)) from memory; "
            + "worst delay past a 2xx seen: \(String(format: "%.1f", worst * 1000)) ms")
    }

    static func nearGauge(_ service: TestService, _ name: String) throws -> Double {
        let metrics = try service.metrics()
        return metrics.split(separator: "\n").first { $0.hasPrefix(name + " ") }
            .flatMap { Double($0.split(separator: " ").last ?? "") } ?? -1
    }

    /// A TRUNCATE of entries (no row triggers fire) still empties the near-cache (migration
    /// 0010 notifies `*`); a listener that is cut off turns it off until a heartbeat comes back.
    @Test func aTruncateOrALostListenerNeverLeavesStaleEntriesServed() throws {
        let database = try TestDatabase.shared.migratedDatabase(prefix: "neartrunc")
        let service = try TestService {
            let base = TestDatabase.shared.url
            $0.databaseURL = base + (base.contains("?") ? "&" : "?") + "dbname=\(database)"
            $0.authEnabled = false
        }
        defer { service.stop() }
        func waitFor(_ name: String, _ value: Double) throws -> Bool {
            for _ in 0..<100 {
                if try Self.nearGauge(service, name) == value { return true }
                Thread.sleep(forTimeInterval: 0.05)
            }
            return false
        }
        #expect(try waitFor("teamcache_near_cache_enabled", 1), "a heartbeat came back: on")
        let path = "/v1/caches/trunc/entries/k"
        #expect(try service.request("PUT", path, body: [1]).status == 201)
        for _ in 0..<3 { #expect(try service.request("GET", path).status == 200) }
        let before = try Self.nearGauge(service, "teamcache_near_cache_hits_total")
        #expect(try service.request("GET", path).status == 200)
        #expect(try Self.nearGauge(service, "teamcache_near_cache_hits_total") > before, "answered from memory")
        let admin = try TestDatabase.shared.connect(database: database)
        try admin.execute("TRUNCATE entries CASCADE")
        var gone = false
        for _ in 0..<40 where !gone {
            gone = try service.request("GET", path).status == 404
            if !gone { Thread.sleep(forTimeInterval: 0.01) }
        }
        #expect(gone, "the truncated entry is not served from memory")
        // Cut the listener off: the near-cache is off at once, and on again only after a
        // heartbeat made the round trip on the new connection.
        #expect(try service.request("PUT", path, body: [2]).status == 201)
        try admin.execute("""
            SELECT pg_terminate_backend(pid) FROM pg_stat_activity
            WHERE application_name = 'teamcache-listen' AND datname = current_database()
            """)
        #expect(try waitFor("teamcache_near_cache_enabled", 0) || waitFor("teamcache_near_cache_entries", 0))
        #expect(try waitFor("teamcache_near_cache_enabled", 1), "back on after the reconnect's first heartbeat")
        #expect(try service.request("GET", path).body == [2])
    }
}
