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
        let url = try DumpTests.databaseURL(prefix: "abandon")
        let service = try TestService {
            $0.databaseURL = url
            $0.authEnabled = false
            $0.http.requestTimeout = 1
            $0.sessionLimits.lockTimeout = 3
            $0.sessionLimits.statementTimeout = 4
            $0.poolSize = 4  // one write batch at a time
        }
        defer { service.stop() }
        #expect(try service.request("PUT", entryPath("abandon", "held"), body: Array("v1".utf8)).status == 201)
        let holder = try PostgresConnection(url: url, limits: .unbounded)
        try holder.execute("BEGIN")
        _ = try holder.query("SELECT id FROM entries WHERE namespace = 'abandon' AND key = 'held'::bytea FOR UPDATE")
        let statuses = Locked<[String: (Int, String?)]>([:])
        let group = DispatchGroup()
        for (key, delay) in [("held", 0.0), ("queued", 0.3)] {
            group.enter()
            DispatchQueue.global().asyncAfter(deadline: .now() + delay) {
                defer { group.leave() }
                let answer = try? service.request("PUT", entryPath("abandon", key), body: Array("v2".utf8))
                let type = answer.flatMap { try? object($0)["type"] as? String }
                statuses.withLock { $0[key] = (answer?.status ?? -1, type) }
            }
        }
        #expect(group.wait(timeout: .now() + 5) == .success)
        for key in ["held", "queued"] {
            #expect(statuses.value[key]?.0 == 504, "\(key): \(String(describing: statuses.value[key]))")
            #expect(statuses.value[key]?.1 == "https://teamcache.dev/problems/outcome-unknown")
        }
        try holder.execute("COMMIT")
        Thread.sleep(forTimeInterval: 1)
        // The write that was committing went through; the one still queued at its deadline never started.
        #expect(try service.request("GET", entryPath("abandon", "held")).body == Array("v2".utf8))
        #expect(try service.request("GET", entryPath("abandon", "queued")).status == 404)
    }
}
