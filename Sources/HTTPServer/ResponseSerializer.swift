import Observability

/// A response as bytes on the wire: the status line and fields, with the framing and
/// connection fields the connection decides, and the body (joined to the head when small,
/// so a typical answer is one buffer and one write).
enum ResponseSerializer {
    struct Wire {
        var head: [UInt8]
        /// A body too large to join the head, queued as its own buffer (not copied).
        var separateBody: [UInt8]?
        /// Body bytes sent, for the access log.
        var bodyBytes: Int
    }

    static let inlineBodyLimit = 4096

    /// `sendsBody`: false for HEAD (the fields still describe the body).
    ///
    /// The head is measured first and written into one buffer of exactly that size: every
    /// response pays for this, and growing an array part by part cost more than the copies.
    static func serialize(_ response: HTTPResponse, sendsBody requested: Bool, version: HTTPVersion, keepAlive: Bool,
                          requestID: RequestID, date: String, server: String) -> Wire {
        let layout = Layout(response, sendsBody: requested, version: version, keepAlive: keepAlive,
                            requestID: requestID, date: date, server: server)
        let head = [UInt8](unsafeUninitializedCapacity: layout.size) { buffer, initialized in
            initialized = layout.write(response, requestID: requestID, date: date, server: server, into: buffer)
        }
        guard layout.sendsBody else { return Wire(head: head, separateBody: nil, bodyBytes: 0) }
        if layout.inlineBody { return Wire(head: head, separateBody: nil, bodyBytes: response.body.count) }
        return Wire(head: head, separateBody: response.body, bodyBytes: response.body.count)
    }

    /// The same bytes written into `memory` (the loop's scratch: no allocation), when the whole
    /// answer is one buffer that fits; nil otherwise. Returns the bytes written and the body
    /// bytes among them.
    static func serialize(_ response: HTTPResponse, sendsBody requested: Bool, version: HTTPVersion, keepAlive: Bool,
                          requestID: RequestID, date: String, server: String,
                          into memory: UnsafeMutableRawBufferPointer) -> (count: Int, bodyBytes: Int)? {
        let layout = Layout(response, sendsBody: requested, version: version, keepAlive: keepAlive,
                            requestID: requestID, date: date, server: server)
        guard layout.size <= memory.count, !layout.sendsBody || layout.inlineBody,
              let base = memory.baseAddress else { return nil }
        let buffer = UnsafeMutableBufferPointer(start: base.assumingMemoryBound(to: UInt8.self), count: layout.size)
        let count = layout.write(response, requestID: requestID, date: date, server: server, into: buffer)
        return (count, layout.sendsBody ? response.body.count : 0)
    }

    /// A response's head measured: what it holds and its size in bytes.
    private struct Layout {
        let sendsBody: Bool
        let inlineBody: Bool
        let status: StatusLine
        let connection: StaticString?
        let size: Int

        init(_ response: HTTPResponse, sendsBody requested: Bool, version: HTTPVersion, keepAlive: Bool,
             requestID: RequestID, date: String, server: String) {
            sendsBody = requested && !response.forbidsBody && !response.body.isEmpty
            inlineBody = sendsBody && response.body.count <= inlineBodyLimit
            status = StatusLine(response.status)
            connection = !keepAlive ? "Connection: close\r\n" : version == .http10 ? "Connection: keep-alive\r\n" : nil
            var size = status.count + 6 + date.utf8.count + 10 + server.utf8.count + 2 + 2
                + response.renderedFields.count + response.staticFields.wireCount
            for field in response.headers.fields { size += field.name.utf8.count + field.value.utf8.count + 4 }
            if !requestID.isEmpty { size += 14 + requestID.byteCount + 2 }
            if !response.forbidsBody { size += 16 + decimalLength(response.body.count) + 2 }
            if let connection { size += connection.utf8CodeUnitCount }
            if inlineBody { size += response.body.count }
            self.size = size
        }

