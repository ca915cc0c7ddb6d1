import HTTPClient
import Testing

/// The response parser alone: every framing, split at every byte, and every refusal.
@Suite struct ResponseParserTests {
    struct Outcome: Equatable {
        var status: Int?
        var body: [UInt8] = []
        var end: Bool?
        var failure: HTTPClientError.Code?
    }

    func parse(_ text: String, split: Int? = nil, headRequest: Bool = false, bodyBytes: Int = 1 << 20,
               endInput: Bool = true) -> Outcome {
        var limits = ResponseParser.Limits()
        limits.bodyBytes = bodyBytes
        limits.headBytes = 1024
        limits.headerCount = 8
        var parser = ResponseParser(limits: limits, headRequest: headRequest)
        var outcome = Outcome()
        let record: (ResponseParser.Event) -> Void = { event in
            switch event {
            case .head(let head): outcome.status = head.status
            case .body(let part): outcome.body += part
            case .end(let reusable): outcome.end = reusable
            case .failure(let error): outcome.failure = error.code
            }
        }
        let bytes = Array(text.utf8)
        let pieces = split.map { [Array(bytes[..<$0]), Array(bytes[$0...])] } ?? [bytes]
        for piece in pieces { piece.withUnsafeBytes { _ = parser.feed($0, record) } }
        if endInput { parser.inputEnded(record) }
        return outcome
    }

    static let framings: [(String, Outcome)] = [
        ("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", Outcome(status: 200, body: Array("hello".utf8), end: true)),
        ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=1\r\nhello\r\nA\r\n0123456789\r\n0\r\nT: v\r\n\r\n",
         Outcome(status: 200, body: Array("hello0123456789".utf8), end: true)),
        ("HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n", Outcome(status: 204, end: true)),
        ("HTTP/1.0 200 OK\r\n\r\nto the end", Outcome(status: 200, body: Array("to the end".utf8), end: false)),
        ("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", Outcome(status: 200, body: Array("ok".utf8), end: false)),
        ("HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n", Outcome(status: 304, end: true)),
        ("HTTP/1.1 200 OK\nContent-Length: 2\n\nok", Outcome(status: 200, body: Array("ok".utf8), end: true)),
        ("HTTP/1.1 200 OK\r\nContent-Length: 3, 3\r\n\r\nabc", Outcome(status: 200, body: Array("abc".utf8), end: true)),
        ("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nraw", Outcome(status: 200, body: Array("raw".utf8), end: false)),
    ]

    @Test(arguments: 0..<framings.count) func eachFramingParsesTheSameInAnySplit(_ index: Int) {
        let (text, expected) = Self.framings[index]
        #expect(parse(text) == expected)
        for split in 1..<text.utf8.count { #expect(parse(text, split: split) == expected, "split at \(split)") }
    }

    static let refusals: [(String, HTTPClientError.Code)] = [
        ("HTTP/2 200 OK\r\n\r\n", .malformed),
        ("HTTP/1.1 20 OK\r\n\r\n", .malformed),
        ("HTTP/1.1 200OK\r\n\r\n", .malformed),
        ("ICY 200 OK\r\n\r\n", .malformed),
        ("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", .malformed),
        ("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", .malformed),
        ("HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n", .malformed),
        ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", .malformed),
        ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcd\r\n", .malformed),
        ("HTTP/1.1 200 OK\r\nBad Name: v\r\n\r\n", .malformed),
        ("HTTP/1.1 200 OK\r\n folded: v\r\n\r\n", .malformed),
        ("HTTP/1.1 200 OK\r\nX: a\u{1}b\r\n\r\n", .malformed),
        ("HTTP/1.1 101 Switching Protocols\r\n\r\n", .malformed),
        ("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", .closed),
        ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", .closed),
        ("", .closed),
        ("HTTP/1.1 200 OK\r\n" + String(repeating: "X-A: b\r\n", count: 20) + "\r\n", .malformed),
        ("HTTP/1.1 200 OK\r\nX: " + String(repeating: "v", count: 2000) + "\r\n\r\n", .malformed),
    ]

    @Test(arguments: 0..<refusals.count) func eachBrokenResponseFailsOnce(_ index: Int) {
        let (text, code) = Self.refusals[index]
        #expect(parse(text).failure == code, "\(text.debugDescription)")
    }

    @Test func aBodyPastTheBoundFailsWhetherItsLengthIsDeclaredOrNot() {
        #expect(parse("HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world", bodyBytes: 10).failure == .tooLarge)
        #expect(parse("HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world", bodyBytes: 10).status == nil,
                "refused on its head")
        let chunked = parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nhello \r\n5\r\nworld\r\n0\r\n\r\n",
                            bodyBytes: 10)
        #expect(chunked.failure == .tooLarge && chunked.body.count <= 10)
        #expect(parse("HTTP/1.0 200 OK\r\n\r\nhello world", bodyBytes: 10).failure == .tooLarge)
    }

    @Test func aHeadAnswerHasNoBody() {
        #expect(parse("HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n", headRequest: true, endInput: false)
            == Outcome(status: 200, end: true))
    }

    @Test func bytesAfterTheEndAreNotRead() {
        var parser = ResponseParser()
        let bytes = Array("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA".utf8)
        let used = bytes.withUnsafeBytes { parser.feed($0) { _ in } }
        #expect(used == bytes.count - 5 && parser.isFinished)
    }
}
