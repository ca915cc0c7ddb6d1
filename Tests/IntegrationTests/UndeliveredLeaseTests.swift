import CacheStore
import Foundation
import Locking
import Postgres
import TeamCache
import Testing
import TestSupport

/// A lease whose grant never reached its caller is given back: nobody holds its id, and the
/// next caller must be granted the key, not told "pending" for as long as it would last.
@Suite(.serialized) struct UndeliveredLeaseTests {
    /// The grant waits on a row lock past the request's deadline (the client gets 503), then
    /// goes through; its answer is dropped, so the lease is released.
    @Test func aGrantPastTheRequestDeadlineIsReleased() throws {
        let url = try DumpTests.databaseURL(prefix: "orphan")
        let service = try TestService {
            $0.databaseURL = url
            $0.authEnabled = false
            $0.http.requestTimeout = 1
            $0.sessionLimits.lockTimeout = 10
            $0.sessionLimits.statementTimeout = 12
        }
        defer { service.stop() }
        let holder = try PostgresConnection(url: url, limits: .unbounded)
        try holder.execute("BEGIN")
        _ = try holder.query("""
            INSERT INTO leases (namespace, key, id_digest, holder, granted_at, expires_at)
            VALUES ('orphan', 'k'::bytea, '\\x00'::bytea, NULL, now(), now())
            """)
        let started = Date()
        let first = try service.request("GET", entryPath("orphan", "k") + "?lease=30")
        // At the request's deadline (1 s), not the lock's (10 s); the holder lets go only then,
        // so the grant is still waiting, however slowly the answer came.
        #expect(first.status == 503, "\(first.status)")
        #expect(Date().timeIntervalSince(started) < 5)
        try holder.execute("ROLLBACK")
        // The grant completes once the holder rolls back; its answer cannot be delivered.
        var next: RawClient.Response?
        for _ in 0..<80 {
            Thread.sleep(forTimeInterval: 0.25)
            let answer = try service.request("GET", entryPath("orphan", "k") + "?lease=30")
            if answer.header("TeamCache-Lease") != nil { next = answer; break }
            #expect(answer.header("Cache-Status")?.contains("pending") == true || answer.status == 503, "\(answer.status)")
        }
        #expect(next?.status == 404 && next?.header("TeamCache-Lease") != nil, "the next caller was not granted the key")
        #expect(Date().timeIntervalSince(started) < 20)
    }
}