        /// Writes the head (and an inline body) into `buffer`, `size` bytes long; returns the count.
        func write(_ response: HTTPResponse, requestID: RequestID, date: String, server: String,
                   into buffer: UnsafeMutableBufferPointer<UInt8>) -> Int {
            var out = WireWriter(buffer)
            out.put(status)
            out.put(response.renderedFields)
            for field in response.headers.fields {
                out.put(field.name)
                out.put(": ")
                out.putFieldValue(field.value)
                out.put("\r\n")
            }
            response.staticFields.forEach { out.put($0) }
            if !requestID.isEmpty {
                // Written here rather than added to `response.headers`, which would copy the array.
                out.put("X-Request-Id: ")
                out.put(requestID)
                out.put("\r\n")
            }
            out.put("Date: ")
            out.put(date)
            out.put("\r\nServer: ")
            out.put(server)
            out.put("\r\n")
            if !response.forbidsBody {
                out.put("Content-Length: ")
                out.putDecimal(response.body.count)
                out.put("\r\n")
            }
            if let connection { out.put(connection) }
            out.put("\r\n")
            if inlineBody { out.put(response.body) }
            // Measured and written from the same parts: a disagreement is a bug here, and a
            // cut head would go out malformed, so debug builds (the tests) stop on it.
            assert(out.count == size, "response head measured \(size) bytes, wrote \(out.count)")
            return out.count
        }
    }

    /// Digits of a non-negative count in decimal.
    static func decimalLength(_ value: Int) -> Int {
        var length = 1
        var rest = value.magnitude / 10
        while rest > 0 {
            length += 1
            rest /= 10
        }
        return length
    }

    static func statusLine(_ status: Int) -> [UInt8] {
        Array("HTTP/1.1 \(status) \(HTTPStatus.reason(status))\r\n".utf8)
    }
}

/// A status line: the usual ones compiled in (a dictionary of them cost a hash and a retain
/// every response), any other made when needed.
enum StatusLine {
    case common(StaticString)
    case other([UInt8])

    init(_ status: Int) {
        switch status {
        case 200: self = .common("HTTP/1.1 200 OK\r\n")
        case 201: self = .common("HTTP/1.1 201 Created\r\n")
        case 204: self = .common("HTTP/1.1 204 No Content\r\n")
        case 304: self = .common("HTTP/1.1 304 Not Modified\r\n")
        case 400: self = .common("HTTP/1.1 400 Bad Request\r\n")
        case 401: self = .common("HTTP/1.1 401 Unauthorized\r\n")
        case 403: self = .common("HTTP/1.1 403 Forbidden\r\n")
        case 404: self = .common("HTTP/1.1 404 Not Found\r\n")
        case 412: self = .common("HTTP/1.1 412 Precondition Failed\r\n")
        case 413: self = .common("HTTP/1.1 413 Content Too Large\r\n")
        case 422: self = .common("HTTP/1.1 422 Unprocessable Content\r\n")
        case 429: self = .common("HTTP/1.1 429 Too Many Requests\r\n")
        case 500: self = .common("HTTP/1.1 500 Internal Server Error\r\n")
        case 503: self = .common("HTTP/1.1 503 Service Unavailable\r\n")
        case 504: self = .common("HTTP/1.1 504 Gateway Timeout\r\n")
        default: self = .other(ResponseSerializer.statusLine(status))
        }
    }

    var count: Int {
        switch self {
        case .common(let text): text.utf8CodeUnitCount
        case .other(let bytes): bytes.count
        }
    }
}

/// Copies parts into a buffer sized for them beforehand. Total: a part that would not fit
/// is cut rather than written past the end (the serializer sizes the buffer from the same
/// parts, so nothing is cut; a test checks the sizes agree).
struct WireWriter {
    private let buffer: UnsafeMutableBufferPointer<UInt8>
    private(set) var count = 0

    init(_ buffer: UnsafeMutableBufferPointer<UInt8>) { self.buffer = buffer }

