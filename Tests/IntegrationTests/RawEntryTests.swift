import CacheCore
import Foundation
import Locking
import TeamCache
import Testing
import TestSupport

@Suite struct RawEntryTests {
    let service = TestService.shared
    let namespace = TestService.namespace("raw")
    let token: String

    init() throws { token = try writer(namespace) }

    @Test func oneMegabyteRandomBinaryRoundTripsExactly() throws {
        let bytes = randomBytes(1_000_000)
        let put = try service.request("PUT", entryPath(namespace, "blob"), token: token, body: bytes)
        #expect(put.status == 201)
        #expect(try object(put)["encoding"] as? String == "identity")  // random bytes do not shrink
        let get = try service.request("GET", entryPath(namespace, "blob"), token: token,
                                      headers: [("Accept-Encoding", "gzip")])
        #expect(get.status == 200)
        #expect(get.body == bytes)
        #expect(get.header("Content-Type") == "application/octet-stream")
        #expect(get.header("Content-Encoding") == nil)
    }

    @Test func compressibleJSONIsGzipForGzipClientsAndIdentityForOthers() throws {
        let items = (0..<3500).map { "{\"id\":\($0),\"name\":\"item-\($0)\",\"tags\":[\"a\",\"b\"],\"ok\":true}" }
        let json = Array(("[" + items.joined(separator: ",") + "]").utf8)
        #expect(json.count > 200_000)
        let put = try service.request("PUT", entryPath(namespace, "doc"), token: token,
                                      headers: [("Content-Type", "application/json")], body: json)
        #expect(put.status == 201)
        let written = try object(put)
        #expect(written["encoding"] as? String == "gzip")
        #expect(written["size"] as? Int == json.count)
        let gzipped = try service.request("GET", entryPath(namespace, "doc"), token: token,
                                          headers: [("Accept-Encoding", "br, gzip;q=0.8")])
        #expect(gzipped.header("Content-Encoding") == "gzip")
        #expect(gzipped.header("Vary") == "Accept-Encoding")
        #expect(try gunzip(gzipped.body) == json)
        #expect(gzipped.body.count == written["stored_size"] as? Int)
        let plain = try service.request("GET", entryPath(namespace, "doc"), token: token)
        #expect(plain.header("Content-Encoding") == nil)
        #expect(plain.body == json)
        #expect(plain.header("Content-Type") == "application/json")
        #expect(plain.header("ETag") == gzipped.header("ETag"))
        let refused = try service.request("GET", entryPath(namespace, "doc"), token: token,
                                          headers: [("Accept-Encoding", "gzip;q=0")])
        #expect(refused.body == json)
    }

    @Test func binaryAndSlashKeysRoundTrip() throws {
        for (encoded, expected) in [("%FF%FE%01", "%FF%FE%01"), ("a%2Fb", "a/b")] {
            let put = try service.request("PUT", entryPath(namespace, encoded), token: token, body: Array("v".utf8))
            #expect(put.status == 201)
            #expect(try object(put)["key"] as? String == expected)
            let get = try service.request("GET", entryPath(namespace, encoded), token: token)
            #expect(get.status == 200 && get.text == "v")
        }
        // The encoded slash stays inside its segment: "a/b" is not the key "a".
        #expect(try service.request("GET", entryPath(namespace, "a"), token: token).status == 404)
    }

    @Test func invalidNamesAreRejectedAndNothingStored() throws {
        #expect(try service.request("PUT", entryPath("Bad_NS", "k"), token: token, body: [1]).status == 400)
        #expect(try service.request("PUT", entryPath(namespace, "a%00b"), token: token, body: [1]).status == 400)
        let long = String(repeating: "k", count: 513)
        #expect(try service.request("PUT", entryPath(namespace, long), token: token, body: [1]).status == 400)
        let problem = try service.request("PUT", entryPath(namespace, "k?ttl=0"), token: token, body: [1])
        #expect(problem.status == 400 && problem.header("Content-Type") == "application/problem+json")
        // The problem type is the service's base (from its server's configuration) and the kind.
        let type = try JSONSerialization.jsonObject(with: Data(problem.body)) as? [String: Any]
        #expect(type?["type"] as? String == Configuration.problemTypeBase + "bad-request")
        #expect(try service.request("GET", entryPath(namespace, "k"), token: token).status == 404)
    }

