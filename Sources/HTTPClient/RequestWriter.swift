/// A request's bytes on the wire: the head (with the client's own `Host`, framing and
/// connection headers) and the body, or why it cannot be written.
enum RequestWriter {
    /// Headers the client writes itself: a caller's would contradict them.
    private static let owned: Set<String> = ["host", "content-length", "transfer-encoding", "connection"]

    static func bytes(of request: ClientRequest, to origin: Origin) -> Result<[UInt8], HTTPClientError> {
        guard isTokenText(request.method) else {
            return .failure(HTTPClientError(.invalidRequest, "the method is not a token"))
        }
        guard request.path.hasPrefix("/"), request.path.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            return .failure(HTTPClientError(.invalidRequest, "the target has a space or a control byte"))
        }
        var head = "\(request.method) \(origin.basePath)\(request.path) HTTP/1.1\r\nHost: \(origin.hostHeader)\r\n"
        for (name, value) in request.headers where !owned.contains(name.lowercased()) {
            guard isTokenText(name), value.utf8.allSatisfy({ $0 >= 0x20 && $0 != 0x7F || $0 == 0x09 }) else {
                return .failure(HTTPClientError(.invalidRequest, "a header has a control byte"))
            }
            head += "\(name): \(value)\r\n"
        }
        if !request.body.isEmpty || ["POST", "PUT", "PATCH"].contains(request.method) {
            head += "Content-Length: \(request.body.count)\r\n"
        }
        head += "\r\n"
        return .success(Array(head.utf8) + request.body)
    }

    private static func isTokenText(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.allSatisfy(ResponseHead.isTokenByte)
    }
}
