import JSONEscaping

/// A JSON value that keeps numbers as their source text, so canonical JSON can write them
/// "as given" (a float parse would turn `1.10` into `1.1` and change cache keys).
public indirect enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    case number(String)
    case string(String)
    case array([JSONValue])
    /// Members in source order; duplicate names are rejected by the parser.
    case object([(String, JSONValue)])

    public static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): true
        case (.bool(let a), .bool(let b)): a == b
        case (.number(let a), .number(let b)): a == b
        case (.string(let a), .string(let b)): a == b
        case (.array(let a), .array(let b)): a == b
        case (.object(let a), .object(let b)):
            a.count == b.count && zip(a, b).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
        default: false
        }
    }

    public subscript(member: String) -> JSONValue? {
        guard case .object(let members) = self else { return nil }
        return members.first(where: { $0.0 == member })?.1
    }

    public var stringValue: String? {
        if case .string(let text) = self { return text }
        return nil
    }

    public var boolValue: Bool? {
        if case .bool(let flag) = self { return flag }
        return nil
    }

    /// An integer written without fraction or exponent, within Int64.
    public var integerValue: Int? {
        if case .number(let text) = self { return Int(text) }
        return nil
    }

    public static func int(_ value: Int) -> JSONValue { .number(String(value)) }

    /// False when a string or member name holds U+0000 (PostgreSQL's text and jsonb cannot
    /// store it) or a number is beyond double range (jsonb's numeric refuses the extremes).
    public var isStorable: Bool {
        switch self {
        case .string(let text): !text.utf8.contains(0)
        case .number(let text): text.utf8.count <= 64 && (Double(text)?.isFinite ?? false)
        case .array(let items): items.allSatisfy(\.isStorable)
        case .object(let members): members.allSatisfy { !$0.0.utf8.contains(0) && $0.1.isStorable }
        default: true
        }
    }

    public static func double(_ value: Double) -> JSONValue {
        value.isFinite ? .number(String(value)) : .null
    }
}

extension JSONValue {
    /// Canonical JSON: object members sorted by the UTF-8 bytes of their names, no
    /// insignificant whitespace, numbers as given, strings with minimal escaping
    /// (`"`, `\`, and U+0000–U+001F; everything else as raw UTF-8).
    public var canonical: String {
        var out: [UInt8] = []
        write(into: &out, sortingMembers: true)
        return String(decoding: out, as: UTF8.self)
    }

    /// JSON text for responses: members in the order given (not sorted).
    public var serialized: String {
        var out: [UInt8] = []
        write(into: &out, sortingMembers: false)
        return String(decoding: out, as: UTF8.self)
    }

    /// Written as bytes, decoded once: appending to a `String` piece by piece costs several
    /// times more (a PUT's seven-member answer took 40,000 instructions that way).
    private func write(into out: inout [UInt8], sortingMembers: Bool) {
        switch self {
        case .null: out += "null".utf8
        case .bool(let flag): out += (flag ? "true" : "false").utf8
        case .number(let text): out += text.utf8
        case .string(let text): JSONText.appendString(text, to: &out)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (index, item) in items.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                item.write(into: &out, sortingMembers: sortingMembers)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            let ordered = sortingMembers ? members.sorted { $0.0.utf8.lexicographicallyPrecedes($1.0.utf8) } : members
            for (index, (name, value)) in ordered.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                JSONText.appendString(name, to: &out)
                out.append(UInt8(ascii: ":"))
                value.write(into: &out, sortingMembers: sortingMembers)
            }
            out.append(UInt8(ascii: "}"))
        }
    }
}
