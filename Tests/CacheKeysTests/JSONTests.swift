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
}
