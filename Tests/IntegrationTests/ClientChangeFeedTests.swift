import CacheCore
import CacheKeys
import Foundation
import HTTPServer
import Locking
import Postgres
@testable import TeamCacheClient
import Testing
import TestSupport

/// The Swift client following a namespace's change feed, as an app's local cache would.
@Suite struct ClientChangeFeedTests {
    let service = TestService.shared

    @Test func aFollowerReplaysTheFeedAndLongPolls() async throws {
        let namespace = TestService.namespace("clientfeed")
        let client = TeamCacheClient(.init(baseURL: URL(string: "http://127.0.0.1:\(service.port)")!,
                                           token: try writer(namespace)))
        var etags: [String: String] = [:]
        for index in 0..<5 {
            etags["k\(index)"] = try await client.put(namespace: namespace, key: "k\(index)", body: Data("v\(index)".utf8),
                                                      ttl: 3600).etag
        }
        #expect(try await client.delete(namespace: namespace, key: "k2"))
        etags["k2"] = nil
        var replica: [String: String] = [:]
        var cursor = "0"
        while true {
            let page = try await client.changes(namespace: namespace, since: cursor, limit: 2)
            for change in page.changes {
                let key = try #require(change.keyText)
                replica[key] = change.kind == .put ? change.etag : nil
            }
            cursor = page.next
            if !page.more { break }
        }
        #expect(replica == etags)
        async let woken = client.changes(namespace: namespace, since: cursor, wait: 10, includeBody: true)
        try await Task.sleep(nanoseconds: 500_000_000)
        _ = try await client.put(namespace: namespace, key: "late", body: Data("late".utf8), ttl: 3600)
        let page = try await woken
        #expect(page.changes.map(\.keyText) == ["late"])
        #expect(page.changes.first?.body == Data("late".utf8) && page.changes.first?.encoding == "identity")
        await #expect(throws: TeamCacheClientError.self) {
            _ = try await client.changes(namespace: namespace, since: "9000000000000000000")
        }
    }
}
