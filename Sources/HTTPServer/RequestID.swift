import Observability

/// A request's id (`EventLoop.requestID(for:)`): the client's own `X-Request-Id`, or a number
/// its loop gave it, written after the loop's prefix in lowercase hex.
///
/// A numbered id stays a number until something asks for its text: the response's head and
/// the access line write its digits straight into their bytes. As a `String` it was made for
/// every request and was ~500 instructions and an allocation of a near-cache hit; only errors
/// and logs ask for the text.
public struct RequestID: Sendable, ExpressibleByStringLiteral {
    /// The whole id when given, the loop's prefix when numbered.
    let head: String
    /// The number after the prefix; nil for an id given whole.
    let number: UInt64?

    public init(_ given: String) {
        head = given
        number = nil
    }

    public init(stringLiteral value: String) { self.init(value) }

    init(prefix: String, number: UInt64) {
        head = prefix
        self.number = number
    }

    /// No id (a request that could not be parsed).
    static let none = RequestID("")

    public var isEmpty: Bool { number == nil && head.isEmpty }

    /// The id as text.
    public var text: String { number.map { EventLoop.requestID(prefix: head, counter: $0) } ?? head }

    /// How many bytes its text has.
    var byteCount: Int { head.utf8.count + (number.map(Hex.digits) ?? 0) }
}
