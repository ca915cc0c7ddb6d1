import CacheKeys
import Cryptography
import Foundation
import Testing

@Suite struct JSONTests {
    @Test func canonicalFormSortsKeysAndKeepsNumbers() throws {
        let value = try JSONParser.parse(" { \"b\" : [1.50, -0, 2e10], \"a\": \"\\u00e9\\n\\/\", \"\\u00e0\": null } ")
        #expect(value.canonical == "{\"a\":\"é\\n/\",\"b\":[1.50,-0,2e10],\"à\":null}")
    }

    @Test func rejectsWhatIsNotJSON() {
        for text in ["", "{", "{\"a\":1,}", "[1 2]", "01", "1.", "\"\\x\"", "{\"a\":1,\"a\":2}", "nul", "\"\u{1}\"",
                     "\"\\ud800\"", String(repeating: "[", count: 100) + String(repeating: "]", count: 100)] {
            #expect(throws: JSONParser.Failure.self, "\(text)") { try JSONParser.parse(text) }
        }
    }

    @Test func surrogatePairsDecode() throws {
        #expect(try JSONParser.parse("\"\\ud83d\\ude00\"") == .string("😀"))
    }

    /// Strings are read in place when they have no escape; the result is the byte-by-byte
    /// reading's, kept here as the reference: random strings of ASCII, multi-byte UTF-8,
    /// invalid bytes, control characters, escapes (surrogates among them) and stray quotes.
    @Test func stringsReadInPlaceAsByteByByte() {
        func reference(_ bytes: [UInt8]) -> String? {  // bytes after the opening quote
            var out: [UInt8] = [], index = 0
            func hex4() -> UInt32? {
                guard index + 4 <= bytes.count, let value = UInt32(String(decoding: bytes[index..<index + 4], as: UTF8.self),
                                                                   radix: 16),
                      bytes[index..<index + 4].allSatisfy({ $0 != UInt8(ascii: "+") && $0 != UInt8(ascii: "-") })
                else { return nil }
                index += 4
                return value
            }
            while index < bytes.count {
                let byte = bytes[index]
                index += 1
                switch byte {
                case 0x22: return index == bytes.count ? String(validating: out, as: UTF8.self) : nil
                case 0x5C:
                    guard index < bytes.count else { return nil }
                    let escape = bytes[index]
                    index += 1
                    let simple: [UInt8: UInt8] = [0x22: 0x22, 0x5C: 0x5C, 0x2F: 0x2F, 0x62: 0x08, 0x66: 0x0C, 0x6E: 0x0A,
                                                  0x72: 0x0D, 0x74: 0x09]
                    if let plain = simple[escape] { out.append(plain); continue }
                    guard escape == UInt8(ascii: "u"), var scalar = hex4() else { return nil }
                    if (0xD800...0xDBFF).contains(scalar) {
                        guard index + 1 < bytes.count, bytes[index] == 0x5C, bytes[index + 1] == UInt8(ascii: "u") else { return nil }
                        index += 2
                        guard let low = hex4(), (0xDC00...0xDFFF).contains(low) else { return nil }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(scalar) {
                        return nil
                    }
                    guard let unicode = Unicode.Scalar(scalar) else { return nil }
                    out.append(contentsOf: Array(String(Character(unicode)).utf8))
                case 0..<0x20: return nil
                default: out.append(byte)
                }
            }
            return nil
        }
        let pieces: [[UInt8]] = [Array("a".utf8), Array("Z9 ".utf8), Array("é".utf8), Array("😀".utf8), [0xFF], [0xC3],
                                 [0x80], [0x01], [0x1F], [0x7F], Array("\\".utf8), Array("\\n".utf8), Array("\\\"".utf8),
                                 Array("\\/".utf8), Array("\\u00e9".utf8), Array("\\ud83d\\ude00".utf8),
                                 Array("\\ud800".utf8), Array("\\udc00".utf8), Array("\\x".utf8), Array("\\u12".utf8),
                                 Array("\"".utf8)]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<50_000 {
            var content: [UInt8] = []
            for _ in 0..<Int.random(in: 0...12, using: &generator) {
                content += pieces.randomElement(using: &generator)!
            }
            let closed = Bool.random(using: &generator) || content.isEmpty
            let text = [0x22] + content + (closed ? [0x22] : [])
            let parsed: String?
            if case .string(let value)? = try? JSONParser.parse(text) { parsed = value } else { parsed = nil }
            #expect(parsed == reference(Array(text.dropFirst())), "\(text)")
        }
    }

    /// Duplicate names are refused whether an object has few members (checked in place) or
    /// many (checked in a set from the 33rd on), wherever the repeat falls.
    @Test func duplicateNamesAreRefusedInSmallAndLargeObjects() throws {
        for count in [1, 2, 15, 16, 17, 31, 32, 33, 80] {
            let names = (0..<count).map { "\"m\($0)\"" }
            #expect(throws: Never.self) { try JSONParser.parse("{" + names.map { "\($0):1" }.joined(separator: ",") + "}") }
            for repeated in Set([0, count / 2, count - 1]) {
                for position in Set([1, count / 2, count]) where position > repeated {
                    var members = names
                    members.insert(names[repeated], at: position)
                    let text = "{" + members.map { "\($0):1" }.joined(separator: ",") + "}"
                    #expect(throws: JSONParser.Failure.self, "\(text)") { try JSONParser.parse(text) }
                }
            }
        }
    }
}
