/// A strict RFC 8259 parser producing `JSONValue`, with a nesting limit so hostile input
/// cannot exhaust the stack. Duplicate member names are rejected (their meaning is undefined).
public struct JSONParser {
    public struct Failure: Error, Equatable, CustomStringConvertible {
        public let message: String
        public let offset: Int
        public var description: String { "\(message) at byte \(offset)" }
    }

    public static let maxDepth = 64
    static let namesCheckedInPlace = 32

    private let bytes: [UInt8]
    private var index = 0
    private var depth = 0

    public static func parse(_ bytes: [UInt8]) throws -> JSONValue {
        var parser = JSONParser(bytes: bytes)
        parser.skipWhitespace()
        let value = try parser.parseValue()
        parser.skipWhitespace()
        guard parser.index == bytes.count else { throw parser.failure("Unexpected text after the JSON value") }
        return value
    }

    public static func parse(_ text: String) throws -> JSONValue { try parse(Array(text.utf8)) }

    private init(bytes: [UInt8]) { self.bytes = bytes }

    private func failure(_ message: String) -> Failure { Failure(message: message, offset: index) }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    private mutating func parseValue() throws -> JSONValue {
        guard index < bytes.count else { throw failure("Unexpected end of JSON") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try nested { try $0.parseObject() }
        case UInt8(ascii: "["): return try nested { try $0.parseArray() }
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): return try literal("true", .bool(true))
        case UInt8(ascii: "f"): return try literal("false", .bool(false))
        case UInt8(ascii: "n"): return try literal("null", .null)
        default: return .number(try parseNumber())
        }
    }

    private mutating func nested(_ body: (inout JSONParser) throws -> JSONValue) throws -> JSONValue {
        depth += 1
        defer { depth -= 1 }
        guard depth <= Self.maxDepth else { throw failure("JSON nested deeper than \(Self.maxDepth) levels") }
        return try body(&self)
    }

    private mutating func literal(_ word: String, _ value: JSONValue) throws -> JSONValue {
        let count = word.utf8.count
        guard index + count <= bytes.count, bytes[index..<index + count].elementsEqual(word.utf8) else {
            throw failure("Invalid literal")
        }
        index += count
        return value
    }

    private mutating func parseObject() throws -> JSONValue {
        index += 1
        var members: [(String, JSONValue)] = []
        // Names are checked against the members read so far while there are few (most
        // objects: a dump line has 21; hashing them all into a set cost more than comparing
        // small strings), in a set past that (no object costs O(n²)).
        var names: Set<String>? = nil
        skipWhitespace()
        if index < bytes.count && bytes[index] == UInt8(ascii: "}") {
            index += 1
            return .object(members)
        }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw failure("Expected a member name") }
            let name = try parseString()
            if members.count < Self.namesCheckedInPlace {
                guard !members.contains(where: { $0.0 == name }) else { throw failure("Duplicate member \"\(name)\"") }
            } else {
                if names == nil { names = Set(members.map(\.0)) }
                guard names?.insert(name).inserted == true else { throw failure("Duplicate member \"\(name)\"") }
            }
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw failure("Expected ':'") }
            index += 1
            skipWhitespace()
            members.append((name, try parseValue()))
            skipWhitespace()
            guard index < bytes.count else { throw failure("Unterminated object") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                continue
            }
            guard bytes[index] == UInt8(ascii: "}") else { throw failure("Expected ',' or '}'") }
            index += 1
            return .object(members)
        }
    }

    private mutating func parseArray() throws -> JSONValue {
        index += 1
        var items: [JSONValue] = []
        skipWhitespace()
        if index < bytes.count && bytes[index] == UInt8(ascii: "]") {
            index += 1
            return .array(items)
        }
        while true {
            skipWhitespace()
            items.append(try parseValue())
            skipWhitespace()
            guard index < bytes.count else { throw failure("Unterminated array") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                continue
            }
            guard bytes[index] == UInt8(ascii: "]") else { throw failure("Expected ',' or ']'") }
            index += 1
            return .array(items)
        }
    }

    private mutating func parseNumber() throws -> String {
        let start = index
        func digits() -> Int {
            let from = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            return index - from
        }
        if index < bytes.count && bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count else { throw failure("Invalid number") }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
        } else if digits() == 0 {
            throw failure("Invalid value")
        }
        if index < bytes.count && bytes[index] == UInt8(ascii: ".") {
            index += 1
            guard digits() > 0 else { throw failure("Invalid number fraction") }
        }
        if index < bytes.count && (bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E")) {
            index += 1
            if index < bytes.count && (bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-")) {
                index += 1
            }
            guard digits() > 0 else { throw failure("Invalid number exponent") }
        }
        return String(decoding: bytes[start..<index], as: UTF8.self)
    }

    private mutating func parseString() throws -> String {
        index += 1
        // The common string, without escapes, is read in place up to its closing quote and
        // made a String in one copy (ASCII needs no check): byte by byte into a buffer and
        // then validated, it was the largest part of an import's parsing (perf).
        let start = index
        var ascii = true
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                let text = bytes[start..<index]
                index += 1
                if ascii { return String(decoding: text, as: UTF8.self) }
                guard let text = String(validating: text, as: UTF8.self) else { throw failure("Invalid UTF-8") }
                return text
            }
            if byte == UInt8(ascii: "\\") || byte < 0x20 { break }
            if byte >= 0x80 { ascii = false }
            index += 1
        }
        // An escape or a control character (refused below): the rest byte by byte.
        var out = Array(bytes[start..<index])
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                index += 1
                guard let text = String(validating: out, as: UTF8.self) else { throw failure("Invalid UTF-8") }
                return text
            case UInt8(ascii: "\\"):
                index += 1
                try parseEscape(into: &out)
            case 0..<0x20:
                throw failure("Control character in string")
            default:
                out.append(byte)
                index += 1
            }
        }
        throw failure("Unterminated string")
    }

    private mutating func parseEscape(into out: inout [UInt8]) throws {
        guard index < bytes.count else { throw failure("Unterminated escape") }
        let byte = bytes[index]
        index += 1
        switch byte {
        case UInt8(ascii: "\""): out.append(0x22)
        case UInt8(ascii: "\\"): out.append(0x5C)
        case UInt8(ascii: "/"): out.append(0x2F)
        case UInt8(ascii: "b"): out.append(0x08)
        case UInt8(ascii: "f"): out.append(0x0C)
        case UInt8(ascii: "n"): out.append(0x0A)
        case UInt8(ascii: "r"): out.append(0x0D)
        case UInt8(ascii: "t"): out.append(0x09)
        case UInt8(ascii: "u"):
            var scalar = try parseHex4()
            if (0xD800...0xDBFF).contains(scalar) {
                guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u")
                else { throw failure("Unpaired surrogate") }
                index += 2
                let low = try parseHex4()
                guard (0xDC00...0xDFFF).contains(low) else { throw failure("Unpaired surrogate") }
                scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
            } else if (0xDC00...0xDFFF).contains(scalar) {
                throw failure("Unpaired surrogate")
            }
            guard let unicode = Unicode.Scalar(scalar) else { throw failure("Invalid escape") }
            out.append(contentsOf: Array(String(Character(unicode)).utf8))
        default:
            throw failure("Invalid escape")
        }
    }

    private mutating func parseHex4() throws -> UInt32 {
        guard index + 4 <= bytes.count else { throw failure("Short \\u escape") }
        var value: UInt32 = 0
        for byte in bytes[index..<index + 4] {
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw failure("Invalid \\u escape")
            }
            value = value << 4 | UInt32(digit)
        }
        index += 4
        return value
    }
}
