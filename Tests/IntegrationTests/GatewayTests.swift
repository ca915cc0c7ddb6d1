import CacheCore
import Foundation
import Locking
import Postgres
import TeamCache
import Testing
import TestSupport

/// The gateway against a real PostgreSQL, a real listening service and a fake upstream in a
/// child process: hits marked as such, credentials forwarded or replaced (never the token),
/// streams relayed as they come and replayed byte for byte, cut streams and errors not
/// stored, 502 and 504, every path refusal (with no upstream request), request controls.
@Suite(.serialized) struct GatewayTests {
    static let harness = Result { try GatewayHarness() }
    static let service = Result { try harness.get().service() }

    let namespace = TestService.namespace("gw")
    var harness: GatewayHarness { get throws { try Self.harness.get() } }
    var service: TestService { get throws { try Self.service.get() } }

    func path(_ upstream: String, _ rest: String, namespace: String? = nil) -> String {
        "/v1/caches/\(namespace ?? self.namespace)/gateway/\(upstream)/\(rest)"
    }

    func token(_ scopes: Set<Scope> = [.read, .write]) throws -> String {
        try service.token(scopes, namespaces: namespace)
    }

    func post(_ upstream: String, _ rest: String, _ body: String, headers: [(String, String)]) throws
        -> RawClient.Response {
        try service.request("POST", path(upstream, rest), headers: headers, json: body)
    }

    @Test func aRepeatIsAHitWithTheSameAnswerAndOneUpstreamCall() throws {
        let prompt = ModelBodies.unique("repeat")
        let headers = [("TeamCache-Authorization", "Bearer \(try token())"), ("Authorization", "Bearer sk-caller-1")]
        let first = try post("local", "chat/completions", ModelBodies.chat(prompt), headers: headers)
        #expect(first.status == 200)
        #expect(first.header("X-TeamCache") == "miss")
        #expect(first.header("Cache-Status") == "teamcache; fwd=miss; stored")
        let second = try post("local", "chat/completions", ModelBodies.chat(prompt), headers: headers)
        #expect(second.status == 200)
        #expect(second.header("X-TeamCache") == "hit")
        #expect(second.header("Cache-Status")?.hasPrefix("teamcache; hit; ttl=") == true)
        #expect(second.header("Content-Type") == "application/json")
        #expect(second.body == first.body)
        #expect(try harness.count(prompt) == 1)
        // The hit counts the tokens the stored answer's usage says it saved.
        try service.app.tracker.flush()
        let stats = try object(try service.request("GET", "/v1/caches/\(namespace)/stats", token: try token()))
        let saved = stats["tokens_saved"] as? [String: Any]
        #expect(saved?["input"] as? Int == 11 && saved?["output"] as? Int == 7)
    }

    @Test func theCallersCredentialIsForwardedAndTheTokenNever() throws {
        let secret = try token()
        let prompt = ModelBodies.unique("credential")
        let answer = try post("local", "chat/completions", ModelBodies.chat(prompt), headers: [
            ("TeamCache-Authorization", "Bearer \(secret)"), ("Authorization", "Bearer sk-caller-2"),
            ("Connection", "keep-alive, X-Hop"), ("X-Hop", "1"), ("TE", "trailers"), ("OpenAI-Organization", "org-1"),
            ("Accept-Encoding", "gzip, br"),
        ])
        #expect(answer.status == 200)
        #expect(answer.header("X-Upstream-Account") == "org-of-this-caller", "the caller's own call: its fields")
        let headers = try #require(try harness.call(prompt)?["headers"] as? [String: String])
        #expect(headers["authorization"] == "Bearer sk-caller-2")
        #expect(headers["openai-organization"] == "org-1")
        #expect(headers["host"] == "127.0.0.1:\(try harness.upstream.port)")
        // The gateway decodes nothing, so it asks for no encoding, whatever the caller takes.
        #expect(headers["accept-encoding"] == "identity")
        for dropped in ["teamcache-authorization", "x-hop", "te", "connection"] {
            #expect(headers[dropped] == nil, "\(dropped) was forwarded")
        }
        #expect(!headers.values.contains { $0.contains(secret) })
    }

