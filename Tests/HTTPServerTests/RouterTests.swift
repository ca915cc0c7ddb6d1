import HTTPServer
import Testing

/// Route matching over raw path bytes: literals, parameters, escapes, HEAD and 405.
@Suite struct RouterTests {
    let router = Router([
        Route("GET", "/healthz", .inline) { _ in HTTPResponse(status: 200) },
        Route("GET", "/v1/caches/{ns}/entries/{key}", .inline) { _ in HTTPResponse(status: 200) },
        Route("PUT", "/v1/caches/{ns}/entries/{key}", .inline) { _ in HTTPResponse(status: 201) },
        Route("POST", "/v1/caches/{ns}/lookup", .inline) { _ in HTTPResponse(status: 200) },
        Route("POST", "/v1/caches/{ns}/gateway/{upstream}/{path...}", .inline) { _ in HTTPResponse(status: 200) },
    ])

    private func found(_ method: String, _ path: String) -> (String, PathParameters)? {
        guard case .found(let route, let parameters) = router.match(method: method, path: Substring(path)) else {
            return nil
        }
        return (route.template, parameters)
    }

    @Test func parametersAreDecodedBytesAndLiteralsMayBeEscaped() throws {
        let (template, parameters) = try #require(found("GET", "/v1/caches/team-a/entries/k%2F1%FF"))
        #expect(template == "/v1/caches/{ns}/entries/{key}")
        #expect(parameters["ns"] == Array("team-a".utf8))
        #expect(parameters["key"] == Array("k/1".utf8) + [0xFF])
        // An escaped literal segment names the same route; an escaped slash is not a separator.
        #expect(found("POST", "/v1/%63aches/a/lookup")?.0 == "/v1/caches/{ns}/lookup")
        #expect(found("POST", "/v1/caches/a%2Flookup") == nil)
        #expect(found("GET", "/healthz")?.0 == "/healthz")
        #expect(found("GET", "/heal%74hz")?.0 == "/healthz")
    }

    @Test func emptySegmentsBadEscapesAndOtherMethods() {
        #expect(found("GET", "/v1/caches//entries/k")?.1["ns"] == [])
        guard case .badPath = router.match(method: "GET", path: "/v1/caches/a/entries/%G1") else {
            Issue.record("a malformed escape is a bad path")
            return
        }
        guard case .methodNotAllowed(let allowed) = router.match(method: "DELETE", path: "/v1/caches/a/entries/k")
        else {
            Issue.record("DELETE on an entry path is 405")
            return
        }
        #expect(Set(allowed) == ["GET", "PUT", "HEAD"])
        #expect(found("HEAD", "/v1/caches/a/entries/k")?.0 == "/v1/caches/{ns}/entries/{key}")
        guard case .notFound = router.match(method: "GET", path: "/v1/caches/a/entries/k/extra") else {
            Issue.record("a longer path matches nothing")
            return
        }
        guard case .notFound = router.match(method: "GET", path: "healthz") else {
            Issue.record("a path without a leading slash matches nothing")
            return
        }
    }

    @Test func aRestSegmentTakesTheRawRemainderOfOneOrMoreSegments() throws {
        let template = "/v1/caches/{ns}/gateway/{upstream}/{path...}"
        let (matched, parameters) = try #require(found("POST", "/v1/caches/a/gateway/openai/chat/completions"))
        #expect(matched == template)
        #expect(parameters["upstream"] == Array("openai".utf8))
        #expect(parameters["path"] == Array("chat/completions".utf8))
        // Raw: escapes, dot segments and empty segments are the handler's to judge.
        #expect(found("POST", "/v1/caches/a/gateway/openai/%2e%2e/x%2Fy")?.1["path"] == Array("%2e%2e/x%2Fy".utf8))
        #expect(found("POST", "/v1/caches/a/gateway/openai//evil.example/x")?.1["path"] == Array("/evil.example/x".utf8))
        #expect(found("POST", "/v1/caches/a/gateway/openai/")?.1["path"] == [])
        guard case .notFound = router.match(method: "POST", path: "/v1/caches/a/gateway/openai") else {
            Issue.record("the rest is at least one segment")
            return
        }
    }

    /// The segments' ranges live in memory sized by the path's slashes (on the stack when
    /// small): paths of one slash, only slashes, thousands of segments (past any stack
    /// buffer) and a long rest all match as the templates say.
    @Test func pathsOfAnyNumberOfSegmentsMatch() throws {
        for path in ["/", "////////", "/v1//", "/healthz/"] {
            guard case .notFound = router.match(method: "GET", path: Substring(path)) else {
                Issue.record("\(path) is no route")
                continue
            }
        }
        let many = "/v1/caches/a/gateway/openai/" + Array(repeating: "s", count: 5_000).joined(separator: "/")
        let rest = Array(repeating: "s", count: 5_000).joined(separator: "/")
        #expect(found("POST", many)?.1["path"] == Array(rest.utf8))
        if case .found = router.match(method: "GET", path: Substring(many)) {
            Issue.record("no GET route has 5,005 segments")
        }
        let longest = "/v1/caches/\(String(repeating: "n", count: 64))/entries/k"
        let (template, parameters) = try #require(found("GET", longest))
        #expect(template == "/v1/caches/{ns}/entries/{key}" && parameters["key"] == [UInt8(ascii: "k")])
        #expect(found("GET", "/healthz")?.0 == "/healthz")
    }

    /// Random namespaces and keys (empty, escaped, slashes escaped or not) against a split
    /// made here: a path of exactly the template's segments matches with its decoded values.
    @Test func randomPathsMatchAsASplitByHandSays() {
        var generator = SystemRandomNumberGenerator()
        let pieces = ["a", "k", "/", "%2F", "%25", "%41", "-", "e", "entries"]
        func segment() -> String {
            (0..<Int.random(in: 0...4, using: &generator)).map { _ in pieces.randomElement(using: &generator)! }.joined()
        }
        for _ in 0..<3_000 {
            let namespace = segment(), key = segment()
            let path = "/v1/caches/\(namespace)/entries/\(key)"
            let parts = path.split(separator: "/", omittingEmptySubsequences: false).dropFirst()
            let match = found("GET", path)
            if parts.count == 5 {
                #expect(match?.0 == "/v1/caches/{ns}/entries/{key}", "\(path)")
                #expect(match?.1["ns"] == PercentDecoding.decode(namespace), "\(path)")
                #expect(match?.1["key"] == PercentDecoding.decode(key), "\(path)")
            } else {
                #expect(match == nil, "\(path)")
            }
        }
    }
}
