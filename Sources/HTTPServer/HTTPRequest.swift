/// A complete HTTP request as the handlers see it (the body is fully read).
///
/// A class, so passing it to a handler and back costs one retain rather than one per field.
public final class HTTPRequest: @unchecked Sendable {
    // @unchecked: the parser and the connection fill it in on the loop thread before it is
    // handed to a handler; from then on nothing mutates it.
    // The head is `let`: a `var` of a class is checked for exclusive access at run time on
    // every read from another module, and handlers read the headers many times a request
    // (callgrind: 70 checks a near-cache hit, ~13% of its instructions, with the others).
    // What the server sets later is not checked either (`@exclusivity(unchecked)`): each is
    // assigned whole, on the loop thread, before any handler sees the request, and only read
    // after; no access to one ever spans a call that could reach it again.
    public let method: String
    /// The request target as sent, e.g. `/v1/caches/a/entries/k%2F1?ttl=5`.
    public let target: String
    public let version: HTTPVersion
    public let headers: HTTPHeaders
    @exclusivity(unchecked) public internal(set) var body: [UInt8]
    /// Whether the connection stays open after this request (from version and `Connection`).
    public let keepAlive: Bool

    /// Set by the server: the request id, the matched route and its decoded path parameters.
    @exclusivity(unchecked) public internal(set) var id = RequestID.none
    /// The request id as text (made when asked: see `RequestID`).
    public var requestID: String { id.text }
    /// The client's address (IPv4 text; empty when unknown), for limits per client.
    @exclusivity(unchecked) public internal(set) var remoteAddress: String = ""
    /// The credential its connection presented last (nil outside a server: tests, the fuzzer).
    @exclusivity(unchecked) public package(set) var connectionCredential: ConnectionCredential?
    @exclusivity(unchecked) public internal(set) var routeTemplate: String = ""
    /// The matched route's id (a metrics key), or `Router.unmatchedID`.
    @exclusivity(unchecked) var routeID = Router.unmatchedID
    @exclusivity(unchecked) public internal(set) var pathParameters: PathParameters = [:]
    /// When the server gives the request up (monotonic nanoseconds; 0 until dispatched):
    /// work it starts must not begin past this (a write left queued past it is dropped).
    @exclusivity(unchecked) public internal(set) var deadline: UInt64 = 0
    /// Its route may change state (`Route.mayChangeState`).
    @exclusivity(unchecked) var mayChangeState = false
    /// Where the target's query begins (its `?`), found once by `memchr`: a generic walk of
    /// the target's UTF-8 view cost ~1,000 instructions each time `path` or `queryItems` asked.
    private let queryMark: String.Index?

    public init(method: String, target: String, version: HTTPVersion, headers: HTTPHeaders, body: [UInt8] = [],
                keepAlive: Bool = true) {
        self.method = method
        self.target = target
        self.version = version
        self.headers = headers
        self.body = body
        self.keepAlive = keepAlive
        queryMark = ByteSearch.firstIndex(of: UInt8(ascii: "?"), in: target)
    }

    /// The target's path, before `?`.
    public var path: Substring {
        guard let mark = queryMark else { return Substring(target) }
        return target[..<mark]
    }

    /// Query parameters, percent-decoded (`+` stays `+`); nil for a malformed escape.
    public var queryItems: [String: String]? {
        // Split by bytes, not Characters (grapheme breaking was a visible share of a hit), and
        // most targets have no query at all.
        guard let mark = queryMark else { return [:] }
        let query = target.utf8[target.utf8.index(after: mark)...]
        var items: [String: String] = [:]
        for pair in query.split(separator: UInt8(ascii: "&")) {
            // `name=value`, `name=` or `name`: everything before the first `=`, and after it.
            let equals = pair.firstIndex(of: UInt8(ascii: "=")) ?? pair.endIndex
            let rawValue = equals == pair.endIndex ? pair[equals...] : pair[pair.index(after: equals)...]
            guard let name = PercentDecoding.decode(Substring(pair[..<equals]))
                    .flatMap({ String(validating: $0, as: UTF8.self) }),
                  let value = PercentDecoding.decode(Substring(rawValue))
                    .flatMap({ String(validating: $0, as: UTF8.self) }) else { return nil }
            items[name] = value
        }
        return items
    }
}

/// HTTP/1.0 or HTTP/1.1.
public enum HTTPVersion: Sendable, Equatable {
    case http10
    case http11

    var text: String { self == .http10 ? "HTTP/1.0" : "HTTP/1.1" }
}

/// Percent-decoding into raw bytes (a decoded `/` stays a byte inside its segment).
public enum PercentDecoding {
    public static func decode<S: StringProtocol>(_ text: S) -> [UInt8]? {
        decode(bytes: text.utf8)
    }

    /// Decodes percent-escapes in raw bytes; nil on a malformed escape.
    public static func decode<C: Collection<UInt8>>(bytes: C) -> [UInt8]? {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var iterator = bytes.makeIterator()
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "%") else {
                out.append(byte)
                continue
            }
            guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue) else {
                return nil
            }
            out.append(high << 4 | low)
        }
        return out
    }

    /// The value of one hex digit (also used for chunk sizes).
    static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    /// Percent-encodes every byte outside RFC 3986's unreserved set.
    public static func encode(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        for byte in bytes {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
                 UInt8(ascii: "~"):
                out.append(byte)
            default:
                out += [UInt8(ascii: "%"), digits[Int(byte >> 4)], digits[Int(byte & 0xf)]]
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}
