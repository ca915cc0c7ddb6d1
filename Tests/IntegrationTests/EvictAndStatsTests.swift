import CacheCore
import CacheStore
import Foundation
import Locking
import Postgres
import Testing
import TestSupport

@Suite struct EvictByPredicateTests {
    let service = TestService.shared
    let namespace = TestService.namespace("evict")
    let token: String

    init() throws { token = try writer(namespace) }

    func put(_ key: String, tags: String? = nil) throws {
        let headers = tags.map { [("Cache-Tag", $0)] } ?? []
        #expect(try service.request("PUT", entryPath(namespace, key), token: token, headers: headers, body: [1]).status
            == 201)
    }

    func evict(_ json: String, in space: String? = nil) throws -> RawClient.Response {
        try service.request("POST", "/v1/caches/\(space ?? namespace)/evict", token: token, json: json)
    }

    func exists(_ key: String) throws -> Bool {
        try service.request("GET", entryPath(namespace, key), token: token).status == 200
    }

    @Test func predicatesCombineWithAnd() throws {
        try put("a", tags: "user:42, x")
        try put("b", tags: "user:42")
        try put("c", tags: "other")
        #expect(try object(try evict("{\"tag\":\"user:42\",\"keys\":[\"b\",\"c\"]}"))["evicted"] as? Int == 1)
        #expect(try exists("a") && !exists("b") && exists("c"))
        #expect(try object(try evict("{\"tag\":\"user:42\"}"))["evicted"] as? Int == 1)
        #expect(try !exists("a") && exists("c"))
        #expect(try object(try evict("{\"older_than\":3600}"))["evicted"] as? Int == 0)
        #expect(try object(try evict("{\"created_before\":\"2999-01-01T00:00:00Z\"}"))["evicted"] as? Int == 1)
    }

    @Test func emptyOrMisspeltPredicatesAreRefused() throws {
        try put("keep")
        #expect(try evict("{}").status == 400)
        #expect(try evict("{\"tags\":\"x\"}").status == 400)
        #expect(try evict("{\"all\":false}").status == 400)
        #expect(try evict("{\"created_before\":\"yesterday\"}").status == 400)
        // Found by schemathesis: a cut-off before PostgreSQL's timestamp range was a 500.
        #expect(try evict("{\"idle_for\":1504951335516}").status == 400)
        #expect(try evict("{\"older_than\":3153600000}").status == 200)
        #expect(try exists("keep"))
    }

    @Test func allTouchesOnlyItsNamespace() throws {
        let other = TestService.namespace("evict-other")
        let otherToken = try writer(other)
        #expect(try service.request("PUT", entryPath(other, "k"), token: otherToken, body: [1]).status == 201)
        try put("k")
        #expect(try object(try evict("{\"all\":true}"))["evicted"] as? Int == 1)
        #expect(try service.request("GET", entryPath(other, "k"), token: otherToken).status == 200)
    }

    @Test func modelAndVersionPredicates() throws {
        let post = { (json: String) in
            try service.request("POST", "/v1/caches/\(namespace)/upsert", token: token, json: json)
        }
        #expect(try post("{\"model\":\"m1\",\"prompt\":\"a\",\"version\":\"v1\",\"response\":\"x\"}").status == 201)
        #expect(try post("{\"model\":\"m1\",\"prompt\":\"b\",\"version\":\"v2\",\"response\":\"x\"}").status == 201)
        #expect(try post("{\"model\":\"m2\",\"prompt\":\"c\",\"version\":\"v1\",\"response\":\"x\"}").status == 201)
        #expect(try object(try evict("{\"model\":\"m1\",\"version\":\"v1\"}"))["evicted"] as? Int == 1)
        #expect(try object(try evict("{\"version\":\"v1\"}"))["evicted"] as? Int == 1)
    }
}

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

