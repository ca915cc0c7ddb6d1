import CacheCore
import Foundation
import Locking
import Postgres
import TeamCache
import Testing
import TestSupport

/// N replicas together run one eviction cycle per interval, not one each.
@Suite struct EvictionScheduleTests {
    private func okRuns(_ port: Int) -> Double {
        guard let client = try? RawClient(port: port, timeout: 5),
              (try? client.send("GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")) != nil,
              let text = try? client.readResponse().text else { return -1 }
        for line in text.split(separator: "\n") where line.hasPrefix("teamcache_eviction_runs_total{outcome=\"ok\"} ") {
            return Double(line.split(separator: " ")[1]) ?? -1
        }
        return 0
    }

    @Test func twoReplicasRunOneCyclePerInterval() throws {
        let database = try TestDatabase.shared.migratedDatabase(prefix: "sched")
        let environment = ["TEAMCACHE_EVICTION_INTERVAL": "1s"]
        let replicas = try (0..<2).map { _ in try ServeProcess(database: database, environment: environment) }
        for replica in replicas { try #require(replica.waitUntilListening()) }
        Thread.sleep(forTimeInterval: 1.5)
        let startRuns = replicas.map { okRuns($0.port) }.reduce(0, +)
        let start = Date().timeIntervalSince1970
        Thread.sleep(forTimeInterval: 10)
        let endRuns = replicas.map { okRuns($0.port) }.reduce(0, +)
        let end = Date().timeIntervalSince1970
        let slots = floor(end) - floor(start)
        #expect(abs((endRuns - startRuns) - slots) <= 1, "\(endRuns - startRuns) cycles in \(slots) intervals")
    }
}
