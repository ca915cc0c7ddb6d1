import Foundation
import Testing
import TestSupport

/// `GET /v1/caches/{ns}/stats/history` and prices through the settings route, over HTTP:
/// hits priced by the namespace's own table show in the points and in `/stats` alike, counted
/// by hand; what cannot be answered is a 400 problem; prices that cannot be read are refused.
@Suite struct StatsHistoryRouteTests {
    let service = TestService.shared

    func history(_ namespace: String, _ query: String, token: String) throws -> [String: Any] {
        let answer = try service.request("GET", "/v1/caches/\(namespace)/stats/history\(query)", token: token)
        #expect(answer.status == 200, "\(String(decoding: answer.body, as: UTF8.self))")
        return try object(answer)
    }

    @Test func pricedHitsShowInThePointsAndTheTotalsAlike() throws {
        let namespace = TestService.namespace("histroute")
        let admin = try service.token([.admin], namespaces: namespace)
        let prices = "[{\"model\":\"hist-*\",\"input\":1.5,\"output\":6},{\"model\":\"hist-big\",\"input\":10,\"output\":30}]"
        #expect(try service.request("PUT", "/v1/caches/\(namespace)/settings", token: admin,
                                    json: "{\"prices\":\(prices)}").status == 200)
        let settings = try object(try service.request("GET", "/v1/caches/\(namespace)/settings", token: admin))
        #expect((settings["prices"] as? [[String: Any]])?.compactMap { $0["model"] as? String } == ["hist-*", "hist-big"])
        // hist-small: the glob's price; hist-big: its own exact price, though the glob comes first.
        for (model, prompt) in [("hist-small", "a"), ("hist-big", "b")] {
            let upsert = "{\"model\":\"\(model)\",\"prompt\":\"\(prompt)\",\"response\":\"r\","
                + "\"metadata\":{\"input_tokens\":1000,\"output_tokens\":200}}"
            #expect(try service.request("POST", "/v1/caches/\(namespace)/upsert", token: admin, json: upsert).status == 201)
        }
        func lookup(_ model: String, _ prompt: String) throws {
            _ = try service.request("POST", "/v1/caches/\(namespace)/lookup", token: admin,
                                    json: "{\"model\":\"\(model)\",\"prompt\":\"\(prompt)\"}")
        }
        for _ in 0..<3 { try lookup("hist-small", "a") }
        for _ in 0..<2 { try lookup("hist-big", "b") }
        try lookup("hist-small", "absent")
        try service.app.tracker.flush()
        // By hand: 3 × (1000 × 1.5 + 200 × 6) / 1e6 + 2 × (1000 × 10 + 200 × 30) / 1e6.
        let expected = 3 * 0.0027 + 2 * 0.016

        let reader = try service.token([.read], namespaces: namespace)
        let answer = try history(namespace, "?step=60", token: reader)
        #expect(answer["step"] as? Int == 60 && answer["currency"] as? String == "USD")
        let points = try #require(answer["points"] as? [[String: Any]])
        #expect(points.count >= 1440 && points.count <= 1441)
        func sum(_ member: String) -> Int { points.reduce(0) { $0 + ($1[member] as? Int ?? 0) } }
        #expect(sum("hits") == 5 && sum("misses") == 1 && sum("writes") == 2)
        let cost = points.reduce(0.0) { $0 + ($1["cost_saved"] as? Double ?? 0) }
        #expect(abs(cost - expected) < 1e-9, "\(cost)")
        #expect((points.last?["entries"] as? Int) == 2)
        let stats = try object(try service.request("GET", "/v1/caches/\(namespace)/stats", token: reader))
        #expect(abs((stats["cost_saved"] as? Double ?? 0) - expected) < 1e-9 && stats["writes"] as? Int == 2)
        // Hours and days sum to the same.
        for step in [3600, 86400] {
            let coarse = try #require(try history(namespace, "?step=\(step)", token: reader)["points"] as? [[String: Any]])
            #expect(coarse.reduce(0) { $0 + ($1["hits"] as? Int ?? 0) } == 5, "step \(step)")
        }
    }

    /// An evict request's deletions are evictions (manual) in the point they happened in; a
    /// DELETE of one key is not an eviction.
    @Test func evictionsAreCountedByReason() throws {
        let namespace = TestService.namespace("histevict")
        let writer = try service.token([.read, .write], namespaces: namespace)
        for index in 0..<5 {
            #expect(try service.request("PUT", entryPath(namespace, "k\(index)"), token: writer,
                                        headers: [("Cache-Tag", index < 3 ? "old" : "new")], body: [1]).status == 201)
        }
        #expect(try service.request("DELETE", entryPath(namespace, "k4"), token: writer).status == 204)
        #expect(try service.request("POST", "/v1/caches/\(namespace)/evict", token: writer,
                                    json: "{\"tag\":\"old\"}").status == 200)
        let points = try #require(try history(namespace, "?step=60", token: writer)["points"] as? [[String: Any]])
        // Summed: a minute may end between the writes and the eviction.
        func sum(_ member: String) -> Int { points.reduce(0) { $0 + ($1[member] as? Int ?? 0) } }
        let manual = points.reduce(0) { $0 + (($1["evictions_by_reason"] as? [String: Int])?["manual"] ?? 0) }
        #expect(sum("evictions") == 3 && manual == 3 && sum("writes") == 5)
        #expect(points.last?["entries"] as? Int == 1)
    }

    /// Imported entries carry their dump's write times (days ago): their writes and bytes are
    /// counted when the import happens, in the point of now, not in a point long trimmed.
    @Test func anImportIsCountedWhenItHappens() throws {
        let namespace = TestService.namespace("histimport")
        let admin = try service.token([.admin], namespaces: namespace)
        let old = "2026-11-01T10:00:00Z"
        let lines = (0..<3).map { "{\"namespace\":\"\(namespace)\",\"key\":\"k\($0)\",\"body\":\"b\($0)\","
            + "\"created_at\":\"\(old)\",\"updated_at\":\"\(old)\"}" }.joined(separator: "\n")
        let imported = try service.request("POST", "/v1/caches/\(namespace)/import", token: admin, body: Array(lines.utf8))
        #expect(imported.status == 200, "\(imported.text)")
        let points = try #require(try history(namespace, "?step=60&since=\(Int(Date().timeIntervalSince1970) - 300)",
                                              token: admin)["points"] as? [[String: Any]])
        #expect(points.reduce(0) { $0 + ($1["writes"] as? Int ?? 0) } == 3)
        #expect(points.last?["entries"] as? Int == 3)
    }

    /// A miss that took a lease shows as a lease held in the namespace's stats (the dashboard's
    /// "leases held now"), and only there.
    @Test func aLeaseHeldShowsInTheStats() throws {
        let namespace = TestService.namespace("histlease")
        let writer = try service.token([.read, .write], namespaces: namespace)
        #expect(try service.request("GET", entryPath(namespace, "k") + "?lease=30", token: writer).status == 404)
        let stats = try object(try service.request("GET", "/v1/caches/\(namespace)/stats", token: writer))
        #expect((stats["leases"] as? [String: Int])?["held"] == 1)
        let other = TestService.namespace("histlease-other")
        let otherWriter = try service.token([.read], namespaces: other)
        let none = try object(try service.request("GET", "/v1/caches/\(other)/stats", token: otherWriter))
        #expect((none["leases"] as? [String: Int])?["held"] == 0)
    }

    @Test func questionsThatCannotBeAnsweredAre400Problems() throws {
        let namespace = TestService.namespace("histbad")
        let reader = try service.token([.read], namespaces: namespace)
        let month = Int(Date().timeIntervalSince1970) - 30 * 86400
        for query in ["?step=61", "?step=60&since=\(month)", "?since=2026-12-04T10:00:00Z&until=2026-12-04T09:00:00Z",
                      "?since=yesterday", "?since=2026-13-40T00:00:00Z", "?window=1h", "?step=abc", "?step=-60"] {
            let answer = try service.request("GET", "/v1/caches/\(namespace)/stats/history\(query)", token: reader)
            #expect(answer.status == 400, "\(query)")
            #expect(answer.header("Content-Type") == "application/problem+json", "\(query)")
        }
        let other = try service.token([.read], namespaces: "someone-else")
        #expect(try service.request("GET", "/v1/caches/\(namespace)/stats/history", token: other).status == 403)
        // A step is chosen when none is asked for: 30 days of hours.
        let chosen = try history(namespace, "?since=\(month)", token: reader)
        #expect(chosen["step"] as? Int == 3600 && (chosen["points"] as? [Any])?.count ?? 0 >= 720)
    }

    @Test func pricesThatCannotBeReadAreRefusedAndChangeNothing() throws {
        let namespace = TestService.namespace("histprices")
        let admin = try service.token([.admin], namespaces: namespace)
        #expect(try service.request("PUT", "/v1/caches/\(namespace)/settings", token: admin,
                                    json: "{\"default_ttl\":60,\"prices\":[{\"model\":\"m\",\"input\":1,\"output\":2}]}")
            .status == 200)
        for prices in ["{}", "[{\"model\":\"m\",\"input\":-1,\"output\":2}]", "[{\"model\":\"m\",\"input\":1}]",
                       "[{\"model\":\"m\",\"input\":1,\"output\":2,\"cached\":0.5}]", "[{\"model\":\"\",\"input\":1,\"output\":2}]",
                       "[{\"model\":\"m\",\"input\":1,\"output\":2},{\"model\":\"m\",\"input\":1,\"output\":2}]",
                       "[{\"model\":\"m\",\"input\":\"1\",\"output\":2}]", "[{\"model\":\"m\",\"input\":1e400,\"output\":2}]"] {
            let answer = try service.request("PUT", "/v1/caches/\(namespace)/settings", token: admin,
                                             json: "{\"default_ttl\":90,\"prices\":\(prices)}")
            #expect(answer.status == 422, "\(prices)")
        }
        let settings = try object(try service.request("GET", "/v1/caches/\(namespace)/settings", token: admin))
        #expect(settings["default_ttl"] as? Int == 60 && (settings["prices"] as? [Any])?.count == 1)
    }
}