    @Test func exactlyTheBodyLimitIsAcceptedAndOneMoreByteRefused() throws {
        let limit = 8 * 1024 * 1024
        let body = randomBytes(limit)
        // A 503 says "not stored, try again", as to any client: once, in CI, the 8 MiB write's
        // statement passed the database's statement timeout among the whole suite's load. The
        // limit is what is tested here; a 413 or any other answer still fails at once.
        var fits = try service.request("PUT", entryPath(namespace, "max"), token: token, body: body)
        for _ in 0..<2 where fits.status == 503 {
            Thread.sleep(forTimeInterval: 1)
            fits = try service.request("PUT", entryPath(namespace, "max"), token: token, body: body)
        }
        #expect(fits.status == 201)
        let over = try service.request("PUT", entryPath(namespace, "over"), token: token, body: randomBytes(limit + 1))
        #expect(over.status == 413)
        #expect(try service.request("GET", entryPath(namespace, "over"), token: token).status == 404)
    }

    @Test func gzipUploadIsStoredAsSentAndVerified() throws {
        let text = Array(String(repeating: "hello gzip ", count: 500).utf8)
        let gzip = try #require(Gzip.compress(text, level: 9))
        let put = try service.request("PUT", entryPath(namespace, "gz"), token: token,
                                      headers: [("Content-Encoding", "gzip"), ("Content-Type", "text/plain")],
                                      body: gzip)
        #expect(put.status == 201)
        #expect(try object(put)["stored_size"] as? Int == gzip.count)
        #expect(try object(put)["size"] as? Int == text.count)
        let plain = try service.request("PUT", entryPath(namespace, "plain"), token: token,
                                        headers: [("Content-Type", "text/plain")], body: text)
        #expect(put.header("ETag") == plain.header("ETag"))
        let get = try service.request("GET", entryPath(namespace, "gz"), token: token,
                                      headers: [("Accept-Encoding", "gzip")])
        #expect(get.body == gzip)
        let bad = try service.request("PUT", entryPath(namespace, "badgz"), token: token,
                                      headers: [("Content-Encoding", "gzip")], body: Array("not gzip".utf8))
        #expect(bad.status == 400)
        let brotli = try service.request("PUT", entryPath(namespace, "br"), token: token,
                                         headers: [("Content-Encoding", "br")], body: [1, 2])
        #expect(brotli.status == 415)
    }

    @Test func gzipBombIs413NotOutOfMemory() throws {
        let bomb = try #require(Gzip.compress([UInt8](repeating: 0, count: 64 * 1024 * 1024), level: 9))
        #expect(bomb.count < 1024 * 1024)
        let put = try service.request("PUT", entryPath(namespace, "bomb"), token: token,
                                      headers: [("Content-Encoding", "gzip")], body: bomb)
        #expect(put.status == 413)
        #expect(try service.request("GET", entryPath(namespace, "bomb"), token: token).status == 404)
    }