    mutating func put(_ bytes: UnsafeRawBufferPointer) {
        let length = min(bytes.count, buffer.count - count)
        guard length > 0, let source = bytes.baseAddress, let target = buffer.baseAddress else { return }
        UnsafeMutableRawPointer(target + count).copyMemory(from: source, byteCount: length)
        count += length
    }

    mutating func put(_ text: StaticString) {
        put(UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    mutating func put(_ bytes: [UInt8]) { bytes.withUnsafeBytes { put($0) } }

    mutating func put(_ status: StatusLine) {
        switch status {
        case .common(let text): put(text)
        case .other(let bytes): put(bytes)
        }
    }

    mutating func put(_ field: StaticField) {
        put(field.head)
        if let number = field.number { putDecimal(number) }
        put(field.tail)
        put("\r\n")
    }

    /// A header's value, written `HTTPHeaders.wireSafe`.
    mutating func putFieldValue(_ text: String) {
        let from = count
        put(text)
        guard let target = buffer.baseAddress else { return }
        for index in from..<count where target[index] < 0x20 { target[index] = HTTPHeaders.wireSafe(target[index]) }
    }

    mutating func put(_ text: String) {
        // Not `initialize(from: text.utf8)`: that traps when the room is short, and checking
        // the room first cost more than this route saves.
        text.withUTF8Bytes { put($0) }
    }

    /// A request id's text: its head, then its number's hex digits (`RequestID`).
    mutating func put(_ id: RequestID) {
        put(id.head)
        guard let number = id.number, Hex.digits(number) <= buffer.count - count,
              let target = buffer.baseAddress else { return }
        count += Hex.write(number, to: target + count)
    }

    /// A non-negative count in decimal (`ResponseSerializer.decimalLength` digits).
    mutating func putDecimal(_ value: Int) {
        let length = ResponseSerializer.decimalLength(value)
        guard length <= buffer.count - count else { return }
        var rest = value.magnitude
        for position in stride(from: count + length - 1, through: count, by: -1) {
            buffer[position] = UInt8(ascii: "0") + UInt8(truncatingIfNeeded: rest % 10)
            rest /= 10
        }
        count += length
    }
}

extension ResponseSerializer {
    /// The head of a streamed answer: its own fields, then the framing the stream uses in
    /// place of a Content-Length (`Transfer-Encoding: chunked`, or none, the end marked by the
    /// connection's close). Not on the hit path: built plainly.
    static func streamHead(_ response: HTTPResponse, framing: ResponseStream.Framing, version: HTTPVersion,
                           keepAlive: Bool, requestID: RequestID, date: String, server: String) -> [UInt8] {
        var head = statusLine(response.status) + response.renderedFields
        var fields = ""
        for (name, value) in response.headers where !Self.framingFields.contains(name.lowercased()) {
            fields += name + ": " + Self.fieldValue(value) + "\r\n"
        }
        response.staticFields.forEach { fields += $0.name + ": " + $0.value + "\r\n" }
        if !requestID.isEmpty { fields += "X-Request-Id: " + requestID.text + "\r\n" }
        fields += "Date: " + date + "\r\nServer: " + server + "\r\n"
        if framing == .chunked { fields += "Transfer-Encoding: chunked\r\n" }
        if !keepAlive {
            fields += "Connection: close\r\n"
        } else if version == .http10 {
            fields += "Connection: keep-alive\r\n"
        }
        head += Array((fields + "\r\n").utf8)
        return head
    }

    /// `value` written `HTTPHeaders.wireSafe`.
    static func fieldValue(_ value: String) -> String {
        guard value.utf8.contains(where: { HTTPHeaders.wireSafe($0) != $0 }) else { return value }
        return String(decoding: value.utf8.map(HTTPHeaders.wireSafe), as: UTF8.self)
    }

    /// Fields the connection decides for a stream: a handler's own would contradict its framing.
    static let framingFields: Set<String> = ["content-length", "transfer-encoding", "connection"]
}
