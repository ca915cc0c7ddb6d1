import CacheCore
import CacheKeys
import Foundation
import HTTPServer
import Locking
import Postgres
@testable import TeamCacheClient
import Testing
import TestSupport

@Suite struct ClientTests {
    let service = TestService.shared
    let namespace = TestService.namespace("client")

    /// A client whose lookups and reads wait up to 30 s: what these tests check is the
    /// entries, keys and the lease and wait protocol, not the short deadline of a lookup or read
    /// on a caller's path (0.5 s), which `ClientFailOpenTests` tests. In CI's parallel run one
    /// first lookup of a new token (authorized through the database on a worker) passed it: the
    /// caller called the model itself, as it must when the cache is slow, and a burst counted
    /// two calls.
    func client(_ token: String?) -> TeamCacheClient {
        var configuration = TeamCacheClient.Configuration(baseURL: URL(string: "http://127.0.0.1:\(service.port)")!,
                                                          token: token)
        configuration.lookupTimeout = 30
        return TeamCacheClient(configuration)
    }

    @Test func rawEntriesRoundTrip() async throws {
        let client = client(try writer(namespace))
        let body = Data(String(repeating: "{\"a\":1}", count: 300).utf8)
        // A TTL far longer than the test: in a full parallel run, blocking suites can starve the
        // cooperative pool this async test resumes on for over a minute between two awaits
        // (seen: a 60 s TTL ran out between the PUT's answer and the GET).
        let putAt = Date()
        let written = try await client.put(namespace: namespace, key: "a/b c", body: body,
                                           contentType: "application/json", ttl: 3600, tags: ["t1"])
        #expect(written.created && written.key == "a/b c" && written.encoding == "gzip")
        guard let entry = try await client.get(namespace: namespace, key: "a/b c") else {
            // Diagnostics for a miss seen once in a few full-suite runs: is the row there?
            let again = try RawClient(port: service.port, timeout: 10).request(
                "GET", "/v1/caches/\(namespace)/entries/a%2Fb%20c", headers: [("Authorization", "Bearer \(try writer(namespace))")])
            let rows = try PostgresConnection(url: try TestDatabase.shared.migratedDefault()).query(
                "SELECT count(*)::int8 AS n, max(expires_at)::text AS e, now()::text AS now FROM entries WHERE namespace = $1",
                [.text(namespace)]).first
            Issue.record("GET missed after PUT 201 (\(Date().timeIntervalSince(putAt)) s since the PUT); again: \(again.status) \(again.header("Cache-Status") ?? "-"); rows: \(try rows?.int("n") ?? -1) \(try rows?.string("e") ?? "-") \(try rows?.string("now") ?? "-")")
            return
        }
        #expect(entry.body == body && entry.contentType == "application/json")
        #expect(entry.cacheStatus?.hasPrefix("teamcache; hit") == true)
        #expect(try await client.evict(namespace: namespace, [("tag", .string("t1"))]) == 1)
        #expect(try await client.get(namespace: namespace, key: "a/b c") == nil)
        #expect(try await client.delete(namespace: namespace, key: "a/b c") == false)
    }

    /// A token read from a file keeps its newline: sent trimmed, it works.
    @Test func aTokenReadWithItsNewlineWorks() async throws {
        let client = client(try writer(namespace) + "\n")
        let written = try await client.put(namespace: namespace, key: "newline", body: Data("kept".utf8),
                                           contentType: "text/plain", ttl: 3600)
        #expect(written.created)
        #expect(try await client.get(namespace: namespace, key: "newline")?.body == Data("kept".utf8))
    }

