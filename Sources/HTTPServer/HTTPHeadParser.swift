/// Parses a request head (request line and header fields, without the final blank line)
/// and decides the body's framing, rejecting what request smuggling relies on.
enum HTTPHeadParser {
    enum Framing: Equatable {
        case none
        case length(Int)
        case chunked
    }

    typealias Head = (request: HTTPRequest, framing: Framing, expectsContinue: Bool)

    static func parse(_ bytes: ArraySlice<UInt8>, limits: HTTPParserLimits) -> Result<Head, HTTPParseError> {
        // Read in place: walking an `ArraySlice` byte by byte (bounds checked, generic
        // `elementsEqual`) was a tenth of a near-cache hit's instructions.
        bytes.withUnsafeBufferPointer { parse(head: $0, limits: limits) }
    }

    private static func parse(head bytes: UnsafeBufferPointer<UInt8>, limits: HTTPParserLimits)
        -> Result<Head, HTTPParseError> {
        // `bytes` ends before the final CRLF CRLF: lines end in CRLF except the last.
        var lineStart = 0
        var sawRequestLine = false
        var headers = HTTPHeaders(capacity: 8)
        // Gathered as each field is parsed: a pass over the headers afterwards copied every
        // name and value out of the array (two retains and releases a field).
        var framingFields = FramingFields()
        var method = "", target = "", version = HTTPVersion.http11
        while lineStart <= bytes.count {
            let newline = ByteSearch.firstIndex(of: 10, in: bytes, from: lineStart)
            // Lines end in CRLF (the parser finds the head's end only so): a bare LF here is
            // refused, never sliced into a reversed range.
            if let newline, newline == lineStart || bytes[newline - 1] != 13 {
                return .failure(.badRequest("A line of the head does not end in CRLF."))
            }
            let line = newline.map { lineStart..<$0 - 1 } ?? lineStart..<bytes.count
            lineStart = (newline ?? bytes.count) + 1
            if !sawRequestLine {
                sawRequestLine = true
                if line.count > limits.maxRequestLineBytes { return .failure(.requestLineTooLong) }
                switch parseRequestLine(bytes, line) {
                case .failure(let error): return .failure(error)
                case .success(let parts): (method, target, version) = parts
                }
                continue
            }
            if headers.fields.count >= limits.maxHeaderCount { return .failure(.headersTooLarge) }
            switch parseField(bytes, line) {
            case .failure(let error): return .failure(error)
            case .success(let (name, value)):
                framingFields.note(name, value)
                headers.add(name, value)
            }
        }
        return decideFraming(method: method, target: target, version: version, headers: headers, fields: framingFields)
    }

