import Foundation
import JSONEscaping
import Testing

/// The one escaper: its canonical form pinned (descriptor keys hash it), and every string it
/// writes read back as the same text by a JSON parser.
@Suite struct JSONTextTests {
    static func escaped(_ text: String) -> String {
        var out = ""
        JSONText.appendString(text, to: &out)
        return out
    }

    @Test func theCanonicalFormIsPinned() {
        #expect(Self.escaped("plain é 😀") == "\"plain é 😀\"")
        #expect(Self.escaped("q\"b\\") == #""q\"b\\""#)
        #expect(Self.escaped("\u{08}\u{0C}\n\r\t") == #""\b\f\n\r\t""#)
        #expect(Self.escaped("\u{00}\u{01}\u{0F}\u{10}\u{1F}\u{7F}") == "\"\\u0000\\u0001\\u000f\\u0010\\u001f\u{7F}\"")
        #expect(Self.escaped("/") == "\"/\"")  // never escaped
    }

    @Test func everyStringReadsBackAsItself() throws {
        var generator = SystemRandomNumberGenerator()
        // No U+FEFF: Foundation's parser drops it from inside strings (a parser quirk; the
        // escaper writes it as itself, as canonical JSON must).
        let alphabet: [Unicode.Scalar] = (0..<0x80).compactMap(Unicode.Scalar.init) + ["é", "\u{2028}", "😀"]
        for _ in 0..<2000 {
            var text = ""
            for _ in 0..<Int.random(in: 0..<24, using: &generator) {
                text.unicodeScalars.append(alphabet.randomElement(using: &generator)!)
            }
            let json = Self.escaped(text)
            let parsed = try JSONSerialization.jsonObject(with: Data(json.utf8), options: .fragmentsAllowed)
            #expect(parsed as? String == text, "\(json)")
        }
    }

    /// The escaper as first written, a scalar at a time: the byte-wise one must write exactly
    /// this (keys are hashed over it), into a `String` and into bytes alike.
    static func reference(_ text: String) -> String {
        var out = "\""
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
        return out + "\""
    }

    @Test func bytesAndTextAreWrittenAsTheScalarEscaperWroteThem() {
        var generator = SystemRandomNumberGenerator()
        let alphabet: [Unicode.Scalar] = (0..<0x80).compactMap(Unicode.Scalar.init)
            + ["é", "\u{2028}", "\u{FEFF}", "😀", "\u{10FFFF}", "中"]
        for _ in 0..<20000 {
            var text = ""
            for _ in 0..<Int.random(in: 0..<40, using: &generator) {
                text.unicodeScalars.append(alphabet.randomElement(using: &generator)!)
            }
            var bytes: [UInt8] = [0x41]  // appended after what is there
            JSONText.appendString(text, to: &bytes)
            let expected = Self.reference(text)
            #expect(Self.escaped(text) == expected)
            #expect(bytes == [0x41] + Array(expected.utf8), "\(expected)")
        }
        // A bridged or otherwise non-native string is read the same.
        let bridged = NSString(string: "a\"b\u{01}é") as String
        #expect(Self.escaped(bridged) == Self.reference(bridged))
    }
}