    /// A user and password in the base URL must not stand in for the token (URLSession's curl
    /// would send them as Basic auth unless the bearer header wins): the token still works.
    @Test func aUserAndPasswordInTheURLDoNotReplaceTheToken() async throws {
        let url = URL(string: "http://someone:secret@127.0.0.1:\(service.port)")!
        let client = TeamCacheClient(TeamCacheClient.Configuration(baseURL: url, token: try writer(namespace)))
        let written = try await client.put(namespace: namespace, key: "userinfo", body: Data("kept".utf8),
                                           contentType: "text/plain", ttl: 3600)
        #expect(written.created)
        #expect(try await client.get(namespace: namespace, key: "userinfo")?.body == Data("kept".utf8))
    }

    @Test func descriptorKeysMatchTheServers() async throws {
        let client = client(try writer(namespace))
        let descriptor = Descriptor(model: "m", input: .prompt(" hello \r\n"), params: .object([("t", .number("0.5"))]))
        guard case .miss(let key) = try await client.lookup(namespace: namespace, descriptor) else {
            Issue.record("expected a miss")
            return
        }
        #expect(key == descriptor.key)
        let answer = ModelAnswer(response: "hi", metadata: ModelAnswer.metadata(inputTokens: 3, outputTokens: 1))
        #expect(try await client.upsert(namespace: namespace, descriptor, answer: answer).key == descriptor.key)
        // The deadline is long here (see `client`), so a lookup that came to take seconds (an
        // unintended wait, say) would still pass: it must not, by a margin no load reaches.
        let asked = ProcessInfo.processInfo.systemUptime
        let hit = try await client.lookup(namespace: namespace, descriptor)
        let took = ProcessInfo.processInfo.systemUptime - asked
        #expect(took < 5, "a hit's lookup took \(took) s")
        guard case .hit(let cached, _, _, let stale) = hit else {
            Issue.record("expected a hit")
            return
        }
        #expect(cached.response == "hi" && !stale)
        #expect(cached.metadata?["input_tokens"] == .number("3"))
    }

    @Test func cachedCallsTheModelOncePerPromptAndOnRefresh() async throws {
        let client = client(try writer(namespace))
        let calls = Locked(0)
        let descriptor = Descriptor(model: "m", input: .prompt("count me"))
        for _ in 0..<3 {
            let answer = try await client.cached(namespace: namespace, descriptor) {
                calls.withLock { $0 += 1 }
                return ModelAnswer(response: "answer \(calls.value)")
            }
            #expect(answer.response == "answer 1")
        }
        let refreshed = try await client.cached(namespace: namespace, descriptor, options: .init(refresh: true)) {
            calls.withLock { $0 += 1 }
            return ModelAnswer(response: "answer \(calls.value)")
        }
        #expect(refreshed.response == "answer 2" && calls.value == 2)
    }

