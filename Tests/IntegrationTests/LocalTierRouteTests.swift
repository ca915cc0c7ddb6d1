import Foundation
import Testing
import TestSupport

/// What the service gives a client's local tier (issue #31): a lookup's ETag and freshness,
/// a conditional lookup that leaves the body out, the feed's head as a starting cursor, and
/// reported local hits counted as hits (and as local ones), checked against counts by hand.
@Suite struct LocalTierRouteTests {
    let service = TestService.shared

    func lookup(_ namespace: String, _ token: String, _ extra: String = "") throws -> [String: Any] {
        let answer = try service.request("POST", "/v1/caches/\(namespace)/lookup", token: token,
                                         json: "{\"model\":\"lt-m\",\"prompt\":\"p\"\(extra)}")
        #expect(answer.status == 200)
        return try object(answer)
    }

    @Test func aConditionalLookupLeavesTheAnswerOutAndCountsAHit() throws {
        let namespace = TestService.namespace("ltlookup")
        let writer = try service.token([.read, .write], namespaces: namespace)
        let upsert = "{\"model\":\"lt-m\",\"prompt\":\"p\",\"response\":\"the answer\",\"ttl\":60,"
            + "\"stale_while_revalidate\":30,\"metadata\":{\"input_tokens\":5}}"
        #expect(try service.request("POST", "/v1/caches/\(namespace)/upsert", token: writer, json: upsert).status == 201)
        let full = try lookup(namespace, writer)
        let etag = try #require(full["etag"] as? String)
        #expect(full["response"] as? String == "the answer" && full["not_modified"] == nil)
        #expect((58...60).contains(full["ttl"] as? Int ?? 0) && full["stale_while_revalidate"] as? Int == 30)
        let same = try lookup(namespace, writer, ",\"if_none_match\":\(jsonString(etag))")
        #expect(same["hit"] as? Bool == true && same["not_modified"] as? Bool == true && same["etag"] as? String == etag)
        #expect(same["response"] == nil && same["metadata"] == nil)
        let other = try lookup(namespace, writer, ",\"if_none_match\":\"\\\"stale\\\"\"")
        #expect(other["response"] as? String == "the answer" && other["not_modified"] == nil)
        let bad = try service.request("POST", "/v1/caches/\(namespace)/lookup", token: writer,
                                      json: "{\"model\":\"lt-m\",\"prompt\":\"p\",\"if_none_match\":3}")
        #expect(bad.status == 422)
        try service.app.tracker.flush()
        let stats = try object(try service.request("GET", "/v1/caches/\(namespace)/stats", token: writer))
        #expect((stats["lookups"] as? [String: Int])?["hit"] == 3)
        #expect((stats["tokens_saved"] as? [String: Int])?["input"] == 15)
    }

    @Test func sinceNowStartsAtTheHeadAndMissesNothingAfter() throws {
        let namespace = TestService.namespace("lthead")
        let writer = try service.token([.read, .write], namespaces: namespace)
        #expect(try service.request("PUT", entryPath(namespace, "before"), token: writer, body: [1]).status == 201)
        let head = try object(try service.request("GET", "/v1/caches/\(namespace)/changes?since=now&wait=5",
                                                  token: writer))
        #expect((head["changes"] as? [Any])?.isEmpty == true && head["more"] as? Bool == false)
        let cursor = try #require(head["next"] as? String)
        #expect(try service.request("PUT", entryPath(namespace, "after"), token: writer, body: [2]).status == 201)
        // Followed as a follower does, page after page: `after` for sure; `before` too when it
        // was not numbered yet when the head was read (no request waits for numbering: a change
        // committed before the head may come after it, which a follower replays harmlessly). A
        // page can hold `before` alone: the wait ends at the first change (CI saw it so).
        var keys: [String] = []
        var since = cursor
        let deadline = Date().addingTimeInterval(10)
        while keys.last != "after" && Date() < deadline {
            let page = try object(try service.request("GET", "/v1/caches/\(namespace)/changes?since=\(since)&wait=5",
                                                      token: writer))
            keys += (page["changes"] as? [[String: Any]])?.compactMap { $0["key"] as? String } ?? []
            since = try #require(page["next"] as? String)
        }
        #expect(keys.last == "after" && Set(keys).isSubset(of: ["before", "after"]), "\(keys)")
        let reader = try service.token([.read], namespaces: "other-\(namespace)")
        #expect(try service.request("GET", "/v1/caches/\(namespace)/changes?since=now", token: reader).status == 403)
    }