@Suite struct EvictionJobTests {
    /// 10,000 entries in a database of their own; two jobs race; exactly the expired, idle
    /// and over-quota entries go, each once.
    @Test func twoRacingJobsEvictExactlyTheRightEntriesOnce() throws {
        let database = try TestDatabase.shared.migratedDatabase(prefix: "evjob")
        let pool = ConnectionPool(.init(url: TestDatabase.shared.url,
                                        overrides: TestDatabase.shared.overrides(database: database),
                                        maxConnections: 8))
        var policy = CachePolicy()
        policy.staleRetention = 3600
        policy.idleTTL = 86400
        let clock = ManualClock()
        let store = EntryStore(pool: pool, policy: policy, clock: clock)
        let now = clock.now()
        try pool.withConnection { connection in
            // 'main': 10,000 entries: every 10th expired past retention, every 10th (offset 5) idle
            // (neither read nor written for two days).
            try connection.query("""
                INSERT INTO entries (namespace, key, body, encoding, content_type, identity_size, stored_size, etag,
                                     created_at, updated_at, expires_at)
                SELECT 'main', convert_to('k' || i, 'UTF8'), '\\x00', 'identity', 't', 1, 1, 'e',
                       CASE WHEN i % 10 = 5 THEN $1 - interval '2 days' ELSE $1 END,
                       CASE WHEN i % 10 = 5 THEN $1 - interval '2 days' ELSE $1 END,
                       CASE WHEN i % 10 = 0 THEN $1 - interval '2 hours' ELSE $1 + interval '1 day' END
                FROM generate_series(1, 10000) AS i
                """, [.timestamp(now)])
            try connection.query("""
                INSERT INTO entry_access (entry_id, namespace, hit_count, last_accessed_at)
                SELECT id, namespace, 0, CASE WHEN convert_from(key, 'UTF8') ~ '5$' THEN $1 - interval '2 days'
                                              ELSE $1 - (substring(convert_from(key, 'UTF8') FROM 2)::int * interval '1 second') END
                FROM entries
                """, [.timestamp(now)])
            // 'quota': 100 entries of 10 bytes under a 500-byte quota: the 50 least recent go.
            try connection.query("""
                INSERT INTO entries (namespace, key, body, encoding, content_type, identity_size, stored_size, etag,
                                     created_at, updated_at, expires_at)
                SELECT 'quota', convert_to('q' || i, 'UTF8'), '\\x00010203040506070809', 'identity', 't', 10, 10, 'e',
                       $1, $1, $1 + interval '1 day' FROM generate_series(1, 100) AS i
                """, [.timestamp(now)])
            try connection.query("""
                INSERT INTO entry_access (entry_id, namespace, hit_count, last_accessed_at)
                SELECT id, namespace, 0, $1 - (substring(convert_from(key, 'UTF8') FROM 2)::int * interval '1 minute')
                FROM entries WHERE namespace = 'quota'
                """, [.timestamp(now)])
            try connection.query("INSERT INTO namespace_settings (namespace, max_bytes) VALUES ('quota', 500)")
        }
        let reports = Locked<[EvictionJob.Report]>([])
        DispatchQueue.concurrentPerform(iterations: 2) { _ in
            if let report = EvictionJob(store: store).runCycle() { reports.withLock { $0.append(report) } }
        }
        let total = reports.value.reduce(into: [EvictionJob.Reason: Int]()) { sum, report in
            for (reason, count) in report.entries { sum[reason, default: 0] += count }
        }
        #expect(total[.expired] == 1000)
        #expect(total[.idle] == 1000)  // keys ending in 5: never a multiple of 10
        #expect(total[.size] == 50)
        try pool.withConnection { connection in
            let main = try connection.query("""
                SELECT count(*)::int AS n FROM entries WHERE namespace = 'main'
                  AND (expires_at < $1 OR convert_from(key, 'UTF8') ~ '5$')
                """, [.timestamp(now)])
            #expect(try main.first?.int("n") == 0)
            #expect(try connection.query("SELECT count(*)::int AS n FROM entries WHERE namespace = 'main'").first?
                .int("n") == 8000)
            // The 50 most recently used (q1..q50: smallest age) stay.
            let kept = try connection.query("""
                SELECT count(*)::int AS n FROM entries WHERE namespace = 'quota'
                  AND substring(convert_from(key, 'UTF8') FROM 2)::int <= 50
                """)
            #expect(try kept.first?.int("n") == 50)
        }
        let stats = try store.stats(Namespace("quota")!, top: 0)
        #expect(stats.entries == 50 && stats.storedBytes == 500)
        // A second cycle finds nothing more to do.
        #expect(EvictionJob(store: store).runCycle()?.isEmpty == true)
    }
}

