import CacheCore
import Foundation
import Testing
import TestSupport

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
