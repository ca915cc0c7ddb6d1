import CacheCore
import Foundation
import Locking
import Postgres
import TeamCache
import Testing
import TestSupport

/// Every path that takes row locks, run against each other on the same few keys: grouped
/// PUTs (create-only and plain), DELETEs, evictions by tag and by key list, import chunks, reads whose hits
/// the access tracker flushes, the counter fold and the eviction cycle. With one lock order
/// everywhere (docs/consistency.md) there is no deadlock and no 500; before, the counter rows
/// were locked in two orders and "deadlock detected" came within a second.
@Suite struct LockOrderTests {
    /// A loop's request for a round: method, path, headers, body.
    typealias Loop = @Sendable (Int) -> (String, String, [(String, String)], [UInt8])
    static let keys = (0..<3).map { "k\($0)" }

    @Test func writesDeletesAndEvictionsOnSharedKeysNeverDeadlock() throws {
        // A cluster of its own: its deadlock counter counts only this test.
        let database = try PrivateCluster("tc-locks")
        defer { database.remove() }
        let service = try TestService {
            $0.databaseURL = database.url
            $0.authEnabled = false
            $0.accessFlushInterval = 0.05
            $0.evictionInterval = 0.2
        }
        defer { service.stop() }
        let stats = try PostgresConnection(url: database.url)
        let deadlocksBefore = try Self.deadlocks(stats)
        let namespace = TestService.namespace("locks")
        let seconds = Double(ProcessInfo.processInfo.environment["TEAMCACHE_LOCK_TEST_SECONDS"] ?? "") ?? 20
        let deadline = Date().addingTimeInterval(seconds)
        let statuses = Locked<[Int: Int]>([:])
        let port = service.port
        let group = DispatchGroup()
        let loops = Self.loops(namespace)
        for (index, loop) in loops.enumerated() {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                var client = try? RawClient(port: port, timeout: 10)
                var round = 0
                while Date() < deadline {
                    round += 1
                    let (method, path, headers, body) = loop(round &+ index)
                    let status: Int
                    do {
                        guard let open = client else { throw RawClient.Failure.closed }
                        status = try open.request(method, path, headers: headers, body: body).status
                    } catch {
                        status = -1
                        client = try? RawClient(port: port, timeout: 10)
                    }
                    statuses.withLock { $0[status, default: 0] += 1 }
                }
            }
        }
        #expect(group.wait(timeout: .now() + seconds + 30) == .success)
        let seen = statuses.value
        let unexpected = seen.filter { ![200, 201, 204, 404, 412].contains($0.key) }
        #expect(unexpected.isEmpty, "statuses: \(seen)")
        #expect(seen.values.reduce(0, +) > 1000, "too few requests to mean anything: \(seen)")
        // The statistics reach pg_stat_database within a second of a backend's transaction.
        Thread.sleep(forTimeInterval: 1.5)
        #expect(try Self.deadlocks(stats) == deadlocksBefore)
        // The counters still add up to what is stored, once every delta is folded.
        try service.app.store.foldCounters()
        let counted = try stats.query("""
            SELECT (SELECT coalesce(sum(entries), 0) FROM namespace_counters WHERE namespace = $1)::int8 AS counted,
                   (SELECT count(*) FROM entries WHERE namespace = $1)::int8 AS stored
            """, [.text(namespace)]).first
        #expect(try counted?.int("counted") == counted?.int("stored"))
    }

    /// Requests by round: each loop mixes the keys so that every pair of paths meets.
    static func loops(_ namespace: String) -> [Loop] {
        @Sendable func key(_ round: Int) -> String { keys[abs(round % keys.count)] }
        let put: Loop = { round in
            ("PUT", entryPath(namespace, key(round)), [("Cache-Tag", "t\(round % 2)")], Array(repeating: UInt8(round & 0xff), count: 64 + round % 512))
        }
        let createOnly: Loop = { round in
            ("PUT", entryPath(namespace, key(round * 7)), [("If-None-Match", "*"), ("Cache-Tag", "t1")], [1, 2, 3])
        }
        let delete: Loop = { round in
            ("DELETE", entryPath(namespace, key(round * 5)), [], [])
        }
        let read: Loop = { round in
            ("GET", entryPath(namespace, key(round * 3)), [], [])
        }
        let evictTag: Loop = { round in
            ("POST", "/v1/caches/\(namespace)/evict", [("Content-Type", "application/json")],
             Array("{\"tag\":\"t\(round % 2)\"}".utf8))
        }
        let evictKeys: Loop = { round in
            let list = [key(round), key(round + 2), key(round + 4)].map { "\"\($0)\"" }.joined(separator: ",")
            return ("POST", "/v1/caches/\(namespace)/evict", [("Content-Type", "application/json")],
                    Array("{\"keys\":[\(list)]}".utf8))
        }
        // An import chunk over three keys (a key twice, some rounds: then entry by entry), by
        // every conflict policy: one set statement that reads, then writes in key order.
        let importChunk: Loop = { round in
            let lines = [key(round), key(round + 1), key(round * 2)].map {
                "{\"key\":\"\($0)\",\"body\":\"imported \(round)\",\"tags\":[\"t\(round % 2)\"]}"
            }
            let policy = ["replace", "newer", "skip"][abs(round % 3)]
            return ("POST", "/v1/caches/\(namespace)/import?on_conflict=\(policy)",
                    [("Content-Type", "application/x-ndjson")], Array(lines.joined(separator: "\n").utf8))
        }
        return Array(repeating: put, count: 6) + Array(repeating: delete, count: 4)
            + [createOnly, createOnly, read, read, evictTag, evictKeys, importChunk, importChunk]
    }

    static func deadlocks(_ connection: PostgresConnection) throws -> Int {
        try connection.query("SELECT deadlocks::int8 AS n FROM pg_stat_database WHERE datname = current_database()")
            .first?.int("n") ?? -1
    }
}