    /// The first index of `byte` in `range` of `bytes`, or nil.
    private static func firstIndex(of byte: UInt8, in bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> Int? {
        // `memchr`: a loop over each byte cost ~5 instructions a byte.
        ByteSearch.firstIndex(of: byte, in: UnsafeBufferPointer(rebasing: bytes[range]), from: 0)
            .map { $0 + range.lowerBound }
    }

    private static func allSatisfy(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>,
                                   _ test: (UInt8) -> Bool) -> Bool {
        var index = range.lowerBound
        while index < range.upperBound {
            if !test(bytes[index]) { return false }
            index += 1
        }
        return true
    }

    private static func text(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> String {
        String(decoding: UnsafeBufferPointer(rebasing: bytes[range]), as: UTF8.self)
    }

    /// Whether `range` of `bytes` is exactly `expected`.
    private static func equals(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>, _ expected: StaticString)
        -> Bool {
        guard range.count == expected.utf8CodeUnitCount else { return false }
        let other = UnsafeBufferPointer(start: expected.utf8Start, count: expected.utf8CodeUnitCount)
        for offset in 0..<range.count where bytes[range.lowerBound + offset] != other[offset] { return false }
        return true
    }

    private static func parseRequestLine(_ bytes: UnsafeBufferPointer<UInt8>, _ line: Range<Int>)
        -> Result<(String, String, HTTPVersion), HTTPParseError> {
        // method SP target SP version: exactly two spaces, no empty part. Found by index,
        // not `split`, which cost a quarter of parsing a whole head.
        let space = UInt8(ascii: " ")
        guard let first = firstIndex(of: space, in: bytes, line),
              let second = firstIndex(of: space, in: bytes, first + 1..<line.upperBound),
              firstIndex(of: space, in: bytes, second + 1..<line.upperBound) == nil else {
            return .failure(.badRequest("Malformed request line."))
        }
        let method = line.lowerBound..<first, target = first + 1..<second, versionText = second + 1..<line.upperBound
        guard !method.isEmpty, !target.isEmpty, allSatisfy(bytes, method, isTokenByte) else {
            return .failure(.badRequest("Malformed request line."))
        }
        guard ByteClasses.isTarget(bytes, target) else {
            return .failure(.badRequest("The request target has a forbidden byte."))
        }
        let version: HTTPVersion
        if equals(bytes, versionText, "HTTP/1.1") {
            version = .http11
        } else if equals(bytes, versionText, "HTTP/1.0") {
            version = .http10
        } else if versionText.count >= 5, equals(bytes, versionText.lowerBound..<versionText.lowerBound + 5, "HTTP/") {
            return .failure(.unsupportedVersion)
        } else {
            return .failure(.badRequest("Malformed HTTP version."))
        }
        return .success((text(bytes, method), text(bytes, target), version))
    }

    private static func parseField(_ bytes: UnsafeBufferPointer<UInt8>, _ line: Range<Int>)
        -> Result<(String, String), HTTPParseError> {
        guard let first = line.first.map({ bytes[$0] }) else { return .failure(.badRequest("Empty header line.")) }
        if first == 32 || first == 9 { return .failure(.badRequest("Obsolete line folding is not accepted.")) }
        guard let colon = firstIndex(of: UInt8(ascii: ":"), in: bytes, line) else {
            return .failure(.badRequest("Header line without a colon."))
        }
        let name = line.lowerBound..<colon
        guard !name.isEmpty, allSatisfy(bytes, name, isTokenByte) else {
            return .failure(.badRequest("Malformed header name."))
        }
        var value = colon + 1..<line.upperBound
        // NUL, bare CR and other controls (except HTAB) in a value are smuggling vectors.
        if !ByteClasses.isFieldValue(bytes, value) {
            return .failure(.badRequest("Forbidden byte in a header value."))
        }
        while let index = value.first, bytes[index] == 32 || bytes[index] == 9 { value = index + 1..<value.upperBound }
        while let index = value.last, bytes[index] == 32 || bytes[index] == 9 { value = value.lowerBound..<index }
        return .success((text(bytes, name), text(bytes, value)))
    }

    /// The header fields framing depends on, gathered in one pass.
    private struct FramingFields {
        var hosts = 0
        var connection: [String] = []
        var transferEncoding: [String] = []
        var contentLength: [String] = []
        var hasTransferEncoding = false
        var hasContentLength = false
        var expect: [String] = []
        var hasExpect = false

        mutating func note(_ name: String, _ value: String) {
            // Dispatch on length first: most fields are none of these and cost one compare.
            switch name.utf8.count {
            case 4 where HTTPHeaders.same(name, "Host"): hosts += 1
            case 6 where HTTPHeaders.same(name, "Expect"):
                hasExpect = true
                expect += Self.elements(value)
            case 10 where HTTPHeaders.same(name, "Connection"): connection += Self.elements(value)
            case 14 where HTTPHeaders.same(name, "Content-Length"):
                hasContentLength = true
                contentLength += Self.elements(value)
            case 17 where HTTPHeaders.same(name, "Transfer-Encoding"):
                hasTransferEncoding = true
                transferEncoding += Self.elements(value)
            default: break
            }
        }

        static func elements(_ value: String) -> [String] {
            HeaderList.split(value).map { $0.lowercased() }
        }
    }

    private static func decideFraming(method: String, target: String, version: HTTPVersion, headers: HTTPHeaders,
                                      fields: FramingFields) -> Result<Head, HTTPParseError> {
        if version == .http11 && fields.hosts != 1 { return .failure(.badRequest("HTTP/1.1 needs exactly one Host.")) }
        if fields.hosts > 1 { return .failure(.badRequest("More than one Host header.")) }
        let keepAlive = version == .http11 ? !fields.connection.contains("close") : fields.connection.contains("keep-alive")

        var framing = Framing.none
        if fields.hasTransferEncoding {
            if fields.hasContentLength { return .failure(.badRequest("Content-Length and Transfer-Encoding together.")) }
            if version == .http10 { return .failure(.badRequest("Transfer-Encoding in an HTTP/1.0 request.")) }
            guard fields.transferEncoding == ["chunked"] else { return .failure(.unsupportedTransferCoding) }
            framing = .chunked
        } else if fields.hasContentLength {
            let lengths = fields.contentLength
            guard let first = lengths.first, lengths.allSatisfy({ $0 == first }),
                  first.utf8.count <= 18, first.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }), let length = Int(first)
            else {
                return .failure(.badRequest("Invalid or conflicting Content-Length."))
            }
            framing = length > 0 ? .length(length) : .none
        }

        var expectsContinue = false
        if fields.hasExpect {
            // RFC 9110 §10.1.1: 100-continue is the only expectation; anything else (an
            // empty value included) cannot be met.
            guard !fields.expect.isEmpty, fields.expect.allSatisfy({ $0 == "100-continue" }) else {
                return .failure(.expectationFailed)
            }
            expectsContinue = version == .http11 && framing != .none
        }
        let request = HTTPRequest(method: method, target: target, version: version, headers: headers,
                                  keepAlive: keepAlive)
        return .success((request, framing, expectsContinue))
    }

    /// tchar from RFC 9110 §5.6.2.
    static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
             UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        // The rest of tchar, spelled out: searching a string for the byte costs a call per byte.
        case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"),
             UInt8(ascii: "'"), UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."),
             UInt8(ascii: "^"), UInt8(ascii: "_"), UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"):
            return true
        default:
            return false
        }
    }
}
