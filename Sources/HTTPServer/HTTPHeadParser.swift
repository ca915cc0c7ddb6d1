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
        // `bytes` ends before the final CRLF CRLF: lines end in CRLF except the last.
        var lineStart = bytes.startIndex
        var requestLine: ArraySlice<UInt8>?
        var headers = HTTPHeaders(capacity: 8)
        var method = "", target = "", version = HTTPVersion.http11
        while lineStart <= bytes.endIndex {
            let newline = ByteSearch.firstIndex(of: 10, in: bytes, from: lineStart)
            let line = newline.map { bytes[lineStart..<$0 - 1] } ?? bytes[lineStart...]
            lineStart = (newline ?? bytes.endIndex) + 1
            if requestLine == nil {
                requestLine = line
                if line.count > limits.maxRequestLineBytes { return .failure(.requestLineTooLong) }
                switch parseRequestLine(line) {
                case .failure(let error): return .failure(error)
                case .success(let parts): (method, target, version) = parts
                }
                continue
            }
            if headers.fields.count >= limits.maxHeaderCount { return .failure(.headersTooLarge) }
            switch parseField(line) {
            case .failure(let error): return .failure(error)
            case .success(let (name, value)): headers.add(name, value)
            }
        }
        return decideFraming(method: method, target: target, version: version, headers: headers)
    }

    private static func parseRequestLine(_ line: ArraySlice<UInt8>)
        -> Result<(String, String, HTTPVersion), HTTPParseError> {
        // method SP target SP version: exactly two spaces, no empty part. Found by index,
        // not `split`, which cost a quarter of parsing a whole head.
        let space = UInt8(ascii: " ")
        guard let first = line.firstIndex(of: space), let second = line[(first + 1)...].firstIndex(of: space),
              !line[(second + 1)...].contains(space) else {
            return .failure(.badRequest("Malformed request line."))
        }
        let method = line[..<first], target = line[(first + 1)..<second], versionText = line[(second + 1)...]
        guard !method.isEmpty, !target.isEmpty, method.allSatisfy(isTokenByte) else {
            return .failure(.badRequest("Malformed request line."))
        }
        guard target.allSatisfy({ $0 > 32 && $0 < 127 }) else {
            return .failure(.badRequest("The request target has a forbidden byte."))
        }
        let version: HTTPVersion
        if versionText.elementsEqual("HTTP/1.1".utf8) {
            version = .http11
        } else if versionText.elementsEqual("HTTP/1.0".utf8) {
            version = .http10
        } else if versionText.starts(with: "HTTP/".utf8) {
            return .failure(.unsupportedVersion)
        } else {
            return .failure(.badRequest("Malformed HTTP version."))
        }
        return .success((String(decoding: method, as: UTF8.self), String(decoding: target, as: UTF8.self), version))
    }

    private static func parseField(_ line: ArraySlice<UInt8>) -> Result<(String, String), HTTPParseError> {
        guard let first = line.first else { return .failure(.badRequest("Empty header line.")) }
        if first == 32 || first == 9 { return .failure(.badRequest("Obsolete line folding is not accepted.")) }
        guard let colon = ByteSearch.firstIndex(of: UInt8(ascii: ":"), in: line, from: line.startIndex) else {
            return .failure(.badRequest("Header line without a colon."))
        }
        let name = line[line.startIndex..<colon]
        guard !name.isEmpty, name.allSatisfy(isTokenByte) else {
            return .failure(.badRequest("Malformed header name."))
        }
        var value = line[(colon + 1)...]
        // NUL, bare CR and other controls (except HTAB) in a value are smuggling vectors.
        if value.contains(where: { ($0 < 32 && $0 != 9) || $0 == 127 }) {
            return .failure(.badRequest("Forbidden byte in a header value."))
        }
        while let byte = value.first, byte == 32 || byte == 9 { value = value.dropFirst() }
        while let byte = value.last, byte == 32 || byte == 9 { value = value.dropLast() }
        return .success((String(decoding: name, as: UTF8.self), String(decoding: value, as: UTF8.self)))
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

        init(_ headers: HTTPHeaders) {
            for (name, value) in headers {
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
        }

        static func elements(_ value: String) -> [String] {
            HeaderList.split(value).map { $0.lowercased() }
        }
    }

    private static func decideFraming(method: String, target: String, version: HTTPVersion, headers: HTTPHeaders)
        -> Result<Head, HTTPParseError> {
        let fields = FramingFields(headers)
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
