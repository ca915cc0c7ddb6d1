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
        var out = ""
        write(into: &out, sortingMembers: true)
        return out
    }

    /// JSON text for responses: members in the order given (not sorted).
    public var serialized: String {
        var out = ""
        write(into: &out, sortingMembers: false)
        return out
    }

    private func write(into out: inout String, sortingMembers: Bool) {
        switch self {
        case .null: out += "null"
        case .bool(let flag): out += flag ? "true" : "false"
        case .number(let text): out += text
        case .string(let text): Self.writeString(text, into: &out)
        case .array(let items):
            out += "["
            for (index, item) in items.enumerated() {
                if index > 0 { out += "," }
                item.write(into: &out, sortingMembers: sortingMembers)
            }
            out += "]"
        case .object(let members):
            out += "{"
            let ordered = sortingMembers ? members.sorted { $0.0.utf8.lexicographicallyPrecedes($1.0.utf8) } : members
            for (index, (name, value)) in ordered.enumerated() {
                if index > 0 { out += "," }
                Self.writeString(name, into: &out)
                out += ":"
                value.write(into: &out, sortingMembers: sortingMembers)
            }
            out += "}"
        }
    }

    static func writeString(_ text: String, into out: inout String) {
        JSONText.appendString(text, to: &out)
    }
}
