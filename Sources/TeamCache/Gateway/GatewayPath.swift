import HTTPServer

/// Where under an upstream's base URL a gateway request goes: the path after
/// `/gateway/{upstream}/`, judged as sent (raw), and the query. Anything that could leave the
/// base URL or smuggle a request is refused with 400 before the upstream is contacted:
/// `.`/`..` segments (also escaped), escaped `/`, `\`, `.`, `%`, `?`, `#`, `@`, NUL, CR or LF,
/// a raw `@` or `\`, empty segments (`//host`), a scheme-like first segment (`http:`).
enum GatewayPath {
    /// The target to send (`/chat/completions?x=1`, appended to the base path) and the path
    /// alone without its leading slash (`chat/completions`, to match cached endpoints).
    static func target(rest: [UInt8], query: Substring?) throws -> (target: String, path: String) {
        guard !rest.isEmpty else { throw refusal("The gateway path names no endpoint.") }
        for segment in rest.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false) {
            guard !segment.isEmpty else { throw refusal("The gateway path has an empty segment.") }
            try check(segment)
        }
        let firstSegment = rest.prefix { $0 != UInt8(ascii: "/") }
        if firstSegment.contains(UInt8(ascii: ":")) {
            throw refusal("The gateway path starts like a scheme or a host.")
        }
        let path = String(decoding: rest, as: UTF8.self)
        guard let query else { return ("/" + path, path) }
        try checkQuery(query)
        return ("/" + path + "?" + query, path)
    }

    private static func check(_ segment: ArraySlice<UInt8>) throws {
        var decoded: [UInt8] = []
        var index = segment.startIndex
        while index < segment.endIndex {
            let byte = segment[index]
            if byte == UInt8(ascii: "%") {
                guard index + 2 < segment.endIndex,
                      let high = hex(segment[index + 1]), let low = hex(segment[index + 2]) else {
                    throw refusal("The gateway path has a malformed escape.")
                }
                let value = high << 4 | low
                if forbiddenEscapes.contains(value) {
                    throw refusal("The gateway path has an escaped character that is not allowed there.")
                }
                decoded.append(value)
                index += 3
                continue
            }
            guard allowed(byte) else { throw refusal("The gateway path has a character that is not allowed there.") }
            decoded.append(byte)
            index += 1
        }
        // `..;x` is `..` to servers that strip path parameters (Tomcat, Spring): judged without them.
        let name = decoded.prefix { $0 != UInt8(ascii: ";") }
        if name.elementsEqual([UInt8(ascii: ".")]) || name.elementsEqual([UInt8(ascii: "."), UInt8(ascii: ".")]) {
            throw refusal("The gateway path has a dot segment.")
        }
    }

    private static func checkQuery(_ query: Substring) throws {
        let bytes = Array(query.utf8)
        // A TeamCache token is never forwarded, wherever a caller puts it.
        if GatewayHeaders.containsTokenSecret(query) {
            throw refusal("The gateway query carries a TeamCache token; send it in TeamCache-Authorization.")
        }
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            guard byte > 0x20, byte < 0x7F, byte != UInt8(ascii: "#"), byte != UInt8(ascii: "\\") else {
                throw refusal("The gateway query has a character that is not allowed there.")
            }
            if byte == UInt8(ascii: "%") {
                guard index + 2 < bytes.count, let high = hex(bytes[index + 1]), let low = hex(bytes[index + 2]) else {
                    throw refusal("The gateway query has a malformed escape.")
                }
                if [0x00, 0x0A, 0x0D].contains(high << 4 | low) {
                    throw refusal("The gateway query has an escaped control character.")
                }
            }
            index += 1
        }
    }

    /// Escapes that would change what the upstream reads as the path or request.
    private static let forbiddenEscapes: Set<UInt8> = [0x00, 0x0A, 0x0D, 0x2F, 0x5C, 0x2E, 0x25, 0x3F, 0x23, 0x40]

    /// RFC 3986 `pchar` without `@` (unreserved, sub-delims, `:`); `%` is handled apart.
    private static func allowed(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
             UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        default:
            return Array("-._~!$&'()*+,;=:".utf8).contains(byte)
        }
    }

    private static func hex(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    private static func refusal(_ detail: String) -> HTTPError { HTTPError(400, detail) }
}
