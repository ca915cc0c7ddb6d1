import CacheKeys
import Cryptography
import Foundation
import Testing

@Suite struct DescriptorKeyTests {
    /// The worked example in docs/descriptor-keys.md.
    @Test func worksAsTheReadmeExample() throws {
        let json = try JSONParser.parse("""
            {"model": "gpt-4o-mini", "prompt": "  Summarise: the cat sat.\\r\\n",
             "params": {"temperature": 0.20, "max_tokens": 64}, "version": "v3"}
            """)
        let descriptor = try Descriptor(json: json)
        #expect(descriptor.input == .prompt("Summarise: the cat sat."))
        #expect(descriptor.params?.canonical == "{\"max_tokens\":64,\"temperature\":0.20}")
        let encoded = Bytes.hex(descriptor.encodedFields)
        #expect(encoded.hasPrefix("01" + "0000000000000017" + Bytes.hex(Array("teamcache.descriptor.v1".utf8))))
        #expect(descriptor.key == DescriptorKeyTests.readmeKey)
    }

    /// Computed by an independent Python implementation of the rules in docs/descriptor-keys.md and printed in
    /// that page; a change here breaks every client, so it must never change silently.
    static let readmeKey = "b180f665da9a11fdd29fde3316ed9813f26936c6747a9497493906194df7b02e"

    /// The vectors the Python client's tests pin too (clients/python/tests/vectors).
    @Test func sharedVectorsMatch() throws {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("clients/python/tests/vectors/descriptor_keys.json")
        let file = try JSONParser.parse(Array(try Data(contentsOf: url)))
        guard case .array(let vectors)? = file["vectors"] else {
            Issue.record("no vectors in \(url.path)")
            return
        }
        #expect(vectors.count >= 15)
        for vector in vectors {
            let text = try #require(vector["descriptor"]?.stringValue)
            let descriptor = try Descriptor(json: JSONParser.parse(text))
            #expect(descriptor.key == vector["key"]?.stringValue, "\(text)")
        }
    }

    @Test func equivalentDescriptorsShareAKey() throws {
        let a = try Descriptor(json: JSONParser.parse(
            "{\"model\":\"m\",\"prompt\":\"hi\\r\\nthere \",\"params\":{\"b\":1,\"a\":[1.0,\"x\"]}}"))
        let b = try Descriptor(json: JSONParser.parse(
            "{\"params\":{\"a\":[1.0, \"x\"],\"b\":1},\"prompt\":\"\\n hi\\nthere\",\"model\":\"m\"}"))
        #expect(a.key == b.key)
    }

    @Test func differentDescriptorsDiffer() throws {
        let base = "{\"model\":\"m\",\"prompt\":\"p\"}"
        let variants = [
            "{\"model\":\"m2\",\"prompt\":\"p\"}",
            "{\"model\":\"m\",\"prompt\":\"p2\"}",
            "{\"model\":\"m\",\"prompt\":\"p\",\"version\":\"\"}",
            "{\"model\":\"m\",\"prompt\":\"p\",\"params\":{}}",
            "{\"model\":\"m\",\"prompt\":\"p\",\"schema\":{}}",
            "{\"model\":\"m\",\"prompt\":\"p\",\"params\":{\"t\":1.0}}",
            "{\"model\":\"m\",\"prompt\":\"p\",\"params\":{\"t\":1}}",
            "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"p\"}]}",
        ]
        var keys = Set([try Descriptor(json: JSONParser.parse(base)).key])
        for variant in variants { keys.insert(try Descriptor(json: JSONParser.parse(variant)).key) }
        #expect(keys.count == variants.count + 1)
    }

    @Test func lengthPrefixesPreventAmbiguousJoins() throws {
        // With a plain "a::b" join these two would collide.
        let a = Descriptor(model: "m::x", input: .prompt("y"))
        let b = Descriptor(model: "m", input: .prompt("x::y"))
        #expect(a.key != b.key)
    }

    @Test func invalidDescriptorsAreRejected() throws {
        for text in ["{\"prompt\":\"p\"}", "{\"model\":\"\",\"prompt\":\"p\"}", "{\"model\":\"m\"}",
                     "{\"model\":\"m\",\"prompt\":\"p\",\"messages\":[{}]}", "{\"model\":\"m\",\"messages\":[]}",
                     "{\"model\":\"m\",\"messages\":[1]}", "{\"model\":\"m\",\"prompt\":\"p\",\"params\":[1]}",
                     "{\"model\":\"m\",\"prompt\":3}"] {
            #expect(throws: DescriptorError.self, "\(text)") { try Descriptor(json: JSONParser.parse(text)) }
        }
    }

    @Test func promptDigestIsFirst200Characters() {
        let long = String(repeating: "é", count: 300)
        #expect(Descriptor(model: "m", input: .prompt(long)).promptDigest.count == 200)
        let messages = JSONValue.array([.object([("role", .string("user")), ("content", .string("question"))])])
        #expect(Descriptor(model: "m", input: .messages(messages)).promptDigest == "question")
    }
}
