import Locking
import Foundation
import Postgres
import Testing
import TeamCache
import TestSupport

/// A backlog of changes to number (an eviction of a large namespace, a bulk import) is
/// numbered in the background: no request waits for it. Followers keep being answered (what
/// is numbered, with `more`), and PUT and GET keep their latency.
@Suite(.serialized) struct FeedBacklogTests {
    static func p99(_ samples: [Double]) -> Double {
        let sorted = samples.sorted()
        return sorted[min(sorted.count - 1, Int(Double(sorted.count) * 0.99))]
    }

    /// PUT then GET of one key, `count` times: each pair's seconds.
    static func writeThenRead(_ service: TestService, _ count: Int) throws -> [Double] {
        let client = try RawClient(port: service.port, timeout: 30)
        var seconds: [Double] = []
        for index in 0..<count {
            let started = ProcessInfo.processInfo.systemUptime
            let put = try client.request("PUT", entryPath("latency", "k\(index % 20)"), body: Array("v\(index)".utf8))
            let get = try client.request("GET", entryPath("latency", "k\(index % 20)"))
            #expect(put.status == 200 || put.status == 201)
            #expect(get.status == 200)
            seconds.append(ProcessInfo.processInfo.systemUptime - started)
        }
        return seconds
    }

    @Test func fourHundredThousandPendingChangesStallNoRequest() throws {
        let url = try DumpTests.databaseURL(prefix: "backlog")
        let service = try TestService { $0.databaseURL = url; $0.authEnabled = false }
        defer { service.stop() }
        #expect(try service.request("PUT", entryPath("follow", "k"), body: [1]).status == 201)
        let stop = Locked(false)
        let statuses = Locked<[Int]>([])
        let followers = DispatchGroup()
        for _ in 0..<24 {
            followers.enter()
            Thread.detachNewThread {
                defer { followers.leave() }
                var cursor = "0"
                while !stop.value {
                    guard let client = try? RawClient(port: service.port, timeout: 30),
                          let answer = try? client.request("GET", "/v1/caches/follow/changes?since=\(cursor)&wait=1") else {
                        statuses.withLock { $0.append(-1) }
                        continue
                    }
                    statuses.withLock { $0.append(answer.status) }
                    if let body = try? JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: Any],
                       let next = body["next"] as? String { cursor = next }
                }
            }
        }
        _ = try Self.writeThenRead(service, 50)  // warm
        let baseline = Self.p99(try Self.writeThenRead(service, 300))
        let connection = try PostgresConnection(url: url, limits: .unbounded)
        _ = try connection.query("""
            INSERT INTO entry_changes (namespace, key, kind)
            SELECT 'bulk', int4send(g), 'delete' FROM generate_series(1, 400000) g
            """)
        let samples = try Self.writeThenRead(service, 300)
        let loaded = Self.p99(samples)
        stop.withLock { $0 = true }
        #expect(followers.wait(timeout: .now() + 30) == .success)
        let bad = statuses.value.filter { $0 < 200 || $0 >= 500 }
        #expect(bad.isEmpty, "\(bad.count) of \(statuses.value.count) feed reads failed: \(bad.prefix(5))")
        #expect(loaded <= max(2 * baseline, baseline + 0.1),
                "PUT+GET p99 \(loaded * 1000) ms with the backlog, \(baseline * 1000) ms without")
        // The backlog is numbered in the background, and the feed reaches it.
        var numbered = 0
        let numberingStarted = Date()
        for _ in 0..<120 {
            numbered = try connection.query("SELECT count(*)::int8 AS n FROM entry_changes WHERE seq IS NULL")
                .first?.int("n") ?? -1
            if numbered == 0 { break }
            Thread.sleep(forTimeInterval: 0.5)
        }
        #expect(numbered == 0, "\(numbered) changes still unnumbered")
        let numberedIn = Date().timeIntervalSince(numberingStarted)
        print("feed backlog: PUT+GET p99 \(String(format: "%.1f", loaded * 1000)) ms with 400,000 pending changes, "
            + "\(String(format: "%.1f", baseline * 1000)) ms without; \(statuses.value.count) feed reads, none failed; "
            + "the rest numbered \(String(format: "%.1f", numberedIn)) s later")
    }
}
