/// The pure parts of reading a response head: the status line, header lines, and the
/// framing they call for (RFC 9112 sections 4, 5 and 6.3).
enum ResponseHead {
    static func parse(_ lines: [[UInt8]]) -> Result<ClientResponseHead, HTTPClientError> {
        guard let statusLine = lines.first else { return .failure(malformed("the response has no status line")) }
        guard let (minor, status) = statusLineParts(statusLine) else {
            return .failure(malformed("the status line is not HTTP/1.x"))
        }
        var headers: [(name: String, value: String)] = []
        headers.reserveCapacity(lines.count - 1)
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")), colon > 0,
                  line[..<colon].allSatisfy(isTokenByte) else {
                return .failure(malformed("a header line is not a name and a value"))
            }
            var value = line[(colon + 1)...]
            while let first = value.first, first == 0x20 || first == 0x09 { value = value.dropFirst() }
            while let last = value.last, last == 0x20 || last == 0x09 { value = value.dropLast() }
            guard !value.contains(where: { $0 == 0 || $0 == 0x0D || ($0 < 0x20 && $0 != 0x09) || $0 == 0x7F }) else {
                return .failure(malformed("a header value has control characters"))
            }
            headers.append((String(decoding: line[..<colon], as: UTF8.self), String(decoding: value, as: UTF8.self)))
        }
        return .success(ClientResponseHead(status: status, minorVersion: minor, headers: headers))
    }

    /// `HTTP/1.x NNN[ reason]` → (x, NNN).
    private static func statusLineParts(_ line: [UInt8]) -> (Int, Int)? {
        let prefix = Array("HTTP/1.".utf8)
        guard line.count >= 12, Array(line[0..<7]) == prefix, isDigit(line[7]), line[8] == 0x20,
              line[9...11].allSatisfy(isDigit), line.count == 12 || line[12] == 0x20 else {
            return nil
        }
        let status = line[9...11].reduce(0) { $0 * 10 + Int($1 - 0x30) }
        guard status >= 100 else { return nil }
        return (Int(line[7] - 0x30), status)
    }

    static func framing(of head: ClientResponseHead, headRequest: Bool) -> Result<ResponseParser.Framing, HTTPClientError> {
        if headRequest || head.status == 204 || head.status == 304 { return .success(.none) }
        let codings = values(of: "Transfer-Encoding", in: head)
        if !codings.isEmpty {
            // Chunked last: chunked. Otherwise the body runs to the close (RFC 9112 6.3 item 4).
            return .success(codings.last == "chunked" ? .chunked : .close)
        }
        let lengths = values(of: "Content-Length", in: head)
        guard let first = lengths.first else { return .success(.close) }
        guard lengths.allSatisfy({ $0 == first }), !first.isEmpty, first.utf8.count <= 15,
              first.utf8.allSatisfy(isDigit), let length = Int(first) else {
            return .failure(malformed("the Content-Length is not one number"))
        }
        return .success(.length(length))
    }

    /// Whether the upstream will close the connection after this response.
    static func closes(_ head: ClientResponseHead) -> Bool {
        values(of: "Connection", in: head).contains("close")
    }

    /// The comma-separated members of every field named `name`, trimmed and lowercased.
    private static func values(of name: String, in head: ClientResponseHead) -> [String] {
        head.headers.filter { $0.name.caseInsensitiveEquals(name) }.flatMap {
            $0.value.split(separator: ",").map { $0.trimmingSpaces.lowercased() }
        }
    }

    private static func malformed(_ detail: String) -> HTTPClientError { HTTPClientError(.malformed, detail) }

    static func isDigit(_ byte: UInt8) -> Bool { byte >= 0x30 && byte <= 0x39 }

    static func isHexDigit(_ byte: UInt8) -> Bool {
        isDigit(byte) || (asciiLower(byte) >= UInt8(ascii: "a") && asciiLower(byte) <= UInt8(ascii: "f"))
    }

    static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
             UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        default:
            return Array("!#$%&'*+-.^_`|~".utf8).contains(byte)
        }
    }
}

extension Substring {
    var trimmingSpaces: Substring {
        var text = self
        while text.first == " " || text.first == "\t" { text = text.dropFirst() }
        while text.last == " " || text.last == "\t" { text = text.dropLast() }
        return text
    }
}
