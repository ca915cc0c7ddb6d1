import CacheCore
import CacheStore
import Foundation
import Locking
import Postgres
import Testing
import TestSupport

@Suite struct StatsTests {
    let service = TestService.shared

    @Test func hundredHitsShowAfterAFlushWithTokensSaved() throws {
        let namespace = TestService.namespace("stats")
        let token = try writer(namespace)
        let upsert = "{\"model\":\"m\",\"prompt\":\"the prompt text\",\"response\":\"r\",\"metadata\":"
            + "{\"input_tokens\":10,\"output_tokens\":3}}"
        #expect(try service.request("POST", "/v1/caches/\(namespace)/upsert", token: token, json: upsert).status == 201)
        for _ in 0..<100 {
            let hit = try service.request("POST", "/v1/caches/\(namespace)/lookup", token: token,
                                          json: "{\"model\":\"m\",\"prompt\":\"the prompt text\"}")
            #expect(hit.status == 200)
        }
        for _ in 0..<4 { _ = try service.request("GET", entryPath(namespace, "missing"), token: token) }
        try service.app.tracker.flush()
        let stats = try object(try service.request("GET", "/v1/caches/\(namespace)/stats", token: token))
        let lookups = try #require(stats["lookups"] as? [String: Int])
        #expect(lookups["hit"] == 100 && lookups["miss"] == 4)
        #expect(stats["entries"] as? Int == 1)
        #expect(abs((stats["hit_ratio"] as? Double ?? 0) - 100.0 / 104.0) < 0.001)
        #expect(stats["tokens_saved"] as? [String: Int] == ["input": 1000, "output": 300])
        // Read scope sees keys, models and hit counts, not who wrote an entry or what was asked.
        let top = try #require((stats["top"] as? [[String: Any]])?.first)
        #expect(top["hit_count"] as? Int == 100 && top["model"] as? String == "m" && top["key"] is String)
        #expect(top["prompt_digest"] == nil && top["writer_token_id"] == nil, "\(top)")
        let admin = try service.token([.admin], namespaces: namespace)
        let detailed = try object(try service.request("GET", "/v1/caches/\(namespace)/stats", token: admin))
        let adminTop = try #require((detailed["top"] as? [[String: Any]])?.first)
        #expect(adminTop["prompt_digest"] as? String == "the prompt text" && adminTop["writer_token_id"] as? Int != nil)
        // The same counts as Prometheus series, which run on from start (not reset by a flush).
        let metrics = try service.metrics()
        for (series, value) in [("teamcache_lookups_total{namespace=\"\(namespace)\",result=\"hit\"}", 100),
                                ("teamcache_lookups_total{namespace=\"\(namespace)\",result=\"miss\"}", 4),
                                ("teamcache_tokens_saved_total{namespace=\"\(namespace)\",kind=\"input\"}", 1000),
                                ("teamcache_tokens_saved_total{namespace=\"\(namespace)\",kind=\"output\"}", 300)] {
            #expect(metrics.contains("\(series) \(value)\n"), "\(series)")
        }
        #expect(!metrics.contains("teamcache_lookups_total{namespace=\"\(namespace)\",result=\"stale\"}"))
    }

    @Test func countsSurviveAGracefulShutdown() throws {
        let service = try TestService { $0.authEnabled = false }
        let namespace = TestService.namespace("flush")
        #expect(try service.request("PUT", entryPath(namespace, "k"), body: [1]).status == 201)
        for _ in 0..<100 { #expect(try service.request("GET", entryPath(namespace, "k")).status == 200) }
        service.stop()
        let connection = try TestDatabase.shared.connect(database: "teamcache")
        let row = try connection.query("""
            SELECT a.hit_count FROM entry_access a JOIN entries e ON e.id = a.entry_id
            WHERE e.namespace = $1 AND e.key = $2
            """, [.text(namespace), .bytes(Array("k".utf8))]).first
        #expect(try row?.int("hit_count") == 100)
    }

    @Test func statsEqualTheTableAfterARandomMix() throws {
        let namespace = TestService.namespace("mix")
        let token = try writer(namespace)
        var generator = SystemRandomNumberGenerator()
        for step in 0..<150 {
            let key = "k\(Int.random(in: 0..<30, using: &generator))"
            switch Int.random(in: 0..<10, using: &generator) {
            case 0..<6:
                let size = Int.random(in: 1..<3000, using: &generator)
                let body = step % 2 == 0 ? randomBytes(size) : Array(String(repeating: "z", count: size).utf8)
                _ = try service.request("PUT", entryPath(namespace, key), token: token, body: body)
            case 6..<8: _ = try service.request("DELETE", entryPath(namespace, key), token: token)
            default: _ = try service.request("POST", "/v1/caches/\(namespace)/evict", token: token,
                                             json: "{\"keys\":[\"\(key)\"]}")
            }
        }
        let stats = try object(try service.request("GET", "/v1/caches/\(namespace)/stats", token: token))
        let connection = try TestDatabase.shared.connect(database: "teamcache")
        let truth = try #require(try connection.query("""
            SELECT count(*)::bigint AS n, coalesce(sum(identity_size), 0)::bigint AS identity,
                   coalesce(sum(stored_size), 0)::bigint AS stored FROM entries WHERE namespace = $1
            """, [.text(namespace)]).first)
        let (entries, identity, stored) = (try truth.int("n"), try truth.int("identity"), try truth.int("stored"))
        #expect(stats["entries"] as? Int == entries)
        let bytes = try #require(stats["bytes"] as? [String: Int])
        #expect(bytes["identity"] == identity && bytes["stored"] == stored)
    }

    @Test func globalStatsNeedAdmin() throws {
        let namespace = TestService.namespace("g")
        let token = try writer(namespace)
        #expect(try service.request("PUT", entryPath(namespace, "k"), token: token, body: [1]).status == 201)
        // Hit more often than entries of other suites sharing the database, or ties at one
        // hit (a suite makes a thousand of those) could keep it out of the top 1,000.
        for _ in 0..<25 {
            #expect(try service.request("GET", entryPath(namespace, "k"), token: token).status == 200)
        }
        try service.app.tracker.flush()
        #expect(try service.request("GET", "/v1/stats", token: token).status == 403)
        let admin = try service.token([.admin], namespaces: "*")
        let global = try object(try service.request("GET", "/v1/stats?top=1000", token: admin))
        #expect(global["entries"] as? Int ?? 0 >= 1)
        let top = try #require(global["top"] as? [[String: Any]])
        #expect(top.contains { $0["namespace"] as? String == namespace && $0["key"] as? String == "k" })
    }
}
