import CacheCore
import Foundation
import Postgres
import Testing
import TeamCache
import TestSupport

@Suite struct AuthTests {
    let service = TestService.shared
    let namespace = TestService.namespace("auth")

    /// One request per route family: (method, path, JSON body or nil).
    var families: [(String, String, String?)] {
        [
            ("GET", entryPath(namespace, "k"), nil),
            ("PUT", entryPath(namespace, "k"), nil),
            ("DELETE", entryPath(namespace, "k"), nil),
            ("POST", "/v1/caches/\(namespace)/lookup", "{\"model\":\"m\",\"prompt\":\"p\"}"),
            ("POST", "/v1/caches/\(namespace)/upsert", "{\"model\":\"m\",\"prompt\":\"p\",\"response\":\"r\"}"),
            ("POST", "/v1/caches/\(namespace)/evict", "{\"all\":true}"),
            ("GET", "/v1/caches/\(namespace)/stats", nil),
            ("GET", "/v1/caches/\(namespace)/settings", nil),
            ("GET", "/v1/stats", nil),
        ]
    }

    func send(_ family: (String, String, String?), token: String?) throws -> RawClient.Response {
        if let json = family.2 { return try service.request(family.0, family.1, token: token, json: json) }
        return try service.request(family.0, family.1, token: token, body: family.0 == "PUT" ? [1] : [])
    }

    @Test func missingUnknownExpiredOrMalformedTokensAre401() throws {
        let expired = try service.token([.read, .write, .admin], namespaces: "*", expiresAt: Date().addingTimeInterval(-1))
        for family in families {
            for token in [nil, "tc_" + String(repeating: "0", count: 64), expired] {
                let response = try send(family, token: token)
                #expect(response.status == 401, "\(family.0) \(family.1)")
                #expect(response.header("WWW-Authenticate")?.hasPrefix("Bearer realm=\"teamcache\"") == true)
                #expect(response.header("Content-Type") == "application/problem+json")
            }
            let malformed = try service.request(family.0, family.1, headers: [("Authorization", "Basic abc")])
            #expect(malformed.status == 401)
        }
        #expect(try service.request("GET", entryPath(namespace, "k")).header("WWW-Authenticate") == "Bearer realm=\"teamcache\"")
    }

