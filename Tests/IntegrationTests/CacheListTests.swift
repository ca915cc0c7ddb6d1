import Foundation
import Testing
import TestSupport

/// `GET /v1/caches`: every namespace a token may read, each with its totals (the same as its
/// `/stats`), and nothing it may not: a pattern's `_` and `%` are names, not wildcards.
@Suite struct CacheListTests {
    let service = TestService.shared

    func listed(_ token: String) throws -> [String: [String: Any]] {
        let answer = try service.request("GET", "/v1/caches", token: token)
        #expect(answer.status == 200)
        let caches = try object(answer)["caches"] as? [[String: Any]] ?? []
        return Dictionary(caches.map { ($0["namespace"] as? String ?? "", $0) }, uniquingKeysWith: { a, _ in a })
    }

    @Test func aTokenSeesTheNamespacesItMayReadWithTheirTotals() throws {
        let team = "list\(UInt32.random(in: 0...UInt32.max))"
        let writer = try service.token([.read, .write], namespaces: "\(team)-*")
        for (namespace, keys) in [("\(team)-a", 2), ("\(team)-b", 1), ("\(team)_c", 1)] {
            let own = try service.token([.read, .write], namespaces: namespace)
            for index in 0..<keys {
                #expect(try service.request("PUT", entryPath(namespace, "k\(index)"), token: own, body: [1, 2, 3]).status == 201)
            }
        }
        _ = try service.request("GET", entryPath("\(team)-a", "k0"), token: writer)
        _ = try service.request("GET", entryPath("\(team)-a", "absent"), token: writer)
        try service.app.tracker.flush()
        let seen = try listed(writer)
        // `team-*` reaches -a and -b; `team_c` is not under it (LIKE's `_` is not a wildcard here).
        #expect(Set(seen.keys) == ["\(team)-a", "\(team)-b"])
        let a = try #require(seen["\(team)-a"])
        #expect(a["entries"] as? Int == 2)
        #expect((a["lookups"] as? [String: Int])?["hit"] == 1 && (a["lookups"] as? [String: Int])?["miss"] == 1)
        #expect(a["top"] == nil)
        // The same totals as the namespace's own stats.
        let stats = try object(try service.request("GET", "/v1/caches/\(team)-a/stats", token: writer))
        #expect(stats["entries"] as? Int == a["entries"] as? Int)
        #expect(stats["bytes"] as? [String: Int] == a["bytes"] as? [String: Int])
        #expect(stats["hit_ratio"] as? Double == a["hit_ratio"] as? Double)
        // An admin of everything sees all three.
        let admin = try service.token([.admin], namespaces: "*")
        #expect(Set(try listed(admin).keys).isSuperset(of: ["\(team)-a", "\(team)-b", "\(team)_c"]))
    }

    @Test func aTokenThatMayReadNothingIsRefused() throws {
        let metrics = try service.token([.metrics], namespaces: "*")
        #expect(try service.request("GET", "/v1/caches", token: metrics).status == 403)
        #expect(try service.request("GET", "/v1/caches").status == 401)
        #expect(try service.request("GET", "/v1/caches", token: "tc_" + String(repeating: "0", count: 64)).status == 401)
    }
}
