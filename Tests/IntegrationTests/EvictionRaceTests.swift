import CacheCore
import CacheStore
import Foundation
import Locking
import Postgres
import TeamCache
import Testing
import TestSupport

/// An eviction that selected an entry, then waits for the row while a writer rewrites it,
/// must recheck on the new version: the rewritten entry survives and is not counted.
@Suite(.serialized) struct EvictionRaceTests {
    /// Holds `key`'s row in an open transaction that rewrites it (new body, TTL and write
    /// time), runs `evict` on another thread meanwhile, commits, and returns evict's result.
    private func rewrite<T: Sendable>(_ namespace: String, _ key: String, expiresAt: Date, writtenAt: Date,
                                      url: String? = nil, while evict: @escaping @Sendable () -> T) throws -> T {
        let writer = try PostgresConnection(url: try url ?? TestDatabase.shared.migratedDefault(), limits: .unbounded)
        try writer.execute("BEGIN")
        let updated = try writer.query("""
            UPDATE entries SET body = '\\x0202'::bytea, stored_size = 2, identity_size = 2, expires_at = $1,
                   updated_at = $2 WHERE namespace = $3 AND key = $4
            """, [.timestamp(expiresAt), .timestamp(writtenAt), .text(namespace), .bytes(Array(key.utf8))])
        #expect(updated.affectedRows == 1)
        let result = Locked<T?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            result.withLock { $0 = evict() }
            done.signal()
        }
        // The eviction's DELETE has picked the row by now and waits for its lock.
        Thread.sleep(forTimeInterval: 0.5)
        try writer.execute("COMMIT")
        #expect(done.wait(timeout: .now() + 10) == .success)
        return try #require(result.value)
    }

    @Test func anExpiredEntryRewrittenDuringTheCycleSurvives() throws {
        // A cluster of its own: the cycle is store-wide, and its report must count only this.
        let database = try PrivateCluster("tc-race")
        defer { database.remove() }
        let clock = ManualClock()
        let service = try TestService(clock: clock) {
            $0.databaseURL = database.url
            $0.authEnabled = false
            $0.cache.staleRetention = 0
        }
        defer { service.stop() }
        let namespace = TestService.namespace("race")
        #expect(try service.request("PUT", entryPath(namespace, "k") + "?ttl=10", body: [1]).status == 201)
        clock.advance(by: 20)
        let now = clock.now()
        let eviction = service.app.eviction
        let report = try rewrite(namespace, "k", expiresAt: now.addingTimeInterval(3600), writtenAt: now,
                                 url: database.url) {
            eviction.runCycle()
        }
        #expect(report?.entries[.expired, default: 0] == 0, "\(String(describing: report))")
        let after = try service.request("GET", entryPath(namespace, "k"))
        #expect(after.status == 200 && after.body == [2, 2])
    }

    /// A write moves the access row only to the minute; the idle rule reads the entry's
    /// own write time too, so an entry rewritten within its idle time is not idle.
    @Test func anEntryRewrittenWithinItsIdleTimeIsNotIdle() throws {
        let database = try PrivateCluster("tc-idle")
        defer { database.remove() }
        let clock = ManualClock()
        let service = try TestService(clock: clock) {
            $0.databaseURL = database.url
            $0.authEnabled = false
            $0.cache.idleTTL = 10
        }
        defer { service.stop() }
        let namespace = TestService.namespace("idle")
        #expect(try service.request("PUT", entryPath(namespace, "k"), body: [1]).status == 201)
        #expect(try service.request("PUT", entryPath(namespace, "gone"), body: [1]).status == 201)
        clock.advance(by: 5)
        #expect(try service.request("PUT", entryPath(namespace, "k"), body: [2]).status == 200)
        clock.advance(by: 8)
        let report = service.app.eviction.runCycle()
        #expect(report?.entries[.idle] == 1, "\(String(describing: report))")
        #expect(try service.request("GET", entryPath(namespace, "k")).body == [2])
        #expect(try service.request("GET", entryPath(namespace, "gone")).status == 404)
    }

    @Test func anEntryRewrittenDuringAnEvictByTagSurvives() throws {
        let clock = ManualClock()
        let service = try TestService(clock: clock) { $0.authEnabled = false }
        defer { service.stop() }
        let namespace = TestService.namespace("race-tag")
        for key in ["k", "other"] {
            #expect(try service.request("PUT", entryPath(namespace, key), headers: [("Cache-Tag", "user:42")],
                                        body: [1]).status == 201)
        }
        let now = clock.now()
        let port = service.port
        let evicted = try rewrite(namespace, "k", expiresAt: now.addingTimeInterval(3600),
                                  writtenAt: now.addingTimeInterval(1)) { () -> Int in
            let client = try? RawClient(port: port, timeout: 10)
            let body = "{\"tag\":\"user:42\"}"
            try? client?.send("POST /v1/caches/\(namespace)/evict HTTP/1.1\r\nHost: t\r\nContent-Length: \(body.utf8.count)\r\n\r\n"
                + body)
            guard let response = try? client?.readResponse(), response.status == 200,
                  let json = try? JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any] else { return -1 }
            return json["evicted"] as? Int ?? -1
        }
        // The untouched entry went; the one rewritten after the eviction began stayed.
        #expect(evicted == 1)
        #expect(try service.request("GET", entryPath(namespace, "k")).status == 200)
        #expect(try service.request("GET", entryPath(namespace, "other")).status == 404)
    }

    /// The same past one batch: the rewritten row (the first in key order) is left, and the
    /// eviction goes on to every other match. (Its batch once picked the row, deleted one
    /// fewer than a batch, and took that for the end: 999 of 1,500 went.)
    @Test func anEvictByTagGoesOnPastAnEntryRewrittenDuringIt() throws {
        let clock = ManualClock()
        let service = try TestService(clock: clock) { $0.authEnabled = false }
        defer { service.stop() }
        let namespace = TestService.namespace("race-many")
        let count = EntryStore.evictionBatchSize + 500
        let keys = (0..<count).map { "k" + String(100_000 + $0) }
        let client = try RawClient(port: service.port, timeout: 30)
        for chunk in stride(from: 0, to: count, by: 100) {
            let batch = keys[chunk..<min(chunk + 100, count)]
            try client.send(batch.map { "PUT \(entryPath(namespace, $0)) HTTP/1.1\r\nHost: t\r\nCache-Tag: user:7\r\n"
                + "Content-Length: 1\r\n\r\nx" }.joined())
            for _ in batch { #expect(try client.readResponse().status == 201) }
        }
        let now = clock.now()
        let port = service.port
        let evicted = try rewrite(namespace, keys[0], expiresAt: now.addingTimeInterval(3600),
                                  writtenAt: now.addingTimeInterval(1)) { () -> Int in
            let client = try? RawClient(port: port, timeout: 30)
            let body = "{\"tag\":\"user:7\"}"
            try? client?.send("POST /v1/caches/\(namespace)/evict HTTP/1.1\r\nHost: t\r\nContent-Length: \(body.utf8.count)\r\n\r\n"
                + body)
            guard let response = try? client?.readResponse(), response.status == 200,
                  let json = try? JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any] else { return -1 }
            return json["evicted"] as? Int ?? -1
        }
        #expect(evicted == count - 1)
        #expect(try service.request("GET", entryPath(namespace, keys[0])).status == 200)
        #expect(try service.request("GET", entryPath(namespace, keys[count - 1])).status == 404)
    }
}
