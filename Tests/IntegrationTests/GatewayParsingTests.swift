import Foundation
import HTTPServer
@testable import TeamCache
import Testing

/// The gateway's parsers are total, checked by random inputs (no database, no server):
/// the path judge either refuses (400) or yields a target that cannot leave the base URL;
/// the stream recorder, however a stream is cut into parts, passes every byte in order
/// (less the usage-only event it was asked to take out) and sees the same end and usage.
@Suite struct GatewayParsingTests {
    /// Bytes weighted towards what path tricks are made of.
    static let alphabet = Array("aZ09-._~!$&'()*+,;=:@/%\\?#2eEfF5cC0dDaA \t\r\n\u{0}\u{7f}é".utf8)

    static func randomPath(_ generator: inout some RandomNumberGenerator) -> [UInt8] {
        (0..<Int.random(in: 0...24, using: &generator)).map { _ in alphabet.randomElement(using: &generator)! }
    }

    @Test func thePathJudgeRefusesOrYieldsATargetInsideTheBase() throws {
        var generator = SystemRandomNumberGenerator()
        var accepted = 0
        for _ in 0..<200_000 {
            let rest = Self.randomPath(&generator)
            do {
                let (target, path) = try GatewayPath.target(rest: rest, query: nil)
                accepted += 1
                #expect(target == "/" + path)
                try Self.expectInside(Array(path.utf8))
            } catch let error as HTTPError {
                #expect(error.status == 400)
            }
        }
        #expect(accepted > 1_000, "the generator made hardly any valid path (\(accepted))")
    }

    /// A path the judge let through: non-empty segments of safe bytes, none a dot segment
    /// (escaped or with parameters), nothing that ends the path or names another host.
    static func expectInside(_ path: [UInt8]) throws {
        let segments = path.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
        #expect(segments.allSatisfy { !$0.isEmpty })
        #expect(!(segments.first ?? []).contains(UInt8(ascii: ":")))
        for segment in segments {
            #expect(segment.allSatisfy { $0 > 0x20 && $0 < 0x7F && !"@\\?#".utf8.contains($0) })
            let decoded = try #require(percentDecoded(segment), "a malformed escape got through")
            #expect(!decoded.contains { "/\\?#%@\u{0}\r\n".utf8.contains($0) }, "\(decoded)")
            let name = decoded.prefix { $0 != UInt8(ascii: ";") }
            #expect(!name.elementsEqual(".".utf8) && !name.elementsEqual("..".utf8))
        }
    }

    static func percentDecoded(_ bytes: ArraySlice<UInt8>) -> [UInt8]? {
        var out: [UInt8] = [], index = bytes.startIndex
        while index < bytes.endIndex {
            guard bytes[index] == UInt8(ascii: "%") else {
                out.append(bytes[index])
                index += 1
                continue
            }
            guard index + 2 < bytes.endIndex,
                  let value = UInt8(String(decoding: bytes[(index + 1)...(index + 2)], as: UTF8.self), radix: 16)
            else { return nil }
            out.append(value)
            index += 3
        }
        return out
    }