    @Test func conditionalRequests() throws {
        let path = entryPath(namespace, "cond")
        let created = try service.request("PUT", path, token: token, headers: [("If-None-Match", "*")], body: [1])
        #expect(created.status == 201)
        let etag = try #require(created.header("ETag"))
        #expect(try service.request("PUT", path, token: token, headers: [("If-None-Match", "*")], body: [2]).status == 412)
        #expect(try service.request("PUT", path, token: token, headers: [("If-Match", "\"other\"")], body: [3])
            .status == 412)
        let replaced = try service.request("PUT", path, token: token, headers: [("If-Match", etag)], body: [4])
        #expect(replaced.status == 200)
        let notModified = try service.request("GET", path, token: token,
                                              headers: [("If-None-Match", try #require(replaced.header("ETag")))])
        #expect(notModified.status == 304 && notModified.body.isEmpty)
        #expect(notModified.header("Cache-Status")?.hasPrefix("teamcache; hit") == true)
        #expect(try service.request("GET", path, token: token).body == [4])
        #expect(try service.request("PUT", entryPath(namespace, "absent"), token: token,
                                    headers: [("If-Match", "*")], body: [1]).status == 412)
        // Found by schemathesis: an empty If-Match once reached PostgreSQL as a NUL byte (500).
        #expect(try service.request("PUT", path, token: token, headers: [("If-Match", "")], body: [5]).status == 412)
        #expect(try service.request("PUT", path, token: token, headers: [("If-Match", "W/\"x\"")], body: [5])
            .status == 412)
    }

    @Test func createOnlyRaceYieldsExactlyOneCreated() throws {
        let path = entryPath(namespace, "race-create")
        let statuses = Locked<[Int]>([])
        DispatchQueue.concurrentPerform(iterations: 16) { index in
            let response = try? service.request("PUT", path, token: token, headers: [("If-None-Match", "*")],
                                                body: [UInt8(index)])
            statuses.withLock { $0.append(response?.status ?? 0) }
        }
        #expect(statuses.value.filter { $0 == 201 }.count == 1)
        #expect(statuses.value.filter { $0 == 412 }.count == 15)
    }

    @Test func racingWritersNeverProduceATornBody() throws {
        let keys = ["r0", "r1", "r2"]
        // Each body is one byte value repeated: a torn or mixed body would hold two values.
        let bodies = (0..<8).map { value in [UInt8](repeating: UInt8(value), count: 200_000 + value * 1000) }
        let failures = Locked<[Int]>([])
        DispatchQueue.concurrentPerform(iterations: 16) { worker in
            for round in 0..<12 {
                let key = keys[(worker + round) % keys.count]
                if worker % 2 == 0 {
                    let body = bodies[(worker + round) % bodies.count]
                    let status = (try? service.request("PUT", entryPath(namespace, key), token: token, body: body))?
                        .status ?? 0
                    if status != 200 && status != 201 { failures.withLock { $0.append(status) } }
                } else if let get = try? service.request("GET", entryPath(namespace, key), token: token),
                          get.status == 200 {
                    let value = get.body.first ?? 0
                    if get.body.count != 200_000 + Int(value) * 1000 || get.body.contains(where: { $0 != value }) {
                        failures.withLock { $0.append(-1) }
                    }
                }
            }
        }
        #expect(failures.value.isEmpty)
    }

    @Test func requestCacheControlDirectives() throws {
        let path = entryPath(namespace, "cc")
        #expect(try service.request("PUT", path, token: token, body: [7]).status == 201)
        let bypass = try service.request("GET", path, token: token, headers: [("Cache-Control", "no-cache")])
        #expect(bypass.status == 404 && bypass.header("Cache-Status") == "teamcache; fwd=request")
        let miss = try service.request("GET", entryPath(namespace, "nothing"), token: token,
                                       headers: [("Cache-Control", "only-if-cached")])
        #expect(miss.status == 504 && miss.header("Cache-Status") == "teamcache; fwd=miss")
        let plainMiss = try service.request("GET", entryPath(namespace, "nothing"), token: token)
        #expect(plainMiss.status == 404 && plainMiss.header("Cache-Status") == "teamcache; fwd=miss")
    }

    @Test func headHasGetHeadersAndDeleteEvicts() throws {
        let path = entryPath(namespace, "head")
        #expect(try service.request("PUT", path, token: token, headers: [("Content-Type", "text/plain")],
                                    body: Array("abc".utf8)).status == 201)
        let head = try service.request("HEAD", path, token: token)
        #expect(head.status == 200 && head.header("Content-Length") == "3" && head.body.isEmpty)
        #expect(head.header("ETag") != nil && head.header("Expires") != nil && head.header("Last-Modified") != nil)
        #expect(try service.request("DELETE", path, token: token).status == 204)
        #expect(try service.request("DELETE", path, token: token).status == 404)
        #expect(try service.request("GET", path, token: token).status == 404)
    }

    @Test func putResponseDescribesTheStoredEntry() throws {
        let put = try service.request("PUT", entryPath(namespace, "desc") + "?ttl=120", token: token,
                                      headers: [("Cache-Tag", "user:42, feature-x")], body: Array("x".utf8))
        let body = try object(put)
        #expect(put.header("Location") == "/v1/caches/\(namespace)/entries/desc")
        #expect(body["namespace"] as? String == namespace && body["key"] as? String == "desc")
        #expect(body["size"] as? Int == 1 && body["encoding"] as? String == "identity")
        let expires = try #require(Timestamp(body["expires_at"] as? String))
        #expect(abs(expires.timeIntervalSinceNow - 120) < 5)
        let get = try service.request("GET", entryPath(namespace, "desc"), token: token)
        let ttl = Int(get.header("Cache-Status")?.split(separator: "=").last ?? "") ?? 0
        #expect((115...120).contains(ttl))
    }
}

func Timestamp(_ text: String?) -> Date? {
    guard let text else { return nil }
    let formatter = ISO8601DateFormatter()
    return formatter.date(from: text)
}
