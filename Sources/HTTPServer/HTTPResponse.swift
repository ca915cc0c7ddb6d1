import JSONEscaping
import Observability

/// A complete response. The server adds `Date`, `Server`, `X-Request-Id`, `Content-Length`
/// and `Connection`; a HEAD request gets the same headers without the body.
public struct HTTPResponse: Sendable {
    public var status: Int
    public var headers: HTTPHeaders
    public var body: [UInt8]
    /// Fields already in wire form (`Name: value\r\n` each), written before `headers`: what
    /// a near-cache entry answers every hit with, rendered once when it was kept (building and
    /// writing them field by field was a fifth of a hit's instructions). Not in `headers`, so
    /// nothing reads them back: only for fields no one inspects on the way out.
    public var renderedFields: [UInt8] = []
    /// Fields of fixed text and at most one number (`StaticField`), written after `headers`;
    /// like `renderedFields` not in `headers`, so nothing reads them back.
    public private(set) var staticFields = StaticFields()
    /// Called once, on the loop, when this response can no longer reach its client (its
    /// request was given up at its deadline, or the connection closed): a handler that gave
    /// something away with it (a lease only this answer names) takes it back. It must not block.
    public var undelivered: (@Sendable () -> Void)?

    public init(status: Int, headers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    public static func text(_ status: Int, _ text: String, contentType: String = "text/plain; charset=utf-8")
        -> HTTPResponse {
        HTTPResponse(status: status, headers: HTTPHeaders([("Content-Type", contentType)]), body: Array(text.utf8))
    }

    public static func json(_ status: Int, _ json: String) -> HTTPResponse {
        text(status, json, contentType: "application/json")
    }

    /// Adds a field of fixed text and at most one number, written straight into the head (a
    /// hit's `Age` and `Cache-Status` were two strings, two number formattings and the header
    /// array that held them). Past `StaticFields.capacity` the field goes to `headers`.
    public mutating func addStatic(_ field: StaticField) {
        if !staticFields.add(field) { headers.add(field.name, field.value) }
    }

    /// Statuses that never carry a body (RFC 9110 §6.4.1).
    var forbidsBody: Bool { status == 204 || status == 304 || (100...199).contains(status) }
}

/// An error a handler throws to answer with an RFC 9457 problem.
public struct HTTPError: Error, Sendable {
    public var status: Int
    public var title: String
    public var detail: String
    /// The problem `type`, a URI reference naming the kind of problem.
    public var type: String
    public var headers: HTTPHeaders
    /// Extension members (RFC 9457 §3.2): names and their values as JSON text.
    public var members: [(name: String, json: String)] = []

    public init(_ status: Int, _ detail: String, title: String? = nil, type: String? = nil,
                headers: HTTPHeaders = HTTPHeaders()) {
        self.status = status
        self.detail = detail
        self.title = title ?? HTTPStatus.reason(status)
        self.type = type ?? ProblemTypes.uri(HTTPStatus.slug(status))
        self.headers = headers
    }

    /// The problem+json response, carrying the request id so a user can quote it.
    public func response(requestID: String) -> HTTPResponse {
        var json = "{\"type\":"
        JSONText.appendString(type, to: &json)
        json += ",\"title\":"
        JSONText.appendString(title, to: &json)
        json += ",\"status\":\(status),\"detail\":"
        JSONText.appendString(detail, to: &json)
        if !requestID.isEmpty {
            json += ",\"request_id\":"
            JSONText.appendString(requestID, to: &json)
        }
        for member in members {
            json += ","
            JSONText.appendString(member.name, to: &json)
            json += ":" + member.json
        }
        json += "}"
        var response = HTTPResponse.text(status, json, contentType: "application/problem+json")
        for (name, value) in headers { response.headers.add(name, value) }
        return response
    }
}

/// Reason phrases and problem slugs.
public enum HTTPStatus {
    public static func reason(_ status: Int) -> String {
        switch status {
        case 100: "Continue"
        case 200: "OK"
        case 201: "Created"
        case 202: "Accepted"
        case 204: "No Content"
        case 206: "Partial Content"
        case 301: "Moved Permanently"
        case 302: "Found"
        case 304: "Not Modified"
        case 307: "Temporary Redirect"
        case 308: "Permanent Redirect"
        case 400: "Bad Request"
        case 401: "Unauthorized"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 402: "Payment Required"
        case 405: "Method Not Allowed"
        case 406: "Not Acceptable"
        case 408: "Request Timeout"
        case 409: "Conflict"
        case 410: "Gone"
        case 412: "Precondition Failed"
        case 413: "Content Too Large"
        case 414: "URI Too Long"
        case 415: "Unsupported Media Type"
        case 417: "Expectation Failed"
        case 422: "Unprocessable Content"
        case 429: "Too Many Requests"
        case 431: "Request Header Fields Too Large"
        case 500: "Internal Server Error"
        case 501: "Not Implemented"
        case 502: "Bad Gateway"
        case 503: "Service Unavailable"
        case 504: "Gateway Timeout"
        case 505: "HTTP Version Not Supported"
        case 507: "Insufficient Storage"
        default: "Status \(status)"
        }
    }

    static func slug(_ status: Int) -> String {
        reason(status).lowercased().split(separator: " ").joined(separator: "-")
    }
}

/// A header field made of compile-time text and at most one number: `head` is the field's
/// name, `: ` and the value's start (`"Cache-Status: teamcache; hit; ttl="`), then `number`
/// in decimal (when given; a negative one is written as 0), then `tail`. Nothing in it is a
/// client's: the text is the program's own, so it needs no checking.
public struct StaticField: Sendable {
    public let head: StaticString
    public let number: Int?
    public let tail: StaticString

    public init(_ head: StaticString, _ number: Int? = nil, _ tail: StaticString = "") {
        self.head = head
        self.number = number.map { max(0, $0) }
        self.tail = tail
    }

    /// The name (before the first `:`), for a field that goes to `headers` after all.
    var name: String {
        let text = head.description
        return String(text.prefix { $0 != ":" })
    }

    /// The value as text, as `headers` holds it.
    var value: String {
        let text = head.description
        var start = text.firstIndex(of: ":").map { text.index(after: $0) } ?? text.endIndex
        while start < text.endIndex && text[start] == " " { start = text.index(after: start) }
        return String(text[start...]) + (number.map { String($0) } ?? "") + tail.description
    }

    /// Bytes on the wire, with the line's CRLF.
    var wireCount: Int {
        head.utf8CodeUnitCount + (number.map(ResponseSerializer.decimalLength) ?? 0) + tail.utf8CodeUnitCount + 2
    }
}

/// Up to `capacity` static fields, held inline (no allocation), in the order added.
public struct StaticFields: Sendable {
    public static let capacity = 3
    private var first: StaticField?
    private var second: StaticField?
    private var third: StaticField?

    /// False when full (the field is not kept).
    mutating func add(_ field: StaticField) -> Bool {
        if first == nil {
            first = field
        } else if second == nil {
            second = field
        } else if third == nil {
            third = field
        } else {
            return false
        }
        return true
    }

    func forEach(_ body: (StaticField) -> Void) {
        if let first { body(first) }
        if let second { body(second) }
        if let third { body(third) }
    }

    var wireCount: Int {
        (first?.wireCount ?? 0) + (second?.wireCount ?? 0) + (third?.wireCount ?? 0)
    }
}
