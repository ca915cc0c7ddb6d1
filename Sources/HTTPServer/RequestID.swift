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

    /// The id as text: the head, then the number's digits, written into one string (asked for
    /// by errors and logs only).
    public var text: String {
        guard let number else { return head }
        var head = head
        return head.withUTF8 { prefix in
            String(unsafeUninitializedCapacity: prefix.count + Hex.digits(number)) { buffer in
                guard let base = buffer.baseAddress else { return 0 }
                if let source = prefix.baseAddress { base.initialize(from: source, count: prefix.count) }
                return prefix.count + Hex.write(number, to: base + prefix.count)
            }
        }
    }

    /// How many bytes its text has.
    var byteCount: Int { head.utf8.count + (number.map(Hex.digits) ?? 0) }
}