    @Test func staleOnErrorServesAnExpiredAnswerWhenTheModelFails() async throws {
        let clock = ManualClock()
        let local = try await offThePool { try TestService(clock: clock) { $0.authEnabled = false } }
        defer { local.stop() }
        let client = TeamCacheClient(.init(baseURL: URL(string: "http://127.0.0.1:\(local.port)")!, token: nil))
        let descriptor = Descriptor(model: "m", input: .prompt("offline"))
        struct ModelDown: Error {}
        _ = try await client.cached(namespace: "offline", descriptor, options: .init(ttl: 10)) { ModelAnswer(response: "ok") }
        clock.advance(by: 60)
        let fallback = try await client.cached(namespace: "offline", descriptor, options: .init(staleOnError: 3600)) {
            throw ModelDown()
        }
        #expect(fallback.response == "ok")
        await #expect(throws: ModelDown.self) {
            _ = try await client.cached(namespace: "offline", descriptor) { throw ModelDown() }
        }
    }

    /// Ten concurrent `cached` calls for one new prompt: the model is called once, and every
    /// caller gets its answer. The token is new, so each lookup is authorized through the
    /// database on a worker first: such a lookup must still be able to wait.
    @Test func cachedMakesOneCallPerBurst() async throws {
        let client = client(try writer(namespace))
        let descriptor = Descriptor(model: "m", input: .prompt("burst \(UUID())"))
        let calls = Locked(0)
        let answers = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<10 {
                group.addTask {
                    try await client.cached(namespace: namespace, descriptor, options: .init(ttl: 3600)) {
                        calls.withLock { $0 += 1 }
                        try await Task.sleep(nanoseconds: 300_000_000)
                        return ModelAnswer(response: "the one answer")
                    }.response
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(calls.value == 1, "the model was called \(calls.value) times")
        #expect(answers.count == 10 && answers.allSatisfy { $0 == "the one answer" })
    }

    /// The filler's call throws: it gives the lease back, one waiter is handed it and calls
    /// the model, and the rest are answered by that fill.
    @Test func aFillerThatFailsHandsTheLeaseOn() async throws {
        let client = client(try writer(namespace))
        let descriptor = Descriptor(model: "m", input: .prompt("fails once \(UUID())"))
        struct ModelDown: Error {}
        let calls = Locked(0)
        let results = await withTaskGroup(of: String?.self) { group in
            for _ in 0..<6 {
                group.addTask {
                    try? await client.cached(namespace: namespace, descriptor, options: .init(ttl: 3600)) {
                        let call = calls.withLock { value -> Int in
                            value += 1
                            return value
                        }
                        try await Task.sleep(nanoseconds: 200_000_000)
                        if call == 1 { throw ModelDown() }
                        return ModelAnswer(response: "second try")
                    }.response
                }
            }
            return await group.reduce(into: []) { $0.append($1) }
        }
        #expect(calls.value == 2, "the model was called \(calls.value) times")
        #expect(results.filter { $0 == nil }.count == 1 && results.filter { $0 == "second try" }.count == 5)
    }

    @Test func problemsSurfaceWithStatus() async throws {
        var configuration = TeamCacheClient.Configuration(baseURL: URL(string: "http://127.0.0.1:\(service.port)")!,
                                                          token: "tc_" + String(repeating: "1", count: 64))
        configuration.breaker = nil  // each call reaches the server: the problem is the subject
        let client = TeamCacheClient(configuration)
        await #expect(throws: TeamCacheClientError.self) {
            _ = try await client.get(namespace: namespace, key: "k")
        }
        do {
            _ = try await client.get(namespace: namespace, key: "k")
        } catch TeamCacheClientError.problem(let status, _, _) {
            #expect(status == 401)
        }
    }

    /// A write is retried on 503 honouring Retry-After; a read on a caller's path (a GET
    /// without a wait) is not: the caller is better off calling the upstream now.
    @Test func retriesOn503HonouringRetryAfter() async throws {
        let attempts = Locked(0)
        var configuration = HTTPServerConfiguration()
        configuration.port = 0
        let flaky: HTTPHandler = { request in
            attempts.withLock { $0 += 1 }
            if attempts.value % 3 != 0 {
                throw HTTPError(503, "down", headers: HTTPHeaders([("Retry-After", "0")]))
            }
            return request.method == "GET" ? .text(200, "finally")
                : .json(200, "{\"key\":\"k\",\"etag\":\"e\",\"size\":1,\"stored_size\":1,\"encoding\":\"identity\"}")
        }
        let server = HTTPServer(configuration: configuration, routes: [
            Route("GET", "/v1/caches/{ns}/entries/{key}", handler: flaky),
            Route("PUT", "/v1/caches/{ns}/entries/{key}", handler: flaky),
        ])
        try server.start()
        defer { server.shutdown() }
        var clientConfiguration = TeamCacheClient.Configuration(baseURL: URL(string: "http://127.0.0.1:\(server.port)")!,
                                                                token: nil)
        clientConfiguration.breaker = nil
        let client = TeamCacheClient(clientConfiguration)
        let written = try await client.put(namespace: "n", key: "k", body: Data([1]))
        #expect(written.key == "k" && attempts.value == 3)
        await #expect(throws: TeamCacheClientError.self) { _ = try await client.get(namespace: "n", key: "k") }
        #expect(attempts.value == 4, "a read on the caller's path was retried")
    }
}
