import Foundation
import Testing
import TestSupport

/// A near-cache copy answers with fields rendered once when it was kept
/// (`HTTPResponse.renderedFields`): every hit on it must carry exactly the fields, in the
/// order, that the same hit read from the database does, for identity and gzip clients,
/// HEAD, a 304 and a collapsed or refreshed answer alike (only Date, Age and the request id
/// may differ).
@Suite struct NearCacheAnswerTests {
    @Test func aNearCacheCopyAnswersWithTheFieldsOfADatabaseRead() throws {
        // Set, not inherited: CI runs the suite once more with the near-cache off.
        let near = try TestService { $0.nearCacheBytes = 64 << 20 }
        defer { near.stop() }
        let direct = try TestService { $0.nearCacheBytes = 0 }
        defer { direct.stop() }
        let namespace = TestService.namespace("nearanswer")
        let token = try near.token([.read, .write], namespaces: "*")
        let path = "/v1/caches/\(namespace)/entries/k"
        let body = Array(String(repeating: "{\"answer\": \"near\"} ", count: 60).utf8)
        let put = try near.request("PUT", path, token: token,
                                   headers: [("Content-Type", "application/json"), ("Cache-Tag", "a, b")], body: body)
        #expect(put.status == 201)
        let etag = try #require(put.header("ETag"))
        let varying: Set<String> = ["date", "age", "x-request-id"]
        func fields(_ response: RawClient.Response) -> [String] {
            response.headers.filter { !varying.contains($0.0.lowercased()) }.map { "\($0.0): \($0.1)" }
        }
        let asks: [(String, [(String, String)])] = [
            ("GET", []), ("GET", [("Accept-Encoding", "gzip")]), ("HEAD", []), ("HEAD", [("Accept-Encoding", "gzip")]),
            ("GET", [("If-None-Match", etag)]), ("GET", [("Accept-Encoding", "gzip, deflate")]),
        ]
        for (method, headers) in asks {
            // Twice on the near-cache service: the first read keeps the copy, the second is
            // answered from it.
            _ = try near.request(method, path, token: token, headers: headers)
            let kept = try near.request(method, path, token: token, headers: headers)
            let read = try direct.request(method, path, token: token, headers: headers)
            #expect(kept.status == read.status, "\(method) \(headers)")
            #expect(fields(kept) == fields(read), "\(method) \(headers)")
            #expect(kept.body == read.body, "\(method) \(headers)")
            #expect(kept.header("ETag") == etag && kept.header("Vary") == "Accept-Encoding", "\(fields(kept))")
        }
        let kept = try near.request("GET", path, token: token)
        #expect(Set(kept.headers.map { $0.0.lowercased() }).isSuperset(of: ["content-type", "etag", "last-modified",
                                                                           "expires", "vary", "age", "cache-status",
                                                                           "date", "content-length"]))
        #expect(kept.body == body)
        // The copies answered: not a comparison of two database reads.
        let hits = metricSample(try near.metrics(), "teamcache_near_cache_hits_total")
        #expect(hits >= Double(asks.count), "near-cache hits \(hits)")
    }
}
