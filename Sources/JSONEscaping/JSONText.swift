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
        out += "\""
        // Most text needs no escape at all: appended whole.
        if !text.utf8.contains(where: { $0 < 0x20 || $0 == 0x22 || $0 == 0x5C }) {
            out += text
        } else {
            appendEscaped(text, to: &out)
        }
        out += "\""
    }

    /// The same, into bytes (a dump line is written as bytes, not through a `String`).
    public static func appendString(_ text: String, to out: inout [UInt8]) {
        out.append(0x22)
        if !text.utf8.contains(where: { $0 < 0x20 || $0 == 0x22 || $0 == 0x5C }) {
            out.append(contentsOf: text.utf8)
        } else {
            var escaped = ""
            appendEscaped(text, to: &escaped)
            out.append(contentsOf: escaped.utf8)
        }
        out.append(0x22)
    }

    private static func appendEscaped(_ text: String, to out: inout String) {
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\u{08}": out += "\\b"
            case "\u{0C}": out += "\\f"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20:
                out += scalar.value < 0x10 ? "\\u000" : "\\u00"
                out += String(scalar.value, radix: 16)
            default: out.unicodeScalars.append(scalar)
            }
        }
    }
}
