/// Why a call failed. `code` is bounded (a metric label); `detail` is for the log and the
/// caller's problem document (never carries request data: only names, addresses, errnos,
/// TLS verification results).
public struct HTTPClientError: Error, Sendable, CustomStringConvertible {
    public enum Code: String, Sendable {
        /// The host name did not resolve.
        case dns
        /// No connection could be made (refused, unreachable).
        case connect
        /// The TLS handshake failed or the certificate was not trusted.
        case tls
        /// Connecting (with TLS) took longer than the connect deadline.
        case connectTimeout = "connect_timeout"
        /// No response byte within the first-byte deadline.
        case firstByteTimeout = "first_byte_timeout"
        /// A pause between response bytes longer than the idle deadline.
        case idleTimeout = "idle_timeout"
        /// The whole call took longer than its total deadline.
        case totalTimeout = "total_timeout"
        /// The response broke HTTP/1.1's rules.
        case malformed
        /// The response was larger than the request allows.
        case tooLarge = "too_large"
        /// The connection closed or broke before the response was complete.
        case closed
        /// Too many calls waiting for a connection to this origin.
        case overloaded
        /// The request itself could not be written (a control byte in its target or a header).
        case invalidRequest = "invalid_request"
    }

    public let code: Code
    public let detail: String

    public init(_ code: Code, _ detail: String) {
        self.code = code
        self.detail = detail
    }

    /// Whether the failure is a deadline (a gateway answers 504 rather than 502).
    public var isTimeout: Bool {
        code == .connectTimeout || code == .firstByteTimeout || code == .idleTimeout || code == .totalTimeout
    }

    public var description: String { "\(code.rawValue): \(detail)" }
}
