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
