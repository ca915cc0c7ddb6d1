import Foundation
import Testing
import TestSupport

/// The entry browser's routes and the dashboard's files: listings by prefix (its range ends
/// where the prefix does), tag and model, paged by key; an entry shown with its body; looking
/// counts no lookup; the page's files carry the policy and nothing else is served.
@Suite struct EntryBrowserTests {
    let service = TestService.shared

    func page(_ namespace: String, _ query: String, token: String) throws -> (keys: [String], next: String?) {
        let answer = try service.request("GET", "/v1/caches/\(namespace)/entries\(query)", token: token)
        #expect(answer.status == 200, "\(query): \(String(decoding: answer.body, as: UTF8.self))")
        let json = try object(answer)
        let entries = json["entries"] as? [[String: Any]] ?? []
        return (entries.compactMap { $0["key"] as? String }, json["next"] as? String)
    }

    @Test func listingsFindByPrefixTagAndModelAndPageByKey() throws {
        let namespace = TestService.namespace("browse")
        let token = try service.token([.read, .write], namespaces: namespace)
        // Keys around a prefix's range: "ab" must not bring "ac" or "a".
        for key in ["a", "ab", "ab1", "ab2", "ab~", "ac", "b"] {
            let path = entryPath(namespace, key)
            #expect(try service.request("PUT", path, token: token,
                                        headers: [("Cache-Tag", key.hasPrefix("ab") ? "group" : "other")],
                                        body: Array(key.utf8)).status == 201)
        }
        #expect(try page(namespace, "?prefix=ab", token: token).keys == ["ab", "ab1", "ab2", "ab~"])
        #expect(try page(namespace, "?tag=group", token: token).keys == ["ab", "ab1", "ab2", "ab~"])
        #expect(try page(namespace, "?prefix=zz", token: token).keys.isEmpty)
        // Pages of two, in key order, to the end.
        var keys: [String] = []
        var after: String?
        repeat {
            let next = try page(namespace, "?limit=2" + (after.map { "&after=\($0)" } ?? ""), token: token)
            keys += next.keys
            after = next.next
        } while after != nil && keys.count < 20
        #expect(keys == ["a", "ab", "ab1", "ab2", "ab~", "ac", "b"])
        let upsert = "{\"model\":\"browse-model\",\"prompt\":\"p\",\"response\":\"r\"}"
        #expect(try service.request("POST", "/v1/caches/\(namespace)/upsert", token: token, json: upsert).status == 201)
        #expect(try page(namespace, "?model=browse-model", token: token).keys.count == 1)
        let tooLong = String(repeating: "61", count: 513)
        for bad in ["?limit=0", "?limit=101", "?after=zz", "?after=abc", "?after=", "?after=00", "?after=\(tooLong)",
                    "?prefix=", "?shape=round", "?tag=", "?tag=%00", "?tag=\(String(repeating: "t", count: 129))"] {
            #expect(try service.request("GET", "/v1/caches/\(namespace)/entries\(bad)", token: token).status == 400, "\(bad)")
        }
        // A space in a query is %20 (a `+` is a plus sign).
        #expect(try service.request("PUT", entryPath(namespace, "with%20space"), token: token, body: [1]).status == 201)
        #expect(try page(namespace, "?prefix=with%20sp", token: token).keys == ["with space"])
        let other = try service.token([.read], namespaces: "elsewhere")
        #expect(try service.request("GET", "/v1/caches/\(namespace)/entries", token: other).status == 403)
    }

    /// A tag that few entries carry: each page reads a bounded run of keys and says where it
    /// stopped, so every match is found, page by page, and no page reads the whole namespace.
    @Test func aRareTagIsFoundPageByPageWithBoundedReads() throws {
        let namespace = TestService.namespace("browserare")
        let token = try service.token([.read, .write], namespaces: namespace)
        // 4,500 entries straight into the table (the route would take minutes), 3 of them tagged.
        try service.app.store.pool.withConnection { connection in
            _ = try connection.query("""
                INSERT INTO entries (namespace, key, body, encoding, content_type, identity_size, stored_size, etag,
                                     tags, created_at, updated_at, expires_at)
                SELECT $1, convert_to(lpad(i::text, 5, '0'), 'UTF8'), '\\x00', 'identity', 't', 1, 1, 'e',
                       CASE WHEN i IN (10, 2500, 4400) THEN ARRAY['rare'] ELSE ARRAY[]::text[] END, now(), now(),
                       now() + interval '1 day'
                FROM generate_series(1, 4500) AS i
                """, [.text(namespace)])
        }
        var found: [String] = [], pages = 0
        var after: String?
        repeat {
            let next = try page(namespace, "?tag=rare&limit=10" + (after.map { "&after=\($0)" } ?? ""), token: token)
            found += next.keys
            after = next.next
            pages += 1
        } while after != nil && pages < 10
        #expect(found == ["00010", "02500", "04400"])
        #expect(pages == 3, "2,000 keys a page: 4,500 keys are three pages")
    }

    @Test func anEntryIsShownWithItsBodyAndLookingCountsNothing() throws {
        let namespace = TestService.namespace("inspect")
        let token = try service.token([.read, .write], namespaces: namespace)
        let json = "{\"answer\":\"\(String(repeating: "x", count: 600))\"}"
        #expect(try service.request("PUT", entryPath(namespace, "doc"), token: token,
                                    headers: [("Content-Type", "application/json"), ("Cache-Tag", "t1")],
                                    body: Array(json.utf8)).status == 201)
        #expect(try service.request("PUT", entryPath(namespace, "bin"), token: token, body: [0xFF, 0xFE, 0, 1]).status == 201)
        #expect(try service.request("GET", entryPath(namespace, "doc"), token: token).status == 200)
        try service.app.tracker.flush()
        let before = try object(try service.request("GET", "/v1/caches/\(namespace)/stats", token: token))["lookups"]
            as? [String: Int]
        for _ in 0..<3 {
            _ = try service.request("GET", "/v1/caches/\(namespace)/inspect/doc", token: token)
            _ = try service.request("GET", "/v1/caches/\(namespace)/entries", token: token)
        }
        let shown = try object(try service.request("GET", "/v1/caches/\(namespace)/inspect/doc", token: token))
        // Stored gzip (it is over the compression threshold), shown as the text it is.
        let body = try #require(shown["body"] as? [String: Any])
        #expect(body["kind"] as? String == "text" && body["text"] as? String == json && body["truncated"] as? Bool == false)
        #expect(shown["tags"] as? [String] == ["t1"] && shown["hit_count"] as? Int == 1)
        #expect((shown["bytes"] as? [String: Int])?["identity"] == json.utf8.count)
        let binary = try #require(try object(try service.request("GET", "/v1/caches/\(namespace)/inspect/bin",
                                                                  token: token))["body"] as? [String: Any])
        #expect(binary["kind"] as? String == "binary" && binary["base64"] as? String == "//4AAQ==")
        #expect(try service.request("GET", "/v1/caches/\(namespace)/inspect/absent", token: token).status == 404)
        try service.app.tracker.flush()
        let after = try object(try service.request("GET", "/v1/caches/\(namespace)/stats", token: token))["lookups"]
            as? [String: Int]
        #expect(before == after)
    }

    @Test func theDashboardsFilesCarryThePolicyAndNothingElseIsServed() throws {
        let page = try service.request("GET", "/ui/")
        #expect(page.status == 200 && page.header("Content-Security-Policy") == "default-src 'self'")
        #expect(page.header("Content-Type") == "text/html; charset=utf-8" && page.text.contains("app.js"))
        // No inline script or style in what is shipped: the policy would refuse it.
        for name in ["index.html", "app.js", "charts.js", "style.css"] {
            let file = try service.request("GET", "/ui/\(name)")
            #expect(file.status == 200 && file.header("X-Content-Type-Options") == "nosniff", "\(name)")
        }
        #expect(!page.text.contains("<script>") && !page.text.contains("style=") && !page.text.contains("<style"))
        #expect(try service.request("GET", "/ui").header("Location") == "/ui/")
        for path in ["/ui/..%2Fopenapi.yaml", "/ui/%2E%2E", "/ui/.gitignore", "/ui/missing.js", "/ui/tests"] {
            #expect(try service.request("GET", path).status == 404, "\(path)")
        }
    }
}
