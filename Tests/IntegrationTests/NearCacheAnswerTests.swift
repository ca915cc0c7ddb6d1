import CacheCore
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

    /// An identity client's hit on a gzip copy keeps the inflated bytes with the copy (counted
    /// in its bytes); a write that replaces the body is answered with the new bytes at once,
    /// and gzip clients still get the stored gzip.
    @Test func identityBytesKeptWithACopyGoWithItsWrite() throws {
        let near = try TestService { $0.nearCacheBytes = 64 << 20 }
        defer { near.stop() }
        let namespace = TestService.namespace("nearinflated")
        let token = try near.token([.read, .write], namespaces: "*")
        let path = "/v1/caches/\(namespace)/entries/k"
        func put(_ text: String) throws -> [UInt8] {
            let body = Array(String(repeating: "{\"answer\": \"\(text)\"} ", count: 80).utf8)
            let put = try near.request("PUT", path, token: token, headers: [("Content-Type", "application/json")],
                                       body: body)
            #expect(put.status == 200 || put.status == 201)
            return body
        }
        func heldBytes() throws -> Double { metricSample(try near.metrics(), "teamcache_near_cache_bytes") }
        func copyHits() throws -> Double { metricSample(try near.metrics(), "teamcache_near_cache_hits_total") }
        /// Identity GETs until one is answered from a copy that holds `body`'s identity bytes
        /// (the write's own notification, arriving after its answer, may drop the copy the
        /// first reads kept); the near-cache's bytes then.
        func readFromCopy(_ body: [UInt8]) throws -> Double {
            let deadline = Date().addingTimeInterval(10)
            while true {
                let before = try copyHits()
                #expect(try near.request("GET", path, token: token).body == body)
                let held = try heldBytes()
                if try copyHits() > before && held >= Double(body.count) { return held }
                if Date() >= deadline {
                    Issue.record("never answered from a copy holding its identity bytes (\(held) bytes held)")
                    return held
                }
            }
        }
        let first = try put("first")
        let withIdentity = try readFromCopy(first)
        #expect(try near.request("GET", path, token: token, headers: [("Accept-Encoding", "gzip")]).header(
            "Content-Encoding") == "gzip")
        let second = try put("other")
        #expect(try near.request("GET", path, token: token).body == second,
                "a replaced body is never answered from the old copy's bytes")
        let held = try readFromCopy(second)
        #expect(held < withIdentity + Double(second.count),
                "one copy with its identity bytes, the old one's gone: \(held) (was \(withIdentity))")
        let gzip = try near.request("GET", path, token: token, headers: [("Accept-Encoding", "gzip")])
        #expect(gzip.header("Content-Encoding") == "gzip")
        #expect(try Gzip.decompress(gzip.body, limit: 1 << 20) == second)
    }
}