    @Test func wrongNamespaceOrScopeIs403() throws {
        let elsewhere = try service.token([.read, .write], namespaces: "someone-else*")
        for family in families {
            #expect(try send(family, token: elsewhere).status == 403, "\(family.0) \(family.1)")
        }
        let reader = try service.token([.read], namespaces: "auth-*")
        #expect(try service.request("GET", entryPath(namespace, "k"), token: reader).status == 404)
        #expect(try service.request("PUT", entryPath(namespace, "k"), token: reader, body: [1]).status == 403)
        #expect(try service.request("POST", "/v1/caches/\(namespace)/evict", token: reader, json: "{\"all\":true}")
            .status == 403)
        #expect(try service.request("GET", "/v1/caches/\(namespace)/settings", token: reader).status == 403)
        let writerOnly = try service.token([.write], namespaces: namespace)
        #expect(try service.request("PUT", entryPath(namespace, "k"), token: writerOnly, body: [1]).status == 201)
        #expect(try service.request("GET", entryPath(namespace, "k"), token: writerOnly).status == 403)
    }

    /// An admin token reaches what its pattern matches, and the store-wide routes only with
    /// the pattern `*` (an admin of `team-a*` once reached every namespace).
    @Test func adminScopeHonoursTheNamespacePattern() throws {
        let everywhere = try service.token([.admin], namespaces: "*")
        #expect(try service.request("PUT", entryPath(namespace, "a"), token: everywhere, body: [1]).status == 201)
        #expect(try service.request("GET", "/v1/caches/\(namespace)/settings", token: everywhere).status == 200)
        #expect(try service.request("GET", "/v1/stats", token: everywhere).status == 200)
        let elsewhere = try service.token([.admin], namespaces: "nothing-matches")
        for (method, path) in [("GET", entryPath(namespace, "a")), ("GET", "/v1/caches/\(namespace)/settings"),
                               ("POST", "/v1/caches/\(namespace)/evict"), ("GET", "/v1/caches/\(namespace)/export"),
                               ("GET", "/v1/caches/\(namespace)/stats"), ("GET", "/v1/stats")] {
            let answer = try service.request(method, path, token: elsewhere, json: method == "POST" ? "{\"all\":true}" : "")
            #expect(answer.status == 403, "\(method) \(path): \(answer.status)")
        }
        #expect(try service.request("GET", entryPath(namespace, "a"), token: everywhere).status == 200)
        let scoped = try service.token([.admin], namespaces: "\(namespace.prefix(6))*")
        #expect(try service.request("GET", entryPath(namespace, "a"), token: scoped).status == 200)
        #expect(try service.request("GET", "/v1/caches/\(namespace)/settings", token: scoped).status == 200)
        #expect(try service.request("POST", "/v1/caches/\(namespace)/evict", token: scoped,
                                    json: "{\"keys\":[\"nope\"]}").status == 200)
        #expect(try service.request("GET", "/v1/stats", token: scoped).status == 403)
        #expect(try service.request("GET", "/metrics", token: scoped).status == 403)
    }

    /// `/metrics` names every namespace: it needs the metrics scope (or admin on `*`) unless
    /// TEAMCACHE_METRICS_AUTH=off says otherwise. The other operational routes stay open.
    @Test func operationalRoutesAreOpenAndMetricsNeedsItsScope() throws {
        #expect(try service.request("GET", "/healthz").status == 200)
        #expect(try service.request("GET", "/readyz").status == 200)
        #expect(try service.request("GET", "/openapi.yaml").text.hasPrefix("openapi: 3.1.0"))
        #expect(try service.request("GET", "/metrics").status == 401)
        let reader = try service.token([.read, .write], namespaces: "*")
        #expect(try service.request("GET", "/metrics", token: reader).status == 403)
        let scraper = try service.token([.metrics], namespaces: "*")
        #expect(try service.request("GET", "/metrics", token: scraper).status == 200)
        #expect(try service.request("GET", entryPath(namespace, "a"), token: scraper).status == 403)
        #expect(try service.request("GET", "/v1/stats", token: scraper).status == 403)
        #expect(try service.request("GET", "/metrics", token: try service.token([.admin], namespaces: "*")).status == 200)
        // /metrics shows every namespace's series: a token for some namespaces does not read it.
        let narrow = try service.token([.metrics], namespaces: "team-a*")
        #expect(try service.request("GET", "/metrics", token: narrow).status == 403)
        #expect(try service.request("GET", "/metrics", token: try service.token([.admin], namespaces: "team-a*")).status
            == 403)
        let open = try TestService { $0.metricsRequireAuth = false }
        defer { open.stop() }
        #expect(try open.request("GET", "/metrics").status == 200)
    }

    @Test func revocationTakesEffectWithinTheCacheTTL() throws {
        let service = try TestService { $0.tokenCacheTTL = 0.5 }
        defer { service.stop() }
        let (token, secret) = try service.app.tokens.create(name: "revoke-me", namespacePattern: "*", scopes: [.read],
                                                           expiresAt: nil)
        #expect(try service.request("GET", entryPath(namespace, "x"), token: secret).status == 404)
        #expect(try service.app.tokens.revoke(id: token.id))
        Thread.sleep(forTimeInterval: 0.7)
        #expect(try service.request("GET", entryPath(namespace, "x"), token: secret).status == 401)
    }

    @Test func rateLimitAnswers429WithRetryAfter() throws {
        let service = try TestService { $0.rateLimit = 5 }
        defer { service.stop() }
        let token = try service.token([.read], namespaces: "*")
        var statuses: [Int] = []
        var retryAfter: String?
        for _ in 0..<20 {
            let response = try service.request("GET", entryPath(namespace, "x"), token: token)
            statuses.append(response.status)
            if response.status == 429 { retryAfter = response.header("Retry-After") }
        }
        #expect(statuses.prefix(10).allSatisfy { $0 == 404 })
        #expect(statuses.contains(429))
        #expect(retryAfter.flatMap(Int.init) ?? 0 >= 1)
        // Another token has its own bucket.
        let other = try service.token([.read], namespaces: "*")
        #expect(try service.request("GET", entryPath(namespace, "x"), token: other).status == 404)
    }

    @Test func namespaceQuotaIsEnforcedWith507() throws {
        let admin = try service.token([.admin], namespaces: "*")
        let quota = TestService.namespace("quota")
        #expect(try service.request("PUT", "/v1/caches/\(quota)/settings", token: admin, json: "{\"max_bytes\":10000}")
            .status == 200)
        // Hard cap = 10,000 × 1.1: two random 5,000-byte bodies fit, the third would pass it.
        #expect(try service.request("PUT", entryPath(quota, "a"), token: admin, body: randomBytes(5000)).status == 201)
        #expect(try service.request("PUT", entryPath(quota, "b"), token: admin, body: randomBytes(5000)).status == 201)
        // The caps read the folded totals, which the service folds every second: within a
        // second of the writes the cap holds, with no fold asked for here.
        let connection = try PostgresConnection(url: service.app.database.directURL)
        let deadline = Date().addingTimeInterval(3)
        while try connection.query("SELECT count(*)::int8 AS n FROM counter_deltas WHERE namespace = $1",
                                   [.text(quota)]).first?.int("n") != 0, Date() < deadline {
            usleep(50_000)
        }
        let full = try service.request("PUT", entryPath(quota, "c"), token: admin, body: randomBytes(5000))
        #expect(full.status == 507)
        #expect(try service.request("GET", entryPath(quota, "c"), token: admin).status == 404)
        // Replacing with a body no larger still works.
        #expect(try service.request("PUT", entryPath(quota, "a"), token: admin, body: randomBytes(4000)).status == 200)
    }

    @Test func writerTokenIsRecorded() throws {
        let (token, secret) = try service.app.tokens.create(name: "provenance", namespacePattern: namespace,
                                                           scopes: [.read, .write], expiresAt: nil)
        #expect(try service.request("PUT", entryPath(namespace, "p"), token: secret, body: [1]).status == 201)
        #expect(try service.request("GET", entryPath(namespace, "p"), token: secret).status == 200)
        try service.app.tracker.flush()
        // Who wrote an entry is for the namespace's admins; the writer's own read token sees no ids.
        let admin = try service.token([.admin], namespaces: namespace)
        let stats = try object(try service.request("GET", "/v1/caches/\(namespace)/stats", token: admin))
        let top = try #require(stats["top"] as? [[String: Any]])
        #expect(top.first { $0["key"] as? String == "p" }?["writer_token_id"] as? Int == Int(token.id))
        let own = try object(try service.request("GET", "/v1/caches/\(namespace)/stats", token: secret))
        #expect((own["top"] as? [[String: Any]])?.first { $0["key"] as? String == "p" }?["writer_token_id"] == nil)
    }
}
