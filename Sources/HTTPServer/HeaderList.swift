/// List-valued header fields (RFC 9110 §5.6.1), parsed without ever trapping.
///
/// Every header the server interprets as a list goes through here: `Cache-Control`,
/// `Pragma`, `Accept-Encoding`, `Content-Encoding`, `If-None-Match`, `If-Match`,
/// `Cache-Tag`, `Expect` and `Connection`. The scanner works on bytes with checked
/// positions only, so any value a client can send (empty, one `=`, unbalanced quotes,
/// a backslash at the end, bytes that are not UTF-8) yields some list, never a crash.
public enum HeaderList {
    /// The elements of one field value: split at commas outside quoted strings, optional
    /// whitespace trimmed, empty elements dropped (`a,,b` is `a`, `b`, as §5.6.1 asks).
    public static func split(_ value: String) -> [String] {
        var elements: [String] = []
        var current: [UInt8] = []
        var scanner = QuoteScanner()
        for byte in value.utf8 {
            if scanner.outside(byte) && byte == comma {
                appendTrimmed(current, to: &elements)
                current.removeAll(keepingCapacity: true)
            } else {
                current.append(byte)
            }
        }
        appendTrimmed(current, to: &elements)
        return elements
    }

    /// The elements of every field named `name`, in order.
    public static func split(_ headers: HTTPHeaders, _ name: String) -> [String] {
        var elements: [String] = []
        guard headers.mayHave(name) else { return elements }
        for field in headers.fields where HTTPHeaders.same(field.name, name) { elements += split(field.value) }
        return elements
    }

    /// The elements of every field named `name`, each read as `token[=value]` with `;` parameters.
    public static func elements(_ headers: HTTPHeaders, _ name: String) -> [HeaderElement] {
        split(headers, name).map(HeaderElement.init(parsing:))
    }

    /// delta-seconds (RFC 9111 §1.2.2): one or more digits. A value past 2^31 counts as
    /// 2^31 (the RFC's rule), so no client number can overflow. nil when it is not digits.
    public static func deltaSeconds(_ text: String) -> Int? {
        guard !text.isEmpty else { return nil }
        var value = 0
        for byte in text.utf8 {
            guard byte >= zero && byte <= nine else { return nil }
            // Saturate before multiplying: 2^31 * 10 + 9 still fits in Int64.
            value = min(value * 10 + Int(byte - zero), deltaSecondsCap)
        }
        return value
    }

    /// The largest delta-seconds a client can express; larger values count as this.
    public static let deltaSecondsCap = 1 << 31

    /// A `q` weight (RFC 9110 §12.4.2): `0`, `0.5`, `1.000`; nil when it is not a qvalue.
    public static func quality(_ text: String) -> Double? {
        var text = text
        return text.withUTF8 { quality(bytes: $0) }
    }

    /// The same over bytes read in place (`Accept-Encoding` on the hit path).
    public static func quality(bytes: UnsafeBufferPointer<UInt8>) -> Double? {
        guard let first = bytes.first, first == zero || first == one, bytes.count <= 5 else { return nil }
        guard bytes.count > 1 else { return first == one ? 1 : 0 }
        guard bytes[1] == UInt8(ascii: ".") else { return nil }
        var thousandths = 0, scale = 100
        for byte in bytes.dropFirst(2) {
            guard byte >= zero && byte <= nine else { return nil }
            thousandths += Int(byte - zero) * scale
            scale /= 10
        }
        if first == one { return thousandths == 0 ? 1 : nil }
        return Double(thousandths) / 1000
    }