    @Test func theServerHeldKeyReplacesATokenGivenAsTheSDKsKey() throws {
        let secret = try token()
        let openAI = ModelBodies.unique("server key")
        #expect(try post("keyed", "chat/completions", ModelBodies.chat(openAI),
                         headers: [("Authorization", "Bearer \(secret)")]).status == 200)
        let sent = try #require(try harness.call(openAI)?["headers"] as? [String: String])
        #expect(sent["authorization"] == "Bearer \(GatewayHarness.serverKey)")
        let anthropic = ModelBodies.unique("server key")
        #expect(try post("keyedclaude", "v1/messages", ModelBodies.messages(anthropic),
                         headers: [("x-api-key", secret), ("anthropic-version", "2023-06-01")]).status == 200)
        let sentToAnthropic = try #require(try harness.call(anthropic)?["headers"] as? [String: String])
        #expect(sentToAnthropic["x-api-key"] == GatewayHarness.serverKey)
        #expect(sentToAnthropic["anthropic-version"] == "2023-06-01")
        // Wherever the token is put, it is never forwarded: with a key held, the key goes instead.
        let shapes = ModelBodies.unique("token shapes")
        #expect(try post("keyed", "chat/completions", ModelBodies.chat(shapes), headers: [
            ("TeamCache-Authorization", "Bearer \(secret)"), ("Authorization", "Basic \(secret)"), ("api-key", secret),
            ("X-Custom", "x\(secret)y"),
        ]).status == 200)
        let shaped = try #require(try harness.call(shapes)?["headers"] as? [String: String])
        #expect(!shaped.values.contains { $0.contains(secret) })
        #expect(shaped["authorization"] == "Bearer \(GatewayHarness.serverKey)")
        #expect(try service.request("POST", path("keyed", "chat/completions?key=\(secret)"),
                                    headers: [("TeamCache-Authorization", "Bearer \(secret)")],
                                    json: ModelBodies.chat(shapes)).status == 400)
        // An upstream without a key of its own: the token is refused, not forwarded.
        let refused = ModelBodies.unique("no server key")
        let answer = try post("local", "chat/completions", ModelBodies.chat(refused),
                              headers: [("Authorization", "Bearer \(secret)")])
        #expect(answer.status == 401)
        #expect(try post("local", "chat/completions", ModelBodies.chat(refused),
                         headers: [("TeamCache-Authorization", "Bearer \(secret)"), ("api-key", secret)]).status == 401)
        #expect(answer.header("Content-Type") == "application/problem+json")
        #expect(try harness.count(refused) == 0)
    }

    /// The server-held key is lent only for the model calls the gateway caches, not for the rest
    /// of the account (files, batches, stored responses), which holds every tenant's data under
    /// that one key. A caller's own key goes where it likes, as before.
    @Test func theServerHeldKeyIsLentOnlyForModelCalls() throws {
        let headers = [("TeamCache-Authorization", "Bearer \(try token())")]
        let before = try harness.calls().count
        #expect(try service.request("GET", path("keyed", "files"), headers: headers).status == 403)
        #expect(try service.request("DELETE", path("keyed", "files/file-1"), headers: headers).status == 403)
        #expect(try post("keyed", "files", "{}", headers: headers).status == 403)
        #expect(try harness.calls().count == before, "nothing reached the upstream")
        let own = try service.request("GET", path("keyed", "files"), headers: headers + [("Authorization", "Bearer sk-own")])
        #expect(own.status != 403)
        // Calls that read nothing stored under the account go with it: the model list an SDK
        // asks at start, one model, token counts.
        #expect(try service.request("GET", path("keyed", "models"), headers: headers).status != 403)
        #expect(try service.request("GET", path("keyed", "models/gpt-x"), headers: headers).status != 403)
        #expect(try service.request("GET", path("keyed", "models/gpt-x/more"), headers: headers).status == 403)
        #expect(try post("keyedclaude", "v1/messages/count_tokens", "{}", headers: headers).status != 403)
    }

    /// A TeamCache token of any shape given as the SDK's key (a secret registered before the
    /// strength rule, say) is never forwarded either.
    @Test func aTokenOfAnyShapeIsNeverForwarded() throws {
        let prompt = ModelBodies.unique("weak token shape")
        #expect(try post("keyed", "chat/completions", ModelBodies.chat(prompt), headers: [
            ("TeamCache-Authorization", "Bearer \(try token())"), ("x-api-key", "tc_change-me-please"),
        ]).status == 200)
        let sent = try #require(try harness.call(prompt)?["headers"] as? [String: String])
        #expect(!sent.values.contains { $0.contains("tc_change-me") })
        #expect(sent["authorization"] == "Bearer \(GatewayHarness.serverKey)")
    }

    @Test func withoutATokenOrWithoutScopeNothingIsCalled() throws {
        let prompt = ModelBodies.unique("unauthorized")
        #expect(try post("local", "chat/completions", ModelBodies.chat(prompt),
                         headers: [("Authorization", "Bearer sk-caller")]).status == 401)
        let reader = try token([.read])
        #expect(try post("local", "chat/completions", ModelBodies.chat(prompt),
                         headers: [("TeamCache-Authorization", "Bearer \(reader)")]).status == 403)
        let elsewhere = try service.token([.read, .write], namespaces: "other-\(namespace)")
        #expect(try post("local", "chat/completions", ModelBodies.chat(prompt),
                         headers: [("TeamCache-Authorization", "Bearer \(elsewhere)")]).status == 403)
        #expect(try post("nosuch", "chat/completions", ModelBodies.chat(prompt),
                         headers: [("TeamCache-Authorization", "Bearer \(try token())")]).status == 404)
        #expect(try harness.count(prompt) == 0)
    }

    @Test func aStreamArrivesAsItIsSentAndAHitReplaysTheSameBytes() throws {
        let prompt = ModelBodies.unique("drip stream")
        let headers = [("TeamCache-Authorization", "Bearer \(try token())")]
        let first = try StreamedAnswer.read(port: try service.port, path("local", "chat/completions"),
                                            headers: headers, body: ModelBodies.chat(prompt, stream: true))
        #expect(first.head.status == 200)
        #expect(first.head.header("Content-Type") == "text/event-stream")
        #expect(first.head.header("X-TeamCache") == "miss")
        // Four events 250 ms apart: the first reached the caller long before the last.
        let spread = try #require(first.parts.last).at.timeIntervalSince(try #require(first.parts.first).at)
        #expect(first.parts.count >= 3 && spread > 0.5, "\(first.parts.count) parts over \(spread) s")
        #expect(first.text.hasSuffix("data: [DONE]\n\n"))
        // The usage the gateway asked for was read and taken out of what the caller sees.
        #expect(!first.text.contains("\"choices\": []"))
        let body = try #require(try harness.call(prompt)?["body"] as? [String: Any])
        #expect((body["stream_options"] as? [String: Any])?["include_usage"] as? Bool == true)
        let second = try StreamedAnswer.read(port: try service.port, path("local", "chat/completions"),
                                             headers: headers, body: ModelBodies.chat(prompt, stream: true))
        #expect(second.head.header("X-TeamCache") == "hit")
        #expect(second.head.header("Content-Type") == "text/event-stream")
        #expect(second.body == first.body)
        #expect(try harness.count(prompt) == 1)
        // Streamed and whole answers are separate entries.
        let whole = try post("local", "chat/completions", ModelBodies.chat(prompt), headers: headers)
        #expect(whole.header("X-TeamCache") == "miss")
    }

    @Test func anAnthropicStreamIsStoredWithItsUsageAndReplayed() throws {
        let prompt = ModelBodies.unique("claude stream")
        let headers = [("TeamCache-Authorization", "Bearer \(try token())"), ("x-api-key", "sk-ant-caller")]
        let first = try StreamedAnswer.read(port: try service.port, path("claude", "v1/messages"), headers: headers,
                                            body: ModelBodies.messages(prompt, stream: true))
        #expect(first.head.status == 200 && first.text.contains("message_stop"))
        let second = try StreamedAnswer.read(port: try service.port, path("claude", "v1/messages"), headers: headers,
                                             body: ModelBodies.messages(prompt, stream: true))
        #expect(second.head.header("X-TeamCache") == "hit")
        #expect(second.body == first.body)
        #expect(try harness.count(prompt) == 1)
        #expect(try harness.call(prompt)?["path"] as? String == "/v1/messages")
    }

    @Test func aStreamCutShortReachesTheCallerButIsNotStored() throws {
        let prompt = ModelBodies.unique("cut stream")
        let headers = [("TeamCache-Authorization", "Bearer \(try token())")]
        for _ in 0..<2 {
            let answer = try StreamedAnswer.read(port: try service.port, path("local", "chat/completions"),
                                                 headers: headers, body: ModelBodies.chat(prompt, stream: true))
            #expect(answer.head.header("X-TeamCache") == "miss")
            #expect(!answer.text.contains("[DONE]"))
        }
        #expect(try harness.count(prompt) == 2)
    }

    @Test func anUpstreamErrorIsForwardedAsItIsAndNotStored() throws {
        let prompt = ModelBodies.unique("fail")
        let headers = [("TeamCache-Authorization", "Bearer \(try token())")]
        for _ in 0..<2 {
            let answer = try post("local", "chat/completions", ModelBodies.chat(prompt), headers: headers)
            #expect(answer.status == 500)
            #expect(answer.text.contains("upstream broke"))
            #expect(answer.header("X-TeamCache") == "miss")
        }
        #expect(try harness.count(prompt) == 2)
    }

    /// A 200 whose document is an error, a stream with an error event before its `[DONE]`, and
    /// a 202 are relayed as they came and never stored: every call reaches the upstream.
    @Test func anAnswerReportingAFailureIsRelayedButNotStored() throws {
        let headers = [("TeamCache-Authorization", "Bearer \(try token())")]
        let broken = ModelBodies.unique("broken200")
        for _ in 0..<2 {
            let answer = try post("local", "chat/completions", ModelBodies.chat(broken), headers: headers)
            #expect(answer.status == 200 && answer.text.contains("engine broke"))
            #expect(answer.header("X-TeamCache") == "miss")
        }
        #expect(try harness.count(broken) == 2)
        let streamed = ModelBodies.unique("broken200 streamed")
        for _ in 0..<2 {
            let answer = try StreamedAnswer.read(port: try service.port, path("local", "chat/completions"),
                                                 headers: headers, body: ModelBodies.chat(streamed, stream: true))
            #expect(answer.head.header("X-TeamCache") == "miss")
            #expect(answer.text.contains("engine broke") && answer.text.contains("[DONE]"))
        }
        #expect(try harness.count(streamed) == 2)
        let accepted = ModelBodies.unique("accepted202")
        for _ in 0..<2 {
            #expect(try post("local", "chat/completions", ModelBodies.chat(accepted), headers: headers).status == 202)
        }
        #expect(try harness.count(accepted) == 2)
    }

    /// A stale answer served when the upstream fails is held to the caller's `max-stale` when
    /// the failure comes, not only when the call began: a call that failed after its deadline
    /// may have left the entry staler than the caller takes.
    @Test func aStaleAnswerAfterAFailureKeepsToMaxStale() throws {
        let headers = [("TeamCache-Authorization", "Bearer \(try token())")]
        let body = ModelBodies.chat(ModelBodies.unique("stall"))
        let stored = try post("local", "chat/completions", body, headers: headers + [("TeamCache-TTL", "1")])
        #expect(stored.header("X-TeamCache") == "miss")
        Thread.sleep(forTimeInterval: 2)
        // About 1 s overdue when asked, about 3 s when the upstream's 2 s first-byte deadline ends.
        let tooStale = try post("impatient", "chat/completions", body,
                                headers: headers + [("Cache-Control", "max-stale=2")])
        #expect(tooStale.status == 504, "\(tooStale.status) \(tooStale.header("X-TeamCache") ?? "")")
        let taken = try post("impatient", "chat/completions", body,
                             headers: headers + [("Cache-Control", "max-stale=60")])
        #expect(taken.status == 200 && taken.header("X-TeamCache") == "hit; stale")
        #expect(taken.body == stored.body)
    }

    @Test func anUnreachableUpstreamIs502AndASilentOneIs504() throws {
        let headers = [("TeamCache-Authorization", "Bearer \(try token())")]
        let down = try post("down", "chat/completions", ModelBodies.chat(ModelBodies.unique("down")), headers: headers)
        #expect(down.status == 502)
        #expect(down.header("Content-Type") == "application/problem+json")
        let problem = try object(down)
        #expect(problem["upstream"] as? String == "down" && problem["reason"] as? String == "connect")
        #expect(problem["type"] as? String == "https://teamcache.dev/problems/upstream-failed")
        let slow = try service.request("GET", path("raw", "_test/slow_head?ms=3000"), headers: headers)
        #expect(slow.status == 504)
        #expect(try object(slow)["reason"] as? String == "first_byte_timeout")
        #expect(try object(slow)["type"] as? String == "https://teamcache.dev/problems/upstream-timeout")
    }

    /// Each path that could leave the base URL is refused before anything is sent.
    @Test func everyUnsafePathIsRefusedAndTheUpstreamSeesNothing() throws {
        let headers = [("TeamCache-Authorization", "Bearer \(try token())")]
        let before = try harness.calls().count
        let paths = ["../chat/completions", "chat/../../x", "%2e%2e/x", "%2E%2e/x", "chat%2fcompletions", "a%5cb",
                     "/evil.example/x", "//evil.example/x", "http:/x", "https:%2f%2fevil.example", "a@evil.example",
                     "./chat/completions", "chat/%2e/completions", "a%00b", "a%0d%0aX-Injected:%201", "a%25%32%65",
                     "chat/completions?x=%0d%0a", "..;/x", "chat/..;x/completions", "chat/.;/completions"]
        for rest in paths {
            let answer = try service.request("POST", path("local", rest), headers: headers,
                                             json: ModelBodies.chat("refused"))
            #expect(answer.status == 400, "\(rest) answered \(answer.status)")
            #expect(answer.header("Content-Type") == "application/problem+json")
        }
        // A raw CR or space in the target never makes a request at all.
        let client = try RawClient(port: try service.port, timeout: 5)
        try client.send("GET \(path("local", "a\rb")) HTTP/1.1\r\nHost: t\r\n\r\n")
        #expect((try? client.readResponse())?.status ?? 400 == 400)
        #expect(try harness.calls().count == before)
    }

    @Test func otherEndpointsAndMethodsAreForwardedUncached() throws {
        let headers = [("TeamCache-Authorization", "Bearer \(try token())"), ("X-Trace", "t1")]
        for _ in 0..<2 {
            let answer = try StreamedAnswer.read(port: try service.port, path("raw", "_test/echo?q=1"), method: "GET",
                                                 headers: headers, body: "")
            #expect(answer.head.status == 200)
            #expect(answer.head.header("X-TeamCache") == "bypass")
            let echo = try JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: Any] ?? [:]
            #expect(echo["path"] as? String == "/_test/echo?q=1")
        }
    }

    @Test func noStoreForwardsOnlyAndNoCacheCallsAndStores() throws {
        let headers = [("TeamCache-Authorization", "Bearer \(try token())")]
        let prompt = ModelBodies.unique("controls")
        for _ in 0..<2 {
            let answer = try post("local", "chat/completions", ModelBodies.chat(prompt),
                                  headers: headers + [("Cache-Control", "no-store")])
            #expect(answer.header("X-TeamCache") == "bypass")
        }
        #expect(try harness.count(prompt) == 2)
        #expect(try post("local", "chat/completions", ModelBodies.chat(prompt), headers: headers)
            .header("X-TeamCache") == "miss")
        let refreshed = try post("local", "chat/completions", ModelBodies.chat(prompt),
                                 headers: headers + [("Cache-Control", "no-cache")])
        #expect(refreshed.header("X-TeamCache") == "miss")
        #expect(try harness.count(prompt) == 4)
        #expect(try post("local", "chat/completions", ModelBodies.chat(prompt), headers: headers)
            .header("X-TeamCache") == "hit")
    }

    /// `TeamCache-TTL` sets the stored answer's life; past it, `max-stale` answers from the
    /// entry when the upstream fails (the same request through an upstream that is down
    /// shares the key), and without it the failure is the caller's.
    @Test func ttlAndMaxStaleWhenTheUpstreamFails() throws {
        let headers = [("TeamCache-Authorization", "Bearer \(try token())")]
        let body = ModelBodies.chat(ModelBodies.unique("stale"))
        let stored = try post("local", "chat/completions", body, headers: headers + [("TeamCache-TTL", "1")])
        #expect(stored.header("X-TeamCache") == "miss")
        let fresh = try post("local", "chat/completions", body, headers: headers).header("Cache-Status") ?? ""
        #expect(["teamcache; hit; ttl=1", "teamcache; hit; ttl=0"].contains(fresh), "\(fresh)")
        Thread.sleep(forTimeInterval: 2.2)
        #expect(try post("down", "chat/completions", body, headers: headers).status == 502)
        let stale = try post("down", "chat/completions", body, headers: headers + [("Cache-Control", "max-stale=600")])
        #expect(stale.status == 200)
        #expect(stale.header("X-TeamCache") == "hit; stale")
        #expect(stale.body == stored.body)
        #expect(try post("local", "chat/completions", body, headers: headers + [("TeamCache-TTL", "0")]).status == 400)
    }

    /// A stored answer's recorded content type goes into every hit's head: one holding CR or LF
    /// (a row written before the descriptor route refused it, or by SQL) is not used, and a
    /// descriptor upsert that gives one is refused, so no writer can add headers, or a second
    /// response, to another caller's hit.
    @Test func aStoredContentTypeCannotSplitAHit() throws {
        let headers = [("TeamCache-Authorization", "Bearer \(try token())")]
        let body = ModelBodies.chat(ModelBodies.unique("split"))
        #expect(try post("local", "chat/completions", body, headers: headers).header("X-TeamCache") == "miss")
        let connection = try PostgresConnection(url: try TestDatabase.shared.migratedDefault(), limits: .unbounded)
        let hostile = "'application/json' || chr(13) || chr(10) || 'Set-Cookie: stolen=1' || chr(13) || chr(10)"
            + " || chr(13) || chr(10) || 'HTTP/1.1 200 OK'"
        let updated = try connection.query("UPDATE entries SET metadata = jsonb_set(metadata, '{content_type}', "
            + "to_jsonb(\(hostile))) WHERE namespace = $1 RETURNING 1", [.text(namespace)])
        #expect(updated.rowCount == 1)
        Thread.sleep(forTimeInterval: 0.3)  // the change's notification empties the near-cache
        let hit = try post("local", "chat/completions", body, headers: headers)
        #expect(hit.header("X-TeamCache") == "hit")
        #expect(hit.header("Content-Type") == "application/json")
        #expect(hit.header("Set-Cookie") == nil)
        let descriptor = "{\"model\":\"m\",\"prompt\":\"p\",\"response\":\"x\",\"metadata\":"
            + "{\"content_type\":\"text/plain\\r\\nSet-Cookie: a=b\"}}"
        let refused = try service.request("POST", "/v1/caches/\(namespace)/upsert", token: try token(), json: descriptor)
        #expect(refused.status == 422)
        let lookup = try service.request("POST", "/v1/caches/\(namespace)/lookup", token: try token(),
                                         json: "{\"model\":\"m\",\"prompt\":\"p\"}")
        #expect(lookup.text.contains("\"hit\":false"))
    }

    /// `no-store` on a streamed chat call: forwarded as sent (no usage asked for on its behalf,
    /// so no usage-only event it would not expect), nothing stored; likewise a beta header.
    @Test func uncachedCallsAreForwardedAsSent() throws {
        let headers = [("TeamCache-Authorization", "Bearer \(try token())")]
        let prompt = ModelBodies.unique("no store stream")
        let answer = try StreamedAnswer.read(port: try service.port, path("local", "chat/completions"),
                                             headers: headers + [("Cache-Control", "no-store")],
                                             body: ModelBodies.chat(prompt, stream: true))
        #expect(answer.head.header("X-TeamCache") == "bypass")
        #expect(!answer.text.contains("\"choices\": []"))
        let body = try #require(try harness.call(prompt)?["body"] as? [String: Any])
        #expect(body["stream_options"] == nil)
        let beta = ModelBodies.unique("beta")
        for _ in 0..<2 {
            let answer = try post("local", "chat/completions", ModelBodies.chat(beta),
                                  headers: headers + [("OpenAI-Beta", "assistants=v2")])
            #expect(answer.header("X-TeamCache") == "bypass")
        }
        #expect(try harness.count(beta) == 2)
    }

    /// Without the loops' read batchers (TEAMCACHE_READ_BATCH=0) the gateway reads through
    /// the pool, on a worker: a repeat is still a hit.
    @Test func withoutBatchedReadsARepeatIsStillAHit() throws {
        let plain = try harness.service { $0.readBatch = 0 }
        defer { plain.stop() }
        let namespace = TestService.namespace("gwplain")
        let headers = [("TeamCache-Authorization",
                        "Bearer \(try plain.token([.read, .write], namespaces: namespace))")]
        let prompt = ModelBodies.unique("unbatched")
        let target = "/v1/caches/\(namespace)/gateway/local/chat/completions"
        #expect(try plain.request("POST", target, headers: headers, json: ModelBodies.chat(prompt))
            .header("X-TeamCache") == "miss")
        #expect(try plain.request("POST", target, headers: headers, json: ModelBodies.chat(prompt))
            .header("X-TeamCache") == "hit")
        #expect(try harness.count(prompt) == 1)
    }
}
