import CacheCore
import CacheStore
import Foundation
import Locking
import Observability
import Postgres
import Testing
import TestSupport

/// The access tracker's flush commits in chunks (short row locks): more entries than one
/// chunk still all get their hits, and the namespace its lookup counts.
@Suite struct ChunkedFlushTests {
    @Test func hitsOnMoreEntriesThanAChunkAllArrive() throws {
        let service = try TestService { $0.authEnabled = false }
        defer { service.stop() }
        let namespace = TestService.namespace("chunks")
        let count = AccessTracker.flushChunk * 2 + 37
        Self.writeAndHitOnce(service, namespace, count)
        try service.app.tracker.flush()
        let row = try service.app.pool.withConnection {
            try $0.query("SELECT count(*) AS entries, sum(hit_count)::bigint AS hits FROM entry_access WHERE namespace = $1",
                         [.text(namespace)]).first
        }
        #expect(try row?.int("entries") == count && row?.int("hits") == count)
        let stats = try object(try service.request("GET", "/v1/caches/\(namespace)/stats"))
        #expect((stats["lookups"] as? [String: Int])?["hit"] == count)
    }

    /// A stop's last flush writes every hit count, even when more entries wait than a tick
    /// writes at once (a tick would put them off: `AccessTracker.flushIfDue`).
    @Test func aStopWritesHitCountsATickWouldPutOff() throws {
        let service = try TestService { $0.authEnabled = false }
        var running = true
        defer { if running { service.stop() } }
        let namespace = TestService.namespace("stopflush")
        let count = AccessTracker.deferrableEntries + 37
        Self.writeAndHitOnce(service, namespace, count)
        // Its ticks would not come within the test (3600 s): only the stop can write them.
        try service.app.tracker.flushIfDue()
        let before = try service.app.pool.withConnection {
            try $0.query("SELECT coalesce(sum(hit_count), 0)::bigint AS hits FROM entry_access WHERE namespace = $1",
                         [.text(namespace)]).first
        }
        #expect(try before?.int("hits") == 0, "the tick was not put off")
        service.stop()
        running = false
        let database = try PostgresConnection(url: try TestDatabase.shared.migratedDefault())
        let row = try database.query("SELECT sum(hit_count)::bigint AS hits FROM entry_access WHERE namespace = $1",
                                     [.text(namespace)]).first
        #expect(try row?.int("hits") == count)
    }

    /// Writes `count` entries and reads each once, over 8 threads. A request whose connection
    /// fails under the loaded parallel suite is sent again: these tests are about the flush, and
    /// need every write and exactly one hit each.
    private static func writeAndHitOnce(_ service: TestService, _ namespace: String, _ count: Int) {
        DispatchQueue.concurrentPerform(iterations: 8) { worker in
            func until(_ expected: Int, _ send: () throws -> Int) {
                for _ in 0..<3 {
                    if (try? send()) == expected { return }
                }
            }
            for index in stride(from: worker, to: count, by: 8) {
                until(201) { try service.request("PUT", entryPath(namespace, "k\(index)"), body: [UInt8(index % 256)]).status }
                until(200) { try service.request("GET", entryPath(namespace, "k\(index)")).status }
            }
        }
    }
}