    @Test func reportedLocalHitsAreCountedAsHitsAndAsLocal() throws {
        let namespace = TestService.namespace("lthits")
        let writer = try service.token([.read, .write], namespaces: namespace)
        let upsert = "{\"model\":\"lt-m\",\"prompt\":\"p\",\"response\":\"r\","
            + "\"metadata\":{\"input_tokens\":10,\"output_tokens\":20}}"
        let written = try object(try service.request("POST", "/v1/caches/\(namespace)/upsert", token: writer, json: upsert))
        let key = try #require(written["key"] as? String)
        #expect(try service.request("PUT", entryPath(namespace, "raw"), token: writer, body: [1]).status == 201)
        let reader = try service.token([.read], namespaces: namespace)
        let etag = try #require(written["etag"] as? String)
        // 3 + 1 on the stored version (by its ETag, and without one), 1 on the raw entry: priced.
        // 2 on a key not held and 2 on a version since replaced: hits, but priced at nothing.
        let report = "{\"hits\":[{\"key\":\"\(key)\",\"etag\":\(jsonString(etag)),\"count\":3},"
            + "{\"key\":\"raw\",\"count\":1},{\"key\":\"gone\",\"count\":2},{\"key\":\"\(key)\",\"count\":1},"
            + "{\"key\":\"\(key)\",\"etag\":\"\\\"replaced\\\"\",\"count\":2}]}"
        let answer = try object(try service.request("POST", "/v1/caches/\(namespace)/hits", token: reader, json: report))
        #expect(answer["counted"] as? Int == 9 && answer["priced"] as? Int == 5, "\(answer)")
        _ = try lookup(namespace, reader)  // one hit through the service, for contrast
        try service.app.tracker.flush()
        // The entry's hit count can miss this flush when a writer held its row (it is written
        // at the next one); CI once read it one short, when another test's flush could still
        // hold counts uncommitted (flushes now run one at a time). So both are waited for.
        var stats: [String: Any] = [:]
        func topHits(_ stats: [String: Any]) -> Int? {
            (stats["top"] as? [[String: Any]])?.first { $0["key"] as? String == key }?["hit_count"] as? Int
        }
        for _ in 0..<100 {
            stats = try object(try service.request("GET", "/v1/caches/\(namespace)/stats", token: reader))
            if (stats["lookups"] as? [String: Int])?["hit"] == 10 && topHits(stats) == 5 { break }
            Thread.sleep(forTimeInterval: 0.1)
            try service.app.tracker.flush()
        }
        let lookups = try #require(stats["lookups"] as? [String: Int])
        #expect(lookups["hit"] == 10 && lookups["local"] == 9 && lookups["miss"] == 0, "\(stats)")
        #expect(stats["encrypted"] as? Bool == false)
        // By hand: 4 local hits and 1 service hit on (10, 20); 1 on the raw entry (no tokens).
        #expect((stats["tokens_saved"] as? [String: Int]) == ["input": 50, "output": 100])
        #expect(topHits(stats) == 5)
        let history = try object(try service.request("GET", "/v1/caches/\(namespace)/stats/history?step=60", token: reader))
        let points = try #require(history["points"] as? [[String: Any]])
        #expect(points.reduce(0) { $0 + ($1["local"] as? Int ?? 0) } == 9)
        #expect(points.reduce(0) { $0 + ($1["hits"] as? Int ?? 0) } == 10)
    }

