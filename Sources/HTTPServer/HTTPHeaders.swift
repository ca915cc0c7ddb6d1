import Foundation

/// Header fields in arrival order, looked up case-insensitively.
public struct HTTPHeaders: Sendable, Sequence {
    /// One field as it arrived. A struct, not a tuple: an array of tuples is destroyed through
    /// the runtime's generic tuple witness, ~100 instructions a field on every request.
    public struct Field: Sendable {
        public let name: String
        public let value: String
    }

    public private(set) var fields: [Field] = []
    /// A bit for every field's name (`bit(for:)`): a lookup whose name's bit is clear answers
    /// at once, comparing nothing. Most lookups on a hit ask for fields a request does not
    /// send (Cache-Control, Pragma, If-None-Match, X-Request-Id…), and comparing each with
    /// every field was ~1,500 instructions a near-cache hit.
    private var names: UInt64 = 0

    public init(_ fields: [(String, String)] = []) {
        self.fields = fields.map { Field(name: $0.0, value: $0.1) }
        for field in fields { names |= Self.bit(for: field.0) }
    }

    /// Room for `capacity` fields, so building a request or response does not regrow the array.
    public init(capacity: Int) { fields.reserveCapacity(capacity) }

    public mutating func add(_ name: String, _ value: String) {
        fields.append(Field(name: name, value: value))
        names |= Self.bit(for: name)
    }

    /// The first value of `name`.
    public subscript(name: String) -> String? {
        guard mayHave(name) else { return nil }
        return fields.first(where: { Self.same($0.name, name) })?.value
    }

    /// The value of `name` when exactly one field has that name; nil when none does or several
    /// do. One pass: the value and then `count(of:)` walked the fields twice (~500 instructions
    /// of a gzip client's hit).
    public func single(_ name: String) -> String? {
        guard mayHave(name) else { return nil }
        var found: String?
        for field in fields where Self.same(field.name, name) {
            guard found == nil else { return nil }
            found = field.value
        }
        return found
    }

    /// False when no field is named `name`; true when one may be.
    public func mayHave(_ name: String) -> Bool { names & Self.bit(for: name) != 0 }

    /// One of 64 bits, from a name's length and its first byte with ASCII case folded: names
    /// that are `same` get the same bit (they are equally long, and their first bytes are equal
    /// or differ in a letter's case, which `| 0x20` folds). The length's factor, 11, gives the
    /// fields clients send (Host, Authorization, User-Agent, Accept…) bits apart from those a
    /// hit asks for and most requests lack (If-None-Match, Cache-Control, X-Request-Id…); with
    /// 7, If-None-Match shared Host's bit and was compared with every field on every hit.
    static func bit(for name: String) -> UInt64 {
        // An iterator, not `utf8.first`: that went through the view's generic index (~7 times dearer).
        var bytes = name.utf8.makeIterator()
        let first = UInt64(bytes.next() ?? 0) | 0x20
        return 1 << ((UInt64(truncatingIfNeeded: name.utf8.count) &* 11 &+ first) & 63)
    }

    /// Every value of `name`, as list elements (RFC 9110 §5.6.1; see `HeaderList`).
    public func list(_ name: String) -> [String] { HeaderList.split(self, name) }

    public func contains(_ name: String) -> Bool { self[name] != nil }

    /// How many fields named `name` there are.
    public func count(of name: String) -> Int {
        guard mayHave(name) else { return 0 }
        return fields.reduce(0) { $0 + (Self.same($1.name, name) ? 1 : 0) }
    }

    public func makeIterator() -> Iterator { Iterator(fields: fields.makeIterator()) }

    /// The fields as `(name, value)` pairs, in arrival order.
    public struct Iterator: IteratorProtocol {
        var fields: IndexingIterator<[Field]>

        public mutating func next() -> (name: String, value: String)? {
            fields.next().map { (name: $0.name, value: $0.value) }
        }
    }

    /// The fields as the serializer writes them, `Name: value\r\n` each (for
    /// `HTTPResponse.renderedFields`), values written `wireSafe`.
    public var wireForm: [UInt8] {
        var bytes: [UInt8] = []
        for field in fields {
            bytes += field.name.utf8
            bytes += ": ".utf8
            bytes += field.value.utf8.map(Self.wireSafe)
            bytes += "\r\n".utf8
        }
        return bytes
    }

    /// A header value's byte as it is written: CR, LF and NUL as a space, so no value (a stored
    /// content type, a name taken from a request or an upstream) can end its field early and
    /// start another header, or another response, on a kept-alive connection. The one rule of
    /// every way a head is written (`wireForm`, `ResponseSerializer`).
    @inlinable
    public static func wireSafe(_ byte: UInt8) -> UInt8 {
        byte == 0x0D || byte == 0x0A || byte == 0 ? 0x20 : byte
    }

    /// ASCII case-insensitive comparison without allocating (header names are ASCII tokens).
    public static func same(_ lhs: String, _ rhs: String) -> Bool {
        // Bytes only, never `==`: String equality holds for canonically equivalent Unicode
        // spellings (U+F900 and U+8C48), which differ in bytes and in `bit(for:)`. Read in
        // place: walking two UTF-8 views byte by byte cost ~800 instructions a hit.
        guard lhs.utf8.count == rhs.utf8.count else { return false }
        if case let same?? = lhs.utf8.withContiguousStorageIfAvailable({ left in
            rhs.utf8.withContiguousStorageIfAvailable { right in
                // Clients mostly spell names as we do: equal bytes, one compare. (No address: both empty.)
                guard let leftStart = left.baseAddress, let rightStart = right.baseAddress else { return true }
                return memcmp(leftStart, rightStart, left.count) == 0 || sameIgnoringCase(left, right)
            }
        }) {
            return same
        }
        return sameIgnoringCase(Array(lhs.utf8), Array(rhs.utf8))
    }

    /// ASCII case-insensitive equality of two byte sequences of the same length.
    private static func sameIgnoringCase<Bytes: RandomAccessCollection>(_ lhs: Bytes, _ rhs: Bytes) -> Bool
    where Bytes.Element == UInt8, Bytes.Index == Int {
        for index in lhs.indices {
            let a = lhs[index], b = rhs[index - lhs.startIndex + rhs.startIndex]
            if a != b && !(a | 0x20 == b | 0x20 && (a | 0x20) >= 0x61 && (a | 0x20) <= 0x7a) { return false }
        }
        return true
    }

}

