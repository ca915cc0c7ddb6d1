import CacheKeys
import Foundation
import Testing

/// The gateway's mapping from model API requests to descriptor keys, against the vectors the
/// Python transport pins too (clients/python/tests/vectors/gateway_keys.json): a call through
/// either finds the other's entry.
@Suite struct GatewayKeyTests {
    @Test func sharedVectorsMatch() throws {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("clients/python/tests/vectors/gateway_keys.json")
        let file = try JSONParser.parse(Array(try Data(contentsOf: url)))
        guard case .array(let vectors)? = file["vectors"] else {
            Issue.record("no vectors in \(url.path)")
            return
        }
        #expect(vectors.count >= 25)
        #expect(vectors.contains { $0["key"] == .null } && vectors.contains { $0["key"]?.stringValue != nil })
        for vector in vectors {
            let kind = try #require(vector["kind"]?.stringValue.flatMap(ModelRequest.Kind.init(rawValue:)))
            let path = try #require(vector["path"]?.stringValue)
            let body = try #require(vector["body"]?.stringValue)
            let plan = ModelRequest.plan(kind: kind, method: "POST", path: path, body: Array(body.utf8))
            #expect(plan?.descriptor.key == vector["key"]?.stringValue, "\(kind) \(path) \(body)")
            if let plan {
                #expect(plan.stream == vector["stream"]?.boolValue, "\(body)")
                #expect((plan.upstreamBody != nil) == vector["asks_usage"]?.boolValue, "\(body)")
            }
        }
    }

    @Test func aStreamedChatAsksForUsageAndKeepsTheRestOfItsBody() throws {
        let body = #"{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"x":1},"temperature":0.70}"#
        let plan = try #require(ModelRequest.plan(kind: .openai, method: "POST", path: "chat/completions",
                                                  body: Array(body.utf8)))
        let sent = try JSONParser.parse(try #require(plan.upstreamBody))
        #expect(sent["stream_options"] == .object([("x", .number("1")), ("include_usage", .bool(true))]))
        #expect(sent["temperature"] == .number("0.70") && sent["stream"] == .bool(true))
        #expect(ModelRequest.plan(kind: .openai, method: "GET", path: "chat/completions", body: Array(body.utf8)) == nil)
    }
}
