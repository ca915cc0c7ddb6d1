@testable import CacheCore
import CacheStore
import Foundation
import Glibc
import Postgres
import Testing
import TestSupport

/// Reads batched from the event loops: many requests in one statement, each answered with
/// its own entry, and the failure paths (a stalled or killed read connection).
@Suite(.serialized) struct BatchedReadTests {
    /// Concurrent GETs over many connections, present and absent keys in two namespaces:
    /// each answer is its own key's body, and the statements carried more than one read.
    @Test func concurrentReadsShareStatementsAndEachGetsItsOwnEntry() throws {
        // Every read must reach the batcher: no near-cache answering repeats from memory.
        let service = try TestService {
            $0.authEnabled = false
            $0.nearCacheBytes = 0
        }
        defer { service.stop() }
        let namespaces = [TestService.namespace("batch"), TestService.namespace("batch")]
        var bodies: [String: [UInt8]] = [:]
        for namespace in namespaces {
            for index in 0..<60 {
                let body = randomBytes(64 + index * 37)
                bodies[entryPath(namespace, "k\(index)")] = body
                #expect(try service.request("PUT", entryPath(namespace, "k\(index)"), body: body).status == 201)
            }
        }
        var reads = 0
        for _ in 0..<6 {
            // Every request is sent before any answer is read, so the loops see them together.
            let paths = (0..<48).map { index in
                index % 8 == 0 ? entryPath(namespaces[index % 2], "absent-\(index)")
                    : entryPath(namespaces[index % 2], "k\(Int.random(in: 0..<60))")
            }
            let clients = try paths.map { _ in try RawClient(port: service.port, timeout: 10) }
            for (client, path) in zip(clients, paths) {
                try client.send("GET \(path) HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            }
            for (client, path) in zip(clients, paths) {
                let response = try client.readResponse()
                if let body = bodies[path] {
                    #expect(response.status == 200 && response.body == body, "\(path)")
                } else {
                    #expect(response.status == 404, "\(path)")
                }
            }
            reads += paths.count
        }
        let metrics = try service.metrics()
        let statements = metricSample(metrics, "teamcache_db_read_batch_size_count")
        #expect(metricSample(metrics, "teamcache_db_read_batch_size_sum") >= Double(reads))
        #expect(statements > 0 && statements < Double(reads), "every read had a statement of its own")
    }

    /// TEAMCACHE_READ_BATCH=0: reads go through the pool on workers, answers unchanged.
    @Test func batchingOffReadsThroughThePool() throws {
        let service = try TestService {
            $0.authEnabled = false
            $0.readBatch = 0
        }
        defer { service.stop() }
        let path = entryPath(TestService.namespace("nobatch"), "k")
        #expect(try service.request("PUT", path, body: [1, 2, 3]).status == 201)
        let response = try service.request("GET", path)
        #expect(response.status == 200 && response.body == [1, 2, 3])
        #expect(!(try service.metrics().contains("teamcache_db_read_batch_size")))
    }

    /// A read connection whose server stops answering: the reads waiting on it get 503
    /// within the read timeout (no hang), later reads go through the pool, and the loop
    /// reconnects once the backend is gone. A killed read connection is replaced the same way.
    @Test func stalledOrKilledReadConnectionFailsFastAndIsReplaced() throws {
        let database = try PrivateCluster("tc-reads")
        defer { database.remove() }
        let url = database.url
        let service = try TestService { configuration in
            configuration.databaseURL = url
            configuration.authEnabled = false
            configuration.readTimeout = 0.5
            configuration.http.eventLoops = 1
            // Every read must go to the stalled connection: none answered from kept entries.
            configuration.nearCacheBytes = 0
        }
        defer { service.stop() }
        let path = entryPath("reads", "k")
        #expect(try service.request("PUT", path, body: [7]).status == 201)
        let admin = try PostgresConnection(url: url)
        let readers = try readerPIDs(admin, count: 1)
        // The backend exists before the loop has the session (it connects, checks it reached a
        // primary and prepares first): stop it only once a read has gone through the loop.
        try waitForABatchedRead(service, path)

        for pid in readers { kill(pid, SIGSTOP) }
        let started = Date()
        let stalled = try service.request("GET", path)
        let waited = Date().timeIntervalSince(started)
        #expect(stalled.status == 503 && stalled.header("Retry-After") != nil)
        #expect(waited >= 0.4 && waited < 2, "answered after \(waited) s")
        #expect(try service.request("GET", path).status == 200, "the pool answers while the loop reconnects")
        for pid in readers { kill(pid, SIGCONT) }

        let replaced = try readerPIDs(admin, count: 1, excluding: readers)
        try admin.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = $1",
                        [.int(Int64(replaced[0]))])
        for _ in 0..<20 {
            let status = try service.request("GET", path).status
            #expect(status == 200 || status == 503)
        }
        // The read that meets the dead session may answer 503; the loop replaces it by itself.
        _ = try readerPIDs(admin, count: 1, excluding: readers + replaced)
        // Every read from here on is answered at once: the new session is watched, though
        // libpq closed the broken socket itself and the new one often reuses its number.
        for _ in 0..<10 {
            let started = Date()
            let response = try service.request("GET", path)
            let waited = Date().timeIntervalSince(started)
            #expect(response.status == 200 && response.body == [7] && waited < 0.4, "\(response.status) after \(waited) s")
            Thread.sleep(forTimeInterval: 0.05)
        }
    }

    /// The backends of the service's read connections, once `count` of them are connected.
    private func waitForABatchedRead(_ service: TestService, _ path: String) throws {
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            _ = try service.request("GET", path)
            if metricSample(try service.metrics(), "teamcache_db_read_batch_size_count") > 0 { return }
            Thread.sleep(forTimeInterval: 0.05)
        }
        throw CocoaError(.fileReadUnknown)
    }

    private func readerPIDs(_ admin: PostgresConnection, count: Int, excluding: [Int32] = []) throws -> [Int32] {
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            let rows = try admin.query("SELECT pid FROM pg_stat_activity WHERE application_name = $1",
                                       [.text(EntryReadBatcher.applicationName)]).rows
            let pids = try rows.compactMap { try $0.int("pid") }.map { Int32($0) }.filter { !excluding.contains($0) }
            if pids.count >= count { return pids }
            Thread.sleep(forTimeInterval: 0.05)
        }
        throw CocoaError(.fileReadUnknown)
    }
}