    @Test(arguments: [
        "{}", "{\"hits\":{}}", "{\"hits\":[1]}", "{\"hits\":[{\"key\":\"a\"}]}", "{\"hits\":[{\"key\":\"a\",\"count\":0}]}",
        "{\"hits\":[{\"key\":\"\",\"count\":1}]}", "{\"hits\":[{\"key\":\"a\",\"count\":1.5}]}",
        "{\"hits\":[{\"key\":\"a\",\"count\":1,\"extra\":1}]}", "{\"hits\":[],\"more\":1}",
        "{\"hits\":[{\"key\":\"a\",\"count\":1,\"etag\":7}]}",
        "{\"hits\":[{\"key\":\"a\",\"count\":1000000},{\"key\":\"b\",\"count\":1}]}",
        "{\"hits\":[{\"key\":\"a\",\"count\":1}],\"reporter\":\"r\"}",
        "{\"hits\":[{\"key\":\"a\",\"count\":1}],\"seq\":1}",
        "{\"hits\":[{\"key\":\"a\",\"count\":1}],\"reporter\":\"r\",\"seq\":0}",
        "{\"hits\":[{\"key\":\"a\",\"count\":1}],\"reporter\":\"a b\",\"seq\":1}",
        "{\"hits\":[{\"key\":\"a\",\"count\":1}],\"reporter\":\"\",\"seq\":1}",
        "{\"hits\":[{\"key\":\"a\",\"count\":1}],\"reporter\":\"\(String(repeating: "r", count: 65))\",\"seq\":1}",
        "{\"hits\":[{\"key\":\"a\",\"count\":1}],\"reporter\":\"r\",\"seq\":\"1\"}",
        "{\"hits\":[],\"reporter\":\"r\",\"seq\":1}",
    ])
    func aMalformedReportIsRefusedAndCountsNothing(_ report: String) throws {
        let namespace = TestService.namespace("ltbad")
        let writer = try service.token([.read, .write], namespaces: namespace)
        #expect(try service.request("PUT", entryPath(namespace, "a"), token: writer, body: [1]).status == 201)
        let answer = try service.request("POST", "/v1/caches/\(namespace)/hits", token: writer, json: report)
        #expect(answer.status == 422, "\(report)")
        #expect(answer.header("Content-Type") == "application/problem+json")
        try service.app.tracker.flush()
        let stats = try object(try service.request("GET", "/v1/caches/\(namespace)/stats", token: writer))
        #expect((stats["lookups"] as? [String: Int])?["hit"] == 0)
    }

    /// A numbered report whose answer was lost is sent again as it was: counted once. An older
    /// number (a report overtaken by a later one) counts nothing either; another reporter and
    /// another namespace have numbers of their own. Counted by hand: 2 + 3 + 4 + 5 hits.
    @Test func aNumberedReportSentAgainIsCountedOnce() throws {
        let namespace = TestService.namespace("ltonce")
        let writer = try service.token([.read, .write], namespaces: namespace)
        #expect(try service.request("PUT", entryPath(namespace, "a"), token: writer, body: [1]).status == 201)
        func report(_ reporter: String, _ seq: Int, _ count: Int) throws -> [String: Any] {
            let body = "{\"reporter\":\"\(reporter)\",\"seq\":\(seq),\"hits\":[{\"key\":\"a\",\"count\":\(count)}]}"
            let answer = try service.request("POST", "/v1/caches/\(namespace)/hits", token: writer, json: body)
            #expect(answer.status == 200)
            return try object(answer)
        }
        #expect(try report("tier-1", 1, 2)["counted"] as? Int == 2)
        let again = try report("tier-1", 1, 2)
        #expect(again["counted"] as? Int == 0 && again["priced"] as? Int == 0 && again["replayed"] as? Bool == true)
        #expect(try report("tier-1", 2, 3)["counted"] as? Int == 3)
        #expect(try report("tier-1", 1, 7)["replayed"] as? Bool == true)
        #expect(try report("tier-2", 1, 4)["counted"] as? Int == 4)
        let other = TestService.namespace("ltonce2")
        let otherWriter = try service.token([.read, .write], namespaces: other)
        let elsewhere = try service.request("POST", "/v1/caches/\(other)/hits", token: otherWriter,
                                            json: "{\"reporter\":\"tier-1\",\"seq\":1,\"hits\":[{\"key\":\"a\",\"count\":1}]}")
        #expect(try object(elsewhere)["counted"] as? Int == 1)
        // Unnumbered reports are counted each time, as before.
        for _ in 0..<2 {
            _ = try service.request("POST", "/v1/caches/\(namespace)/hits", token: writer,
                                    json: "{\"hits\":[{\"key\":\"a\",\"count\":1}]}")
        }
        try service.app.tracker.flush()
        var lookups: [String: Int] = [:]
        for _ in 0..<50 {
            let stats = try object(try service.request("GET", "/v1/caches/\(namespace)/stats", token: writer))
            lookups = stats["lookups"] as? [String: Int] ?? [:]
            if lookups["hit"] == 11 { break }
            Thread.sleep(forTimeInterval: 0.1)
        }
        #expect(lookups["hit"] == 11 && lookups["local"] == 11, "\(lookups)")
    }

    @Test func tooManyKeysInOneReportAreRefused() throws {
        let namespace = TestService.namespace("ltmany")
        let writer = try service.token([.read, .write], namespaces: namespace)
        let items = (0...1000).map { "{\"key\":\"k\($0)\",\"count\":1}" }.joined(separator: ",")
        #expect(try service.request("POST", "/v1/caches/\(namespace)/hits", token: writer,
                                    json: "{\"hits\":[\(items)]}").status == 422)
    }
}
