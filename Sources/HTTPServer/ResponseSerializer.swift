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
    static func serialize(_ response: HTTPResponse, sendsBody requested: Bool, version: HTTPVersion, keepAlive: Bool,
                          requestID: String, date: String, server: String) -> Wire {
        let sendsBody = requested && !response.forbidsBody && !response.body.isEmpty
        let inlineBody = sendsBody && response.body.count <= inlineBodyLimit
        var head: [UInt8] = []
        head.reserveCapacity(256 + response.headers.fields.count * 48 + (inlineBody ? response.body.count : 0))
        head.append(contentsOf: statusLine(response.status))
        for (name, value) in response.headers {
            head.appendUTF8(name)
            head.appendASCII(": ")
            head.appendUTF8(value)
            head.appendASCII("\r\n")
        }
        if !requestID.isEmpty {
            // Written here rather than added to `response.headers`, which would copy the array.
            head.appendASCII("X-Request-Id: ")
            head.appendUTF8(requestID)
            head.appendASCII("\r\n")
        }
        head.appendASCII("Date: ")
        head.appendUTF8(date)
        head.appendASCII("\r\nServer: ")
        head.appendUTF8(server)
        head.appendASCII("\r\n")
        if !response.forbidsBody {
            head.appendASCII("Content-Length: ")
            head.appendUTF8(String(response.body.count))
            head.appendASCII("\r\n")
        }
        if !keepAlive {
            head.appendASCII("Connection: close\r\n")
        } else if version == .http10 {
            head.appendASCII("Connection: keep-alive\r\n")
        }
        head.appendASCII("\r\n")
        guard sendsBody else { return Wire(head: head, separateBody: nil, bodyBytes: 0) }
        if inlineBody {
            head += response.body
            return Wire(head: head, separateBody: nil, bodyBytes: response.body.count)
        }
        return Wire(head: head, separateBody: response.body, bodyBytes: response.body.count)
    }

    private static let commonStatusLines: [Int: [UInt8]] = Dictionary(uniqueKeysWithValues:
        [200, 201, 204, 304, 400, 401, 403, 404, 412, 413, 422, 429, 500, 503, 504].map {
            ($0, Array("HTTP/1.1 \($0) \(HTTPStatus.reason($0))\r\n".utf8))
        })

    private static func statusLine(_ status: Int) -> [UInt8] {
        commonStatusLines[status] ?? Array("HTTP/1.1 \(status) \(HTTPStatus.reason(status))\r\n".utf8)
    }
}