    @Test func everyQueryWithAControlByteOrATokenIsRefused() throws {
        let token = "tc_" + String(repeating: "ab", count: 32)
        for query in ["a=%0d%0a", "a=%00", "a b", "a=#x", "key=\(token)", "x=1&k=\(token.uppercased().lowercased())"] {
            #expect(throws: HTTPError.self) { try GatewayPath.target(rest: Array("chat/completions".utf8), query: query[...]) }
        }
        #expect(try GatewayPath.target(rest: Array("models".utf8), query: "limit=5&after=tc_x"[...]).target
            == "/models?limit=5&after=tc_x")
    }

    /// A streamed chat answer with the usage-only chunk the gateway asked for.
    static let chat: [UInt8] = Array(("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n"
        + "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}]}\r\n\r\n"
        + "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":7}}\n\n"
        + "data: [DONE]\n\n").utf8)
    static let usageEvent = Array("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":7}}\n\n".utf8)

    @Test(arguments: [true, false]) func everyCutOfAStreamReadsTheSame(strips: Bool) throws {
        var generator = SystemRandomNumberGenerator()
        let expected = strips ? Self.without(Self.usageEvent, in: Self.chat) : Self.chat
        for _ in 0..<2_000 {
            var recorder = StreamRecorder(stripsUsage: strips)
            var relayed: [UInt8] = []
            var index = 0
            while index < Self.chat.count {
                let size = Int.random(in: 1...40, using: &generator)
                relayed += recorder.feed(Array(Self.chat[index..<min(index + size, Self.chat.count)]))
                index += size
            }
            relayed += recorder.finish()
            #expect(relayed == expected)
            #expect(recorder.complete && !recorder.unreadable)
            #expect(recorder.usage.inputTokens == 11 && recorder.usage.outputTokens == 7)
        }
    }

    @Test func garbageNeverCrashesTheRecorderAndPassesAsItCame() throws {
        var generator = SystemRandomNumberGenerator()
        let pieces = ["data: ", "{", "}", "\n", "\r", "[DONE]", "\"usage\":", "{\"choices\":[]", "event: x", "é", "\u{0}"]
        for _ in 0..<5_000 {
            let bytes = Array((0..<Int.random(in: 0...30, using: &generator))
                .map { _ in pieces.randomElement(using: &generator)! }.joined().utf8)
            var recorder = StreamRecorder(stripsUsage: false)
            var relayed = recorder.feed(bytes)
            relayed += recorder.finish()
            #expect(relayed == bytes, "a stream not filtered passes exactly")
            var stripping = StreamRecorder(stripsUsage: true)
            let kept = stripping.feed(bytes) + stripping.finish()
            #expect(kept.count <= bytes.count)
        }
    }

    /// An error on the way makes a stream that ends "complete" unstorable; a responses stream
    /// cut by its token limit is complete, as the non-streamed answer is.
    @Test func anErrorEventIsNotAnAnswer() {
        for (text, complete, failed) in [
            ("data: {\"choices\":[]}\n\ndata: {\"error\":{\"message\":\"overloaded\"}}\n\ndata: [DONE]\n\n", true, true),
            ("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n", false, true),
            ("event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{}}\n\n", false, true),
            ("data: {\"type\":\"response.incomplete\",\"response\":{\"status\":\"incomplete\"}}\n\n", true, false),
            ("data: {\"choices\":[{\"delta\":{\"content\":\"an error in the text\"}}]}\n\ndata: [DONE]\n\n", true, false),
            // The Python transport's rules, word for word (`is_failure`): vLLM's error shape, a
            // string error, a Responses object that did not finish, an `error: null` that is none.
            ("data: {\"object\":\"error\",\"message\":\"engine broke\"}\n\ndata: [DONE]\n\n", true, true),
            ("data: {\"error\":\"engine broke\"}\n\ndata: [DONE]\n\n", true, true),
            ("data: {\"object\":\"response\",\"status\":\"cancelled\"}\n\ndata: [DONE]\n\n", true, true),
            ("data: {\"object\":\"response\",\"status\":\"queued\"}\n\ndata: [DONE]\n\n", true, true),
            ("data: {\"choices\":[],\"usage\":{},\"error\":null}\n\ndata: [DONE]\n\n", true, false),
            ("data: {\"type\":[\"error\"],\"usage\":{}}\n\ndata: [DONE]\n\n", true, false),
        ] {
            var recorder = StreamRecorder(stripsUsage: false)
            _ = recorder.feed(Array(text.utf8))
            _ = recorder.finish()
            #expect(recorder.complete == complete && recorder.failed == failed, "\(text)")
        }
    }

    @Test func aTokenSecretIsFoundAnywhereInAValue() {
        let secret = "tc_" + String(repeating: "0f", count: 32)
        for value in [secret, "Bearer \(secret)", "Basic\t\(secret)", "x\(secret)y"] {
            #expect(GatewayHeaders.containsTokenSecret(value), "\(value)")
        }
        for value in ["tc_", "tc_" + String(repeating: "0", count: 63), "sk-abc", "tc_" + String(repeating: "g", count: 64)] {
            #expect(!GatewayHeaders.containsTokenSecret(value), "\(value)")
        }
    }

    static func without(_ part: [UInt8], in whole: [UInt8]) -> [UInt8] {
        guard let start = (0...(whole.count - part.count)).first(where: { whole[$0..<($0 + part.count)].elementsEqual(part) })
        else { return whole }
        return Array(whole[..<start] + whole[(start + part.count)...])
    }
}
