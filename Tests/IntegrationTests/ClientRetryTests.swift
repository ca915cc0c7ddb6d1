import CacheCore
import CacheKeys
import Foundation
import HTTPServer
import Locking
import Postgres
@testable import TeamCacheClient
import Testing
import TestSupport

/// What the Swift client retries: a 503 only for idempotent calls (a leased lookup that
/// reached the server is not sent again, or it would meet its own lease as "pending"), a 429
/// always, and a `Retry-After` that is negative or not a number cannot trap it.
@Suite struct ClientRetryTests {
    final class Counter: @unchecked Sendable {
        // @unchecked: `count` is only touched under `lock`.
        private let lock = NSLock()
        private var count = 0
        func add() { lock.withLock { count += 1 } }
        var value: Int { lock.withLock { count } }
    }

    static func server(status: Int, retryAfter: String, counter: Counter) throws -> HTTPServer {
        var configuration = HTTPServerConfiguration()
        configuration.port = 0
        let answer: HTTPHandler = { _ in
            counter.add()
            return HTTPResponse(status: status, headers: HTTPHeaders([("Retry-After", retryAfter),
                                                                      ("Content-Type", "application/problem+json")]),
                                body: Array("{\"title\":\"busy\",\"status\":\(status)}".utf8))
        }
        let server = HTTPServer(configuration: configuration, routes: [
            Route("POST", "/v1/caches/{ns}/lookup", handler: answer), Route("GET", "/v1/caches/{ns}/entries/{key}", handler: answer),
        ])
        try server.start()
        return server
    }

    static func client(_ port: Int) -> TeamCacheClient {
        var configuration = TeamCacheClient.Configuration(baseURL: URL(string: "http://127.0.0.1:\(port)")!, token: "t")
        configuration.maxRetries = 2
        configuration.backoff = 0.01
        configuration.breaker = nil  // retries are the subject here, not the breaker
        return TeamCacheClient(configuration)
    }

    @Test func a503IsRetriedOnlyForIdempotentCalls() async throws {
        let counter = Counter()
        let server = try Self.server(status: 503, retryAfter: "-5", counter: counter)
        defer { server.shutdown() }
        let client = Self.client(server.port)
        let descriptor = Descriptor(model: "m", input: .prompt("p"))
        await #expect(throws: TeamCacheClientError.self) {
            _ = try await client.lookup(namespace: "n", descriptor, lease: 30, wait: 1)
        }
        #expect(counter.value == 1, "a leased lookup was sent \(counter.value) times")
        await #expect(throws: TeamCacheClientError.self) {
            _ = try await client.lookup(namespace: "n", descriptor, wait: 1)
        }
        #expect(counter.value == 1 + 3, "a plain lookup that waits is retried twice")
        // Without a wait a lookup is on the caller's path: never slept on for a retry.
        await #expect(throws: TeamCacheClientError.self) { _ = try await client.lookup(namespace: "n", descriptor) }
        await #expect(throws: TeamCacheClientError.self) { _ = try await client.get(namespace: "n", key: "k") }
        #expect(counter.value == 4 + 2)
    }

    @Test func a429IsRetriedAndRetryAfterIsClamped() async throws {
        let counter = Counter()
        let server = try Self.server(status: 429, retryAfter: "nan", counter: counter)
        defer { server.shutdown() }
        await #expect(throws: TeamCacheClientError.self) {
            _ = try await Self.client(server.port).lookup(namespace: "n", Descriptor(model: "m", input: .prompt("p")),
                                                          lease: 5, wait: 1)
        }
        #expect(counter.value == 3)
        for (header, nanoseconds) in [("-5", UInt64(0)), ("inf", 100_000_000), ("1e300", 5_000_000_000), ("2", 2_000_000_000),
                                      ("x", 100_000_000), (" 1 ", 1_000_000_000)] {
            #expect(TeamCacheClient.pauseNanoseconds(retryAfter: header, otherwise: 0.1) == nanoseconds, "\(header)")
        }
        #expect(TeamCacheClient.pauseNanoseconds(retryAfter: nil, otherwise: -.infinity) == 0)
    }
}
