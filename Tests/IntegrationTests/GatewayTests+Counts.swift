import CacheCore
import Foundation
import Locking
import Testing
import TestSupport

/// What the gateway's callers add to the namespace's stats, counted by hand: each call once,
/// by how it ended. A caller who followed another's call is a collapsed hit that saved the
/// answer's tokens (never also a miss); a stale answer to an upstream failure is stale, not
/// also a miss.
extension GatewayTests {
    func lookups(_ namespace: String, token: String) throws -> (counts: [String: Int], tokens: [String: Int]) {
        try service.app.tracker.flush()
        let answer = try service.request("GET", "/v1/caches/\(namespace)/stats", token: token)
        let stats = try #require(try JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: Any])
        return (stats["lookups"] as? [String: Int] ?? [:], stats["tokens_saved"] as? [String: Int] ?? [:])
    }

    @Test func followersCountAsCollapsedHitsThatSavedTheirTokens() throws {
        let namespace = TestService.namespace("gw-counts")
        let secret = try service.token([.read, .write], namespaces: namespace)
        let headers = [("TeamCache-Authorization", "Bearer \(secret)")]
        let prompt = ModelBodies.unique("stall counted")
        let answers = try askWhileTheFirstIsUnderWay(path("local", "chat/completions", namespace: namespace),
                                                     headers: headers, prompt: prompt, followers: 2)
        #expect(answers.filter { $0.header("X-TeamCache") == "hit; collapsed" }.count == 2)
        #expect(try harness.count(prompt) == 1)
        let (counts, tokens) = try lookups(namespace, token: secret)
        #expect([counts["miss"], counts["hit"], counts["collapsed"]] == [1, 2, 2], "\(counts)")
        // The fake upstream's usage: 11 prompt tokens, 7 completion tokens.
        #expect(tokens == ["input": 22, "output": 14], "\(tokens)")
    }

    @Test func aStaleAnswerToAFailureCountsAsStaleAlone() throws {
        let namespace = TestService.namespace("gw-stale-counts")
        let secret = try service.token([.read, .write], namespaces: namespace)
        let headers = [("TeamCache-Authorization", "Bearer \(secret)")]
        let body = ModelBodies.chat(ModelBodies.unique("stall stale counted"))
        let target = path("impatient", "chat/completions", namespace: namespace)
        let stored = try service.request("POST", path("local", "chat/completions", namespace: namespace),
                                         headers: headers + [("TeamCache-TTL", "1")], json: body)
        #expect(stored.header("X-TeamCache") == "miss")
        Thread.sleep(forTimeInterval: 1.5)
        // The upstream stalls past the 2 s first-byte deadline: the stale entry answers.
        let stale = try service.request("POST", target, headers: headers + [("Cache-Control", "max-stale=600")],
                                        json: body)
        #expect(stale.header("X-TeamCache") == "hit; stale")
        let (counts, _) = try lookups(namespace, token: secret)
        #expect([counts["miss"], counts["stale"], counts["hit"]] == [1, 1, 0], "\(counts)")
    }
}