/// A token cannot grow `/metrics` or the server's memory by asking for namespaces that
/// hold nothing: those lookups are counted under one `_other` series.
@Suite(.serialized) struct NamespaceCardinalityTests {
    @Test func tenThousandEmptyNamespacesLeaveMetricsBounded() throws {
        // A database of its own: the namespace gauges list every namespace of the database,
        // and other suites add theirs to the shared one while this counts lines.
        let name = try TestDatabase.shared.migratedDatabase(prefix: "card")
        let base = TestDatabase.shared.url
        let url = base + (base.contains("?") ? "&" : "?") + "dbname=\(name)"
        let service = try TestService { $0.databaseURL = url }
        defer { service.stop() }
        let token = try service.token([.read, .write], namespaces: "*")
        let reader = try service.token([.read], namespaces: "*")
        let held = TestService.namespace("held")
        #expect(try service.request("PUT", entryPath(held, "k"), token: token, body: [1]).status == 201)
        // Every route's and status's series exist before the count starts.
        #expect(try service.request("GET", entryPath(held, "k"), token: token).status == 200)
        #expect(try service.request("GET", entryPath(held, "nope"), token: token).status == 404)
        _ = try service.metrics()
        let before = try service.metrics().split(separator: "\n").count
        let client = try RawClient(port: service.port, timeout: 10)
        let prefix = TestService.namespace("empty")
        for batch in 0..<100 {
            var requests = ""
            for index in 0..<100 {
                requests += "GET /v1/caches/\(prefix)-\(batch * 100 + index)/entries/k HTTP/1.1\r\nHost: t\r\n"
                    + "Authorization: Bearer \(reader)\r\n\r\n"
            }
            try client.send(requests)
            for _ in 0..<100 { #expect(try client.readResponse().status == 404) }
        }
        let metrics = try service.metrics()
        let after = metrics.split(separator: "\n").count
        // No series names an empty namespace; they are all in `_other` (other new lines, a
        // status class or a histogram, do not depend on how many namespaces were asked for).
        #expect(!metrics.contains(prefix), "a series names an empty namespace")
        #expect(after - before < 40, "/metrics grew from \(before) to \(after) lines")
        #expect(metrics.contains("teamcache_lookups_total{namespace=\"_other\",result=\"miss\"} 10000"))
        #expect(metrics.contains("teamcache_lookups_total{namespace=\"\(held)\",result=\"miss\"} 1"))
        #expect(metrics.contains("teamcache_lookups_total{namespace=\"\(held)\",result=\"hit\"} 1"))
        // Nor do they get stats rows in the database; the store-wide totals still count them.
        try service.app.tracker.flush()
        let connection = try TestDatabase.shared.connect(database: name)
        let rows = try connection.query("SELECT count(*)::int8 AS n FROM namespace_counters WHERE namespace LIKE $1",
                                        [.text(prefix + "%")])
        #expect(try rows.rows.first?.int("n") == 0)
        // A token that may write them gets a namespace's first misses counted as its own, up to
        // the provisional cap (100): asking for 300 names labels 100, the rest go to `_other`.
        let written = TestService.namespace("written")
        var requests = ""
        for index in 0..<300 {
            requests += "GET /v1/caches/\(written)-\(index)/entries/k HTTP/1.1\r\nHost: t\r\n"
                + "Authorization: Bearer \(token)\r\n\r\n"
        }
        try client.send(requests)
        for _ in 0..<300 { #expect(try client.readResponse().status == 404) }
        let labelled = try service.metrics().split(separator: "\n")
            .filter { $0.hasPrefix("teamcache_lookups_total{namespace=\"\(written)-") }
        #expect(labelled.count == NamespaceLabels.defaultProvisionalCapacity, "\(labelled.count) labelled")
        #expect(try service.metrics().contains("teamcache_lookups_total{namespace=\"_other\",result=\"miss\"} 10200"))
    }
}
