import CacheStore
import Foundation
import Locking
import Postgres
import TeamCache
import Testing
import TestSupport

/// A write given up at its deadline says "outcome unknown" (504), not the 503 that means
/// "not applied, retry"; one still queued then never starts.
@Suite(.serialized) struct AbandonedWriteTests {
    @Test func aWritePastItsDeadlineIsOutcomeUnknownAndAQueuedOneNeverStarts() throws {
        // One write group at a time, however long it is held. The lock timeout is far past the
        // requests' deadlines: the held write must still be waiting when the holder commits,
        // however slowly a loaded machine runs the steps below (with 3 s, in CI, "queued" was
        // sent only after the held write had timed out, and so was committed).
        let (service, url) = try Self.service("abandon", lockTimeout: 15, writeGroups: 1) { $0.http.requestTimeout = 1 }
        defer { service.stop() }
        #expect(try service.request("PUT", entryPath("abandon", "held"), body: Array("v1".utf8)).status == 201)
        let holder = try PostgresConnection(url: url, limits: .unbounded)
        try holder.execute("BEGIN")
        _ = try holder.query("SELECT id FROM entries WHERE namespace = 'abandon' AND key = 'held'::bytea FOR UPDATE")
        let statuses = Locked<[String: (Int, String?)]>([:])
        let group = DispatchGroup()
        func put(_ key: String) {
            group.enter()
            DispatchQueue.global().async {
                defer { group.leave() }
                let answer = try? service.request("PUT", entryPath("abandon", key), body: Array("v2".utf8))
                let type = answer.flatMap { try? object($0)["type"] as? String }
                statuses.withLock { $0[key] = (answer?.status ?? -1, type) }
            }
        }
        put("held")
        // "queued" goes once the held write waits for the row lock: its group is running then,
        // and stays so, so "queued" waits behind it (a fixed delay assumed as much).
        let watcher = try PostgresConnection(url: url, limits: .unbounded)
        let waiting = Date().addingTimeInterval(10)
        while try watcher.query("SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()")
            .first?.int("n") == 0, Date() < waiting {
            Thread.sleep(forTimeInterval: 0.01)
        }
        put("queued")
        #expect(group.wait(timeout: .now() + 12) == .success)
        for key in ["held", "queued"] {
            #expect(statuses.value[key]?.0 == 504, "\(key): \(String(describing: statuses.value[key]))")
            #expect(statuses.value[key]?.1 == "https://teamcache.dev/problems/outcome-unknown")
        }
        try holder.execute("COMMIT")
        // The write that was committing went through (once the lock is let go: asked until
        // seen, not after a fixed second); the one still queued at its deadline never started.
        var held = try service.request("GET", entryPath("abandon", "held")).body
        for _ in 0..<100 where held != Array("v2".utf8) {
            Thread.sleep(forTimeInterval: 0.1)
            held = try service.request("GET", entryPath("abandon", "held")).body
        }
        #expect(held == Array("v2".utf8))
        #expect(try service.request("GET", entryPath("abandon", "queued")).status == 404)
    }

    /// One group runs at a time while it keeps up; one held up by a row lock does not hold
    /// up the writes that come after it: once it has been busy a while (20 ms), a later write
    /// starts a group of its own beside it (up to TEAMCACHE_WRITE_BATCHES).
    @Test func aGroupHeldByALockDoesNotHoldUpLaterWrites() throws {
        let (service, url) = try Self.service("heldgroup", lockTimeout: 20, writeGroups: 2)
        defer { service.stop() }
        #expect(try service.request("PUT", entryPath("heldgroup", "held"), body: Array("v1".utf8)).status == 201)
        let holder = try PostgresConnection(url: url, limits: .unbounded)
        try holder.execute("BEGIN")
        _ = try holder.query("SELECT id FROM entries WHERE namespace = 'heldgroup' AND key = 'held'::bytea FOR UPDATE")
        let heldStatus = Locked<Int?>(nil)
        let held = DispatchGroup()
        held.enter()
        DispatchQueue.global().async {
            defer { held.leave() }
            let status = (try? service.request("PUT", entryPath("heldgroup", "held"), body: Array("v2".utf8)))?.status
            heldStatus.withLock { $0 = status ?? -1 }
        }
        // "free" goes once the held write waits for the row lock (its group is running then).
        let watcher = try PostgresConnection(url: url, limits: .unbounded)
        let waiting = Date().addingTimeInterval(10)
        while try watcher.query("SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()")
            .first?.int("n") == 0, Date() < waiting {
            Thread.sleep(forTimeInterval: 0.01)
        }
        let started = Date()
        #expect(try service.request("PUT", entryPath("heldgroup", "free"), body: Array("v1".utf8)).status == 201)
        let seconds = Date().timeIntervalSince(started)
        #expect(seconds < 5, "a write beside a held group took \(seconds) s")
        #expect(heldStatus.value == nil, "the held group waits for its lock meanwhile")
        try holder.execute("COMMIT")
        #expect(held.wait(timeout: .now() + 10) == .success)
        #expect(heldStatus.value == 200)
        #expect(try service.request("GET", entryPath("heldgroup", "held")).body == Array("v2".utf8))
    }

    /// A service on a database of its own, auth off, with these lock waits and write groups.
    private static func service(_ prefix: String, lockTimeout: TimeInterval, writeGroups: Int,
                                _ tune: (inout Configuration) -> Void = { _ in }) throws -> (TestService, String) {
        let url = try DumpTests.databaseURL(prefix: prefix)
        let service = try TestService {
            $0.databaseURL = url
            $0.authEnabled = false
            $0.sessionLimits.lockTimeout = lockTimeout
            $0.sessionLimits.statementTimeout = lockTimeout + 1
            $0.writeBatchesSetting = writeGroups
            tune(&$0)
        }
        return (service, url)
    }
}
