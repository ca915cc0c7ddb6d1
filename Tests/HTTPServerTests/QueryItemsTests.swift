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
}
