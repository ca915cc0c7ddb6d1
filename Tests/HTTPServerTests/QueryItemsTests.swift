import HTTPServer
import Testing

/// Query parameters, split by bytes: the shapes a client can send, none of which traps.
@Suite struct QueryItemsTests {
    func items(_ target: String) -> [String: String]? {
        HTTPRequest(method: "GET", target: target, version: .http11, headers: HTTPHeaders()).queryItems
    }

    @Test func parsesEveryShape() {
        #expect(items("/a") == [:])
        #expect(items("/a?") == [:])
        #expect(items("/a?x=1&y=%41&&z") == ["x": "1", "y": "A", "z": ""])
        #expect(items("/a?x=1?2") == ["x": "1?2"])
        #expect(items("/a?=v&x=") == ["": "v", "x": ""])
        #expect(items("/é?clé=%C3%A9") == ["clé": "é"])
        #expect(items("/a?x=%zz") == nil)
        #expect(items("/a?x=%FF") == nil, "not UTF-8")
        #expect(items("/a?x=1&x=2") == ["x": "2"], "the last one wins")
        #expect(items("/a?=") == ["": ""])
        #expect(items("/a?a==b") == ["a": "=b"])
        #expect(items("/a?&&&") == [:])
    }

    /// The `?` is found once, by `memchr` over the target's UTF-8 (a short string's through a
    /// copy on the stack): the path is everything before the first `?`, whatever the target's
    /// length or bytes.
    @Test func thePathEndsAtTheFirstQuestionMark() {
        var generator = SystemRandomNumberGenerator()
        let alphabet: [Character] = ["a", "/", "?", "=", "&", "%", "é", "😀"]
        for _ in 0..<3000 {
            let target = "/" + String((0..<Int.random(in: 0..<40, using: &generator)).map { _ in
                alphabet.randomElement(using: &generator)!
            })
            let request = HTTPRequest(method: "GET", target: target, version: .http11, headers: HTTPHeaders())
            let expected = target.utf8.firstIndex(of: UInt8(ascii: "?")).map { target[..<$0] } ?? Substring(target)
            #expect(request.path == expected, "\(target)")
        }
        #expect(HTTPRequest(method: "GET", target: "/x?y", version: .http11, headers: HTTPHeaders()).path == "/x")
        #expect(items("/a-long-enough-target-to-be-stored-apart?k=v") == ["k": "v"])
    }
}
