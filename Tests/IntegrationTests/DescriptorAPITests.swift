import CacheCore
import Foundation
import Testing
import TestSupport

@Suite struct DescriptorAPITests {
    let service = TestService.shared
    let namespace = TestService.namespace("llm")
    let token: String

    init() throws { token = try writer(namespace) }

    func post(_ route: String, _ json: String) throws -> RawClient.Response {
        try service.request("POST", "/v1/caches/\(namespace)/\(route)", token: token, json: json)
    }

    @Test func upsertThenLookupHitsWithMetadata() throws {
        let descriptor = "\"model\":\"gpt-x\",\"prompt\":\"What is 2+2?\",\"params\":{\"temperature\":0}"
        let miss = try object(try post("lookup", "{\(descriptor)}"))
        #expect(miss["hit"] as? Bool == false)
        let key = try #require(miss["key"] as? String)
        let upsert = try post("upsert", "{\(descriptor),\"response\":\"4\",\"metadata\":{\"input_tokens\":12,"
            + "\"output_tokens\":1,\"finish_reason\":\"stop\",\"provider\":{\"id\":\"x\"}},\"tags\":[\"math\"]}")
        #expect(upsert.status == 201)
        #expect(try object(upsert)["key"] as? String == key)
        // Whitespace and CRLF around the prompt do not change the key.
        let hit = try object(try post("lookup", "{\"model\":\"gpt-x\",\"prompt\":\"\\r\\n What is 2+2?  \","
            + "\"params\":{\"temperature\":0}}"))
        #expect(hit["hit"] as? Bool == true && hit["response"] as? String == "4" && hit["stale"] as? Bool == false)
        #expect(hit["key"] as? String == key)
        let metadata = try #require(hit["metadata"] as? [String: Any])
        #expect(metadata["input_tokens"] as? Int == 12 && metadata["finish_reason"] as? String == "stop")
        // The same entry is readable as a raw entry under its key.
        let raw = try service.request("GET", entryPath(namespace, key), token: token)
        #expect(raw.text == "4" && raw.header("Content-Type") == "text/plain; charset=utf-8")
        #expect(try post("upsert", "{\(descriptor),\"response\":\"four\"}").status == 200)
    }

    @Test func refreshIsABypassAndModelMustMatch() throws {
        let body = "{\"model\":\"m-a\",\"prompt\":\"p\",\"response\":\"r\"}"
        #expect(try post("upsert", body).status == 201)
        let refreshed = try object(try post("lookup", "{\"model\":\"m-a\",\"prompt\":\"p\",\"refresh\":true}"))
        #expect(refreshed["hit"] as? Bool == false)
        #expect(try object(try post("lookup", "{\"model\":\"m-b\",\"prompt\":\"p\"}"))["hit"] as? Bool == false)
    }

    @Test func rulesForWhatIsNeverCached() throws {
        #expect(try post("upsert", "{\"model\":\"m\",\"prompt\":\"p\",\"response\":\"\"}").status == 422)
        #expect(try post("upsert", "{\"model\":\"m\",\"prompt\":\"p\",\"schema\":{\"type\":\"object\"},"
            + "\"response\":\"{not json\"}").status == 422)
        #expect(try post("upsert", "{\"model\":\"m\",\"prompt\":\"p\",\"schema\":{\"type\":\"object\"},"
            + "\"response\":\"{\\\"a\\\":1}\"}").status == 201)
        #expect(try post("upsert", "{\"prompt\":\"p\",\"response\":\"x\"}").status == 422)
        #expect(try post("upsert", "{\"model\":\"m\",\"prompt\":\"p\",\"respons\":\"x\"}").status == 422)
        #expect(try post("lookup", "{not json").status == 400)
        #expect(try post("lookup", "[1]").status == 400)
        #expect(try post("upsert", "{\"model\":\"m\",\"prompt\":\"p\",\"response\":\"x\",\"ttl\":0}").status == 422)
        #expect(try post("upsert", "{\"model\":\"m\",\"prompt\":\"p\",\"response\":\"x\",\"metadata\":"
            + "{\"input_tokens\":-1}}").status == 422)
        #expect(try object(try post("lookup", "{\"model\":\"m\",\"prompt\":\"never stored\"}"))["hit"] as? Bool
            == false)
        // Found by schemathesis: NUL in a text field reached PostgreSQL (which refuses it) as a 500.
        #expect(try post("upsert", "{\"model\":\"m\\u0000\",\"prompt\":\"p\",\"response\":\"x\"}").status == 422)
        #expect(try post("upsert", "{\"model\":\"m\",\"prompt\":\"p\",\"response\":\"x\",\"metadata\":"
            + "{\"a\":\"\\u0000\"}}").status == 422)
        #expect(try post("upsert", "{\"model\":\"m\",\"prompt\":\"p\",\"response\":\"x\",\"metadata\":"
            + "{\"n\":1e999999}}").status == 422)
        #expect(try post("upsert", "{\"model\":\"m\",\"prompt\":\"p\",\"response\":\"x\",\"tags\":[\"\\u0000\"]}")
            .status == 400)
        #expect(try post("upsert", "{\"model\":\"m\",\"prompt\":\"nul \\u0000 inside\",\"response\":\"x\"}")
            .status == 201)
    }

    @Test func messagesDescriptorsWork() throws {
        let messages = "[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":\"hello\"}]"
        #expect(try post("upsert", "{\"model\":\"m\",\"messages\":\(messages),\"response\":\"hi\"}").status == 201)
        let spaced = "[ {\"content\":\"be brief\", \"role\":\"system\"}, {\"role\":\"user\",\"content\":\"hello\"} ]"
        #expect(try object(try post("lookup", "{\"model\":\"m\",\"messages\":\(spaced)}"))["response"] as? String
            == "hi")
    }
}

