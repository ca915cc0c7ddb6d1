@testable import HTTPServer
import Testing

/// The serializer measures a head before writing it into a buffer of that size: these
/// check every kind of head it writes against the same head spelled out, so a size that
/// disagrees with what is written (a cut field, stray bytes) shows.
@Suite struct ResponseSerializerTests {
    private func wire(_ response: HTTPResponse, method: String = "GET", version: HTTPVersion = .http11,
                      keepAlive: Bool = true, requestID: RequestID = "") -> String {
        let wire = ResponseSerializer.serialize(response, sendsBody: method != "HEAD", version: version,
                                                keepAlive: keepAlive, requestID: requestID,
                                                date: "Tue, 01 Dec 2026 23:00:00 GMT", server: "teamcache")
        // Every answer written into scratch memory instead is the same bytes (or refused, when
        // its body travels apart or the memory is too small for it).
        let memory = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
        defer { memory.deallocate() }
        let scratch = ResponseSerializer.serialize(response, sendsBody: method != "HEAD", version: version,
                                                   keepAlive: keepAlive, requestID: requestID,
                                                   date: "Tue, 01 Dec 2026 23:00:00 GMT", server: "teamcache",
                                                   into: memory)
        if wire.separateBody == nil {
            #expect(scratch.map { Array(memory[..<$0.count]) } == wire.head)
            #expect(scratch?.bodyBytes == wire.bodyBytes)
            let short = UnsafeMutableRawBufferPointer(rebasing: memory[..<(wire.head.count - 1)])
            #expect(ResponseSerializer.serialize(response, sendsBody: method != "HEAD", version: version,
                                                 keepAlive: keepAlive, requestID: requestID, date: "Tue, 01 Dec 2026 23:00:00 GMT",
                                                 server: "teamcache", into: short) == nil)
        } else {
            #expect(scratch == nil)
        }
        return String(decoding: wire.head + (wire.separateBody ?? []), as: UTF8.self)
    }

    private let date = "Date: Tue, 01 Dec 2026 23:00:00 GMT\r\nServer: teamcache\r\n"

    @Test func aHitWithFieldsAndASmallBodyIsOneBuffer() {
        let response = HTTPResponse(status: 200, headers: HTTPHeaders([("Content-Type", "application/json"),
                                                                       ("ETag", "\"abc\""), ("Vary", "Accept-Encoding")]),
                                    body: Array("{\"a\":1}".utf8))
        let serialized = ResponseSerializer.serialize(response, sendsBody: true, version: .http11, keepAlive: true,
                                                      requestID: "r-1", date: "D", server: "S")
        #expect(serialized.separateBody == nil && serialized.bodyBytes == 7)
        #expect(wire(response, requestID: "tc-0-1f") == "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            + "ETag: \"abc\"\r\nVary: Accept-Encoding\r\nX-Request-Id: tc-0-1f\r\n" + date
            + "Content-Length: 7\r\n\r\n{\"a\":1}")
    }

    /// Static fields (fixed text and a number, written straight into the head) come after the
    /// headers, in the order added; numbers of every length are measured as written, a
    /// negative one is 0, and past the inline capacity a field goes to `headers` with the
    /// same text. A streamed head carries them too.
    @Test func staticFieldsAreWrittenAfterTheHeadersAsTheirText() {
        for number in [-5, 0, 7, 10, 99, 12_345, Int.max] {
            var response = HTTPResponse(status: 200, headers: HTTPHeaders([("ETag", "\"e\"")]), body: [0x61])
            response.addStatic(StaticField("Age: ", number))
            response.addStatic(StaticField("Cache-Status: teamcache; hit; ttl=", number, "; collapsed"))
            response.addStatic(StaticField("Content-Encoding: gzip"))
            let shown = String(max(0, number))
            let fields = "Age: \(shown)\r\nCache-Status: teamcache; hit; ttl=\(shown); collapsed\r\n"
                + "Content-Encoding: gzip\r\n"
            #expect(wire(response)
                == "HTTP/1.1 200 OK\r\nETag: \"e\"\r\n" + fields + date + "Content-Length: 1\r\n\r\na")
            // A fourth is a header: written before the static ones, with the same text.
            response.addStatic(StaticField("X-Count: n=", number, ";"))
            #expect(response.headers["X-Count"] == "n=\(shown);")
            #expect(wire(response) == "HTTP/1.1 200 OK\r\nETag: \"e\"\r\nX-Count: n=\(shown);\r\n" + fields + date
                + "Content-Length: 1\r\n\r\na")
            let streamed = String(decoding: ResponseSerializer.streamHead(response, framing: .chunked, version: .http11,
                                                                          keepAlive: true, requestID: "", date: "D",
                                                                          server: "S"), as: UTF8.self)
            #expect(streamed.contains("\r\n" + fields) && streamed.contains("X-Count: n=\(shown);\r\n"))
        }
    }

    @Test func headNotModifiedCloseAndHTTP10() {
        let ok = HTTPResponse(status: 200, headers: HTTPHeaders(), body: Array(repeating: 0x61, count: 12345))
        #expect(wire(ok, method: "HEAD") == "HTTP/1.1 200 OK\r\n" + date + "Content-Length: 12345\r\n\r\n")
        #expect(wire(HTTPResponse(status: 304, headers: HTTPHeaders([("ETag", "\"e\"")])))
            == "HTTP/1.1 304 Not Modified\r\nETag: \"e\"\r\n" + date + "\r\n")
        #expect(wire(HTTPResponse(status: 204, headers: HTTPHeaders()), keepAlive: false)
            == "HTTP/1.1 204 No Content\r\n" + date + "Connection: close\r\n\r\n")
        #expect(wire(HTTPResponse(status: 404, headers: HTTPHeaders()), version: .http10)
            == "HTTP/1.1 404 Not Found\r\n" + date + "Content-Length: 0\r\nConnection: keep-alive\r\n\r\n")
        #expect(wire(HTTPResponse(status: 299, headers: HTTPHeaders([("X-É", "ü")]))).hasPrefix("HTTP/1.1 299 "))
    }

    /// The status lines compiled in are the ones made from the status and its reason.
    @Test func compiledStatusLinesAreTheMadeOnes() {
        for status in 100...599 {
            let line = StatusLine(status)
            let bytes: [UInt8] = switch line {
            case .common(let text): Array(UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
            case .other(let made): made
            }
            #expect(bytes == ResponseSerializer.statusLine(status) && line.count == bytes.count, "\(status)")
        }
    }

    @Test func aLargeBodyTravelsAsItsOwnBuffer() {
        #expect(wire(HTTPResponse(status: 200, headers: HTTPHeaders(),
                                  body: Array(repeating: UInt8(0x62), count: ResponseSerializer.inlineBodyLimit + 1)))
                .hasSuffix("\r\n\r\n" + String(repeating: "b", count: ResponseSerializer.inlineBodyLimit + 1)))
        let body = Array(repeating: UInt8(0x62), count: ResponseSerializer.inlineBodyLimit + 1)
        let serialized = ResponseSerializer.serialize(HTTPResponse(status: 200, headers: HTTPHeaders(), body: body),
                                                      sendsBody: true, version: .http11, keepAlive: true,
                                                      requestID: "", date: "D", server: "S")
        #expect(serialized.separateBody == body)
        #expect(String(decoding: serialized.head, as: UTF8.self)
            == "HTTP/1.1 200 OK\r\nDate: D\r\nServer: S\r\nContent-Length: 4097\r\n\r\n")
    }

    @Test func decimalLengthsAndTheWriterNeverPassesItsEnd() {
        for (value, digits) in [(0, 1), (9, 1), (10, 2), (99, 2), (100, 3), (Int.max, 19)] {
            #expect(ResponseSerializer.decimalLength(value) == digits)
        }
        let bytes = [UInt8](unsafeUninitializedCapacity: 4) { buffer, initialized in
            var out = WireWriter(buffer)
            out.put("abc")
            out.put("defg")
            out.putDecimal(123)
            initialized = out.count
        }
        #expect(bytes == Array("abcd".utf8))
        // Every kind of part, cut at the end: a short and a long string, a literal, bytes, digits.
        let long = String(repeating: "é", count: 40)
        for size in 0...12 {
            // A window of `size` bytes into a larger array, not an array of capacity `size`:
            // at 0 that is the shared empty-array storage, whose count the initializer writes
            // (ThreadSanitizer reported it racing every other empty array's read).
            var storage = [UInt8](repeating: 0, count: 12)
            let written = storage.withUnsafeMutableBufferPointer { whole in
                var out = WireWriter(UnsafeMutableBufferPointer(rebasing: whole[0..<size]))
                out.put(String("ab"))
                out.put(long)
                out.put("xyz" as StaticString)
                out.put([1, 2, 3])
                out.putDecimal(98_765)
                return out.count
            }
            #expect(written <= size)
            #expect(storage[size...].allSatisfy { $0 == 0 }, "wrote past a \(size)-byte window")
            #expect(Array(storage.prefix(written)) == Array((Array("ab".utf8) + Array(long.utf8)).prefix(size)))
        }
    }

    /// A numbered id is written as its prefix and hex digits, exactly the text it stands for,
    /// and the head's measured size holds it (any number of digits).
    @Test func numberedRequestIDsAreWrittenAsTheirText() {
        let response = HTTPResponse(status: 204)
        for number in [UInt64(0), 9, 10, 0xF, 0x10, 0xFFFF, 0x10000, 0xdead_beef, UInt64.max, 1 << 63] {
            let id = RequestID(prefix: "9f2c-1-", number: number)
            #expect(id.text == "9f2c-1-" + String(number, radix: 16))
            #expect(id.byteCount == id.text.utf8.count)
            #expect(wire(response, requestID: id) == "HTTP/1.1 204 No Content\r\nX-Request-Id: \(id.text)\r\n" + date + "\r\n")
            let streamed = ResponseSerializer.streamHead(response, framing: .chunked, version: .http11, keepAlive: true,
                                                         requestID: id, date: "D", server: "S")
            #expect(String(decoding: streamed, as: UTF8.self).contains("X-Request-Id: \(id.text)\r\n"))
        }
        #expect(RequestID("given-1").text == "given-1" && !RequestID("given-1").isEmpty && RequestID("").isEmpty)
        #expect(!RequestID(prefix: "", number: 0).isEmpty && RequestID(prefix: "", number: 0).text == "0")
    }

    /// A value holding CR, LF or NUL (a stored content type, a relayed upstream header) is
    /// written with spaces in their place, buffered or streamed: it can never end its field
    /// and start another header, or another response, on a kept-alive connection.
    @Test func aFieldValueCannotSplitTheHead() {
        let hostile = "text/plain\r\nSet-Cookie: a=b\r\n\r\nHTTP/1.1 200 OK\u{0}x"
        let spaced = "text/plain  Set-Cookie: a=b    HTTP/1.1 200 OK x"
        let response = HTTPResponse(status: 200, headers: HTTPHeaders([("Content-Type", hostile), ("Vary", "A")]),
                                    body: [0x61])
        #expect(wire(response) == "HTTP/1.1 200 OK\r\nContent-Type: \(spaced)\r\nVary: A\r\n" + date
            + "Content-Length: 1\r\n\r\na")
        let streamed = String(decoding: ResponseSerializer.streamHead(response, framing: .chunked, version: .http11,
                                                                      keepAlive: true, requestID: "", date: "D",
                                                                      server: "S"), as: UTF8.self)
        #expect(streamed.hasPrefix("HTTP/1.1 200 OK\r\nContent-Type: \(spaced)\r\nVary: A\r\n"))
        #expect(!streamed.contains("Set-Cookie: a=b\r\n") && !streamed.contains("\u{0}"))
        // Fields rendered ahead (a near-cache copy's) are written the same way.
        #expect(String(decoding: HTTPHeaders([("Content-Type", hostile)]).wireForm, as: UTF8.self)
            == "Content-Type: \(spaced)\r\n")
    }
}
