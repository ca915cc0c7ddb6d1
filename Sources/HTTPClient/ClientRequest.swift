/// One outgoing request: the whole body is in memory (callers bound it before it gets here).
public struct ClientRequest: Sendable {
    public var method: String
    /// The request target, starting with `/`, appended to the origin's base path as it is
    /// (the caller has checked it: this layer writes it out, it does not judge it).
    public var path: String
    /// Headers as sent, in order. `Host`, `Content-Length`, `Transfer-Encoding` and
    /// `Connection` are the client's own and are dropped from here.
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]
    public var deadlines: ClientDeadlines
    /// The longest response body read; past it the call fails with `tooLarge`.
    public var maxResponseBytes: Int

    public init(method: String, path: String, headers: [(name: String, value: String)] = [], body: [UInt8] = [],
                deadlines: ClientDeadlines = ClientDeadlines(), maxResponseBytes: Int = 64 << 20) {
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body
        self.deadlines = deadlines
        self.maxResponseBytes = maxResponseBytes
    }
}

/// How long each phase of a call may take, in seconds.
public struct ClientDeadlines: Sendable, Equatable {
    /// Resolving, connecting and the TLS handshake (or waiting for a pooled connection).
    public var connect: Double
    /// From the request's last byte written to the response's first byte read.
    public var firstByte: Double
    /// The longest silence between two reads of the response once it has begun.
    public var idle: Double
    /// The whole call, from its start to the response's last byte: without it, an upstream
    /// that sends a byte of its head, an interim answer or a comment just inside `idle` each
    /// time would hold the call (and everyone following it) for ever.
    public var total: Double

    public init(connect: Double = 10, firstByte: Double = 600, idle: Double = 120, total: Double = 1800) {
        self.connect = connect
        self.firstByte = firstByte
        self.idle = idle
        self.total = total
    }
}

/// A response's status line and headers.
public struct ClientResponseHead: Sendable {
    public let status: Int
    /// Minor version of HTTP/1.x.
    public let minorVersion: Int
    public let headers: [(name: String, value: String)]

    /// The first value of a header, by case-insensitive name.
    public subscript(name: String) -> String? {
        headers.first { $0.name.caseInsensitiveEquals(name) }?.value
    }
}

extension String {
    /// ASCII case-insensitive comparison (header names are ASCII tokens).
    func caseInsensitiveEquals(_ other: String) -> Bool {
        let a = utf8, b = other.utf8
        guard a.count == b.count else { return false }
        return zip(a, b).allSatisfy { asciiLower($0) == asciiLower($1) }
    }
}

@inline(__always) func asciiLower(_ byte: UInt8) -> UInt8 {
    byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte | 0x20 : byte
}