    /// Removes one level of quoting (`"a\"b"` is `a"b`); other text is returned as it is.
    public static func unquote(_ text: String) -> String {
        let bytes = Array(text.utf8)
        guard bytes.count >= 2, bytes.first == quote, bytes.last == quote else { return text }
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count - 2)
        var escaped = false
        for byte in bytes.dropFirst().dropLast() {
            if escaped || byte != backslash {
                out.append(byte)
                escaped = false
            } else {
                escaped = true
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    // MARK: Scanning

    /// Tracks whether a byte stands outside a quoted string (`\` escapes inside quotes).
    struct QuoteScanner {
        private var quoted = false
        private var escaped = false

        /// Feeds `byte`; true when it is outside quotes and not itself a quote.
        mutating func outside(_ byte: UInt8) -> Bool {
            if quoted {
                if escaped {
                    escaped = false
                } else if byte == HeaderList.backslash {
                    escaped = true
                } else if byte == HeaderList.quote {
                    quoted = false
                }
                return false
            }
            if byte == HeaderList.quote {
                quoted = true
                return false
            }
            return true
        }
    }

    /// Splits `bytes` at `separator` outside quoted strings, each part trimmed, empty ones kept.
    static func parts(_ bytes: [UInt8], at separator: UInt8) -> [[UInt8]] {
        var parts: [[UInt8]] = []
        var current: [UInt8] = []
        var scanner = QuoteScanner()
        for byte in bytes {
            if scanner.outside(byte) && byte == separator {
                parts.append(trim(current))
                current.removeAll(keepingCapacity: true)
            } else {
                current.append(byte)
            }
        }
        parts.append(trim(current))
        return parts
    }

    static func trim(_ bytes: [UInt8]) -> [UInt8] {
        var slice = bytes[...]
        while let first = slice.first, first == space || first == tab { slice = slice.dropFirst() }
        while let last = slice.last, last == space || last == tab { slice = slice.dropLast() }
        return Array(slice)
    }

    private static func appendTrimmed(_ bytes: [UInt8], to elements: inout [String]) {
        let trimmed = trim(bytes)
        if !trimmed.isEmpty { elements.append(String(decoding: trimmed, as: UTF8.self)) }
    }

    static let comma = UInt8(ascii: ","), quote = UInt8(ascii: "\""), backslash = UInt8(ascii: "\\")
    static let space = UInt8(ascii: " "), tab = UInt8(ascii: "\t")
    static let zero = UInt8(ascii: "0"), one = UInt8(ascii: "1"), nine = UInt8(ascii: "9")
}

/// One list element read as `name[=value]` followed by `;name=value` parameters: the shape
/// of `Cache-Control` directives (`max-stale=60`) and of codings (`gzip;q=0.5`).
public struct HeaderElement: Sendable, Equatable {
    public struct Parameter: Sendable, Equatable {
        public var name: String
        public var value: String

        public init(name: String, value: String) {
            self.name = name
            self.value = value
        }
    }

    /// Lowercased (directive and coding names are case-insensitive); may be empty (`=5`).
    public var name: String
    /// The text after the first `=`, unquoted; nil when there is none.
    public var value: String?
    public var parameters: [Parameter]

    public init(parsing element: String) {
        let pieces = HeaderList.parts(Array(element.utf8), at: UInt8(ascii: ";"))
        let (name, value) = Self.pair(pieces.first ?? [])
        self.name = name
        self.value = value
        parameters = pieces.dropFirst().compactMap { piece in
            let (name, value) = Self.pair(piece)
            return name.isEmpty ? nil : Parameter(name: name, value: value ?? "")
        }
    }

    /// The first parameter called `name` (lowercase), if any.
    public func parameter(_ name: String) -> String? { parameters.first(where: { $0.name == name })?.value }

    private static func pair(_ bytes: [UInt8]) -> (String, String?) {
        guard let equals = bytes.firstIndex(of: UInt8(ascii: "=")) else {
            return (String(decoding: bytes, as: UTF8.self).lowercased(), nil)
        }
        let name = HeaderList.trim(Array(bytes[..<equals]))
        let value = HeaderList.trim(Array(bytes[(equals + 1)...]))
        return (String(decoding: name, as: UTF8.self).lowercased(),
                HeaderList.unquote(String(decoding: value, as: UTF8.self)))
    }
}
