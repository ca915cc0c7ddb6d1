/// The one JSON string escaper: the canonical form descriptor keys hash (`CacheKeys`), and the
/// one logs, metrics and problem documents are written with.
///
/// Canonical means RFC 8785's string rule: `"` and `\` escaped, the control characters below
/// U+0020 as `\b \f \n \r \t` or `\u00XX` (lowercase hex), everything else as itself, never
/// escaped. Keys are hashed over this output, and the Python client writes the same
/// (clients/python/tests/vectors), so it must never change.
public enum JSONText {
    /// Appends `text` as a JSON string, quotes included.
    public static func appendString(_ text: String, to out: inout String) {
        // Most text needs no escape at all: appended whole.
        if !needsEscape(text) {
            out += "\""
            out += text
            out += "\""
        } else {
            var bytes: [UInt8] = []
            appendString(text, to: &bytes)
            out += String(decoding: bytes, as: UTF8.self)
        }
    }

    /// The same, into bytes (a dump line is written as bytes, not through a `String`).
    public static func appendString(_ text: String, to out: inout [UInt8]) {
        out.append(0x22)
        var text = text  // `withUTF8` may make a non-contiguous string contiguous in place
        text.withUTF8 { appendEscaped($0, to: &out) }
        out.append(0x22)
    }

    /// Whether any byte of `text` must be escaped.
    private static func needsEscape(_ text: String) -> Bool {
        text.utf8.contains(where: mustEscape)
    }

    /// Whether `byte` of a string's UTF-8 is escaped (`"`, `\\`, below U+0020).
    public static func mustEscape(_ byte: UInt8) -> Bool {
        byte < 0x20 || byte == 0x22 || byte == 0x5C
    }

    /// UTF-8 in, escaped UTF-8 out, runs that need no escape copied whole. Byte-wise is exact:
    /// every byte escaped is ASCII, and no byte of a multi-byte sequence is below 0x80.
    private static func appendEscaped(_ bytes: UnsafeBufferPointer<UInt8>, to out: inout [UInt8]) {
        var run = 0
        for index in bytes.indices where mustEscape(bytes[index]) {
            out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[run..<index]))
            appendEscape(of: bytes[index], to: &out)
            run = index + 1
        }
        out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[run...]))
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)

    private static func appendEscape(of byte: UInt8, to out: inout [UInt8]) {
        switch byte {
        case 0x22: out += [0x5C, 0x22]  // \"
        case 0x5C: out += [0x5C, 0x5C]  // \\
        case 0x08: out += [0x5C, UInt8(ascii: "b")]
        case 0x0C: out += [0x5C, UInt8(ascii: "f")]
        case 0x0A: out += [0x5C, UInt8(ascii: "n")]
        case 0x0D: out += [0x5C, UInt8(ascii: "r")]
        case 0x09: out += [0x5C, UInt8(ascii: "t")]
        default:  // below 0x20: \u00XX, lowercase hex
            out += [0x5C, UInt8(ascii: "u"), 0x30, 0x30, hexDigits[Int(byte >> 4)], hexDigits[Int(byte & 0x0F)]]
        }
    }
}