@Suite struct ExpiryTests {
    /// Past its freshness an entry is absent for writes and DELETE as for reads; `max-stale`
    /// reads still find it until the eviction job removes it.
    @Test func anExpiredEntryIsAbsentForConditionalWritesAndDelete() throws {
        let clock = ManualClock()
        let service = try TestService(clock: clock) { $0.authEnabled = false }
        defer { service.stop() }
        let path = entryPath(TestService.namespace("expired"), "k")
        let first = try service.request("PUT", path + "?ttl=10", body: [1])
        #expect(first.status == 201)
        let etag = try #require(first.header("ETag"))
        clock.advance(by: 11)
        #expect(try service.request("GET", path).status == 404)
        #expect(try service.request("DELETE", path).status == 404)
        // Refused writes and the 404 DELETE changed nothing: the stale entry still serves max-stale.
        let stale = try service.request("GET", path, headers: [("Cache-Control", "max-stale=60")])
        #expect(stale.status == 200 && stale.body == [1])
        #expect(try service.request("PUT", path, headers: [("If-Match", etag)], body: [2]).status == 412)
        #expect(try service.request("PUT", path, headers: [("If-Match", "*")], body: [2]).status == 412)
        // A create-only write goes ahead over it, and is a creation.
        #expect(try service.request("PUT", path + "?ttl=10", headers: [("If-None-Match", "*")], body: [3]).status == 201)
        #expect(try service.request("PUT", path, headers: [("If-None-Match", "*")], body: [4]).status == 412)
        let fresh = try service.request("GET", path)
        #expect(fresh.status == 200 && fresh.body == [3])
        #expect(try service.request("DELETE", path).status == 204)
    }

    @Test func freshThenStaleWithinMaxStaleThenMiss() throws {
        let clock = ManualClock()
        let service = try TestService(clock: clock) { $0.authEnabled = false; $0.http.host = "127.0.0.1" }
        defer { service.stop() }
        let namespace = TestService.namespace("ttl")
        let path = entryPath(namespace, "k")
        #expect(try service.request("PUT", path + "?ttl=10", body: [1]).status == 201)
        clock.advance(by: 4)
        let fresh = try service.request("GET", path)
        #expect(fresh.header("Cache-Status") == "teamcache; hit; ttl=6" && fresh.header("Age") == "4")
        clock.advance(by: 16)
        let expired = try service.request("GET", path)
        #expect(expired.status == 404 && expired.header("Cache-Status") == "teamcache; fwd=miss")
        let stale = try service.request("GET", path, headers: [("Cache-Control", "max-stale=60")])
        #expect(stale.status == 200 && stale.header("Cache-Status") == "teamcache; hit; ttl=-10")
        #expect(try service.request("GET", path, headers: [("Cache-Control", "max-stale=5")]).status == 404)
        #expect(try service.request("GET", path, headers: [("Cache-Control", "max-stale")]).status == 200)
        let lookupPath = "/v1/caches/\(namespace)"
        #expect(try service.request("POST", lookupPath + "/upsert", json:
            "{\"model\":\"m\",\"prompt\":\"p\",\"response\":\"r\",\"ttl\":5}").status == 201)
        clock.advance(by: 7)
        let expiredLookup = try object(try service.request("POST", lookupPath + "/lookup",
                                                           json: "{\"model\":\"m\",\"prompt\":\"p\"}"))
        #expect(expiredLookup["hit"] as? Bool == false)
        let staleHit = try object(try service.request("POST", lookupPath + "/lookup",
                                                      json: "{\"model\":\"m\",\"prompt\":\"p\",\"max_stale\":60}"))
        #expect(staleHit["hit"] as? Bool == true && staleHit["stale"] as? Bool == true)
    }

    @Test func namespaceDefaultTTLApplies() throws {
        let clock = ManualClock()
        let service = try TestService(clock: clock) { $0.authEnabled = false }
        defer { service.stop() }
        let namespace = TestService.namespace("nsttl")
        let admin = "/v1/caches/\(namespace)/settings"
        #expect(try service.request("PUT", admin, json: "{\"default_ttl\":30}").status == 200)
        let put = try object(try service.request("PUT", entryPath(namespace, "k"), body: [1]))
        let expires = try #require(Timestamp(put["expires_at"] as? String))
        #expect(abs(expires.timeIntervalSince(clock.now()) - 30) < 2)
    }
}
