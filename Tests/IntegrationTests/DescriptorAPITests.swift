import CacheCore
import Foundation
import Testing
import TestSupport

@Suite struct DescriptorAPITests {
    let service = TestService.shared
    let namespace = TestService.namespace("llm")
    let token: String

    init() throws { token = try writer(namespace) }

    func post(_ route: String, _ json: String) throws -> RawClient.Response {
        try service.request("POST", "/v1/caches/\(namespace)/\(route)", token: token, json: json)
    }

    @Test func upsertThenLookupHitsWithMetadata() throws {
        let descriptor = "\"model\":\"gpt-x\",\"prompt\":\"What is 2+2?\",\"params\":{\"temperature\":0}"
        let miss = try object(try post("lookup", "{\(descriptor)}"))
        #expect(miss["hit"] as? Bool == false)
        let key = try #require(miss["key"] as? String)
        let upsert = try post("upsert", "{\(descriptor),\"response\":\"4\",\"metadata\":{\"input_tokens\":12,"
            + "\"output_tokens\":1,\"finish_reason\":\"stop\",\"provider\":{\"id\":\"x\"}},\"tags\":[\"math\"]}")
        #expect(upsert.status == 201)
        #expect(try object(upsert)["key"] as? String == key)
        // Whitespace and CRLF around the prompt do not change the key.
        let hit = try object(try post("lookup", "{\"model\":\"gpt-x\",\"prompt\":\"\\r\\n What is 2+2?  \","
            + "\"params\":{\"temperature\":0}}"))
        #expect(hit["hit"] as? Bool == true && hit["response"] as? String == "4" && hit["stale"] as? Bool == false)
        #expect(hit["key"] as? String == key)
        let metadata = try #require(hit["metadata"] as? [String: Any])
        #expect(metadata["input_tokens"] as? Int == 12 && metadata["finish_reason"] as? String == "stop")
        // The same entry is readable as a raw entry under its key.
        let raw = try service.request("GET", entryPath(namespace, key), token: token)
        #expect(raw.text == "4" && raw.header("Content-Type") == "text/plain; charset=utf-8")
        #expect(try post("upsert", "{\(descriptor),\"response\":\"four\"}").status == 200)
    }

    @Test func refreshIsABypassAndModelMustMatch() throws {
        let body = "{\"model\":\"m-a\",\"prompt\":\"p\",\"response\":\"r\"}"
        #expect(try post("upsert", body).status == 201)
        let refreshed = try object(try post("lookup", "{\"model\":\"m-a\",\"prompt\":\"p\",\"refresh\":true}"))
        #expect(refreshed["hit"] as? Bool == false)
        #expect(try object(try post("lookup", "{\"model\":\"m-b\",\"prompt\":\"p\"}"))["hit"] as? Bool == false)
    }

    @Test func rulesForWhatIsNeverCached() throws {
        #expect(try post("upsert", "{\"model\":\"m\",\"prompt\":\"p\",\"response\":\"\"}").status == 422)
        #expect(try post("upsert", "{\"model\":\"m\",\"prompt\":\"p\",\"schema\":{\"type\":\"object\"},"
            + "\"response\":\"{not json\"}").status == 422)
        #expect(try post("upsert", "{\"model\":\"m\",\"prompt\":\"p\",\"schema\":{\"type\":\"object\"},"
            + "\"response\":\"{\\\"a\\\":1}\"}").status == 201)
        #expect(try post("upsert", "{\"prompt\":\"p\",\"response\":\"x\"}").status == 422)
        #expect(try post("upsert", "{\"model\":\"m\",\"prompt\":\"p\",\"respons\":\"x\"}").status == 422)
        #expect(try post("lookup", "{not json").status == 400)
        #expect(try post("lookup", "[1]").status == 400)
        #expect(try post("upsert", "{\"model\":\"m\",\"prompt\":\"p\",\"response\":\"x\",\"ttl\":0}").status == 422)
        #expect(try post("upsert", "{\"model\":\"m\",\"prompt\":\"p\",\"response\":\"x\",\"metadata\":"
            + "{\"input_tokens\":-1}}").status == 422)
        #expect(try object(try post("lookup", "{\"model\":\"m\",\"prompt\":\"never stored\"}"))["hit"] as? Bool
            == false)
        // Found by schemathesis: NUL in a text field reached PostgreSQL (which refuses it) as a 500.
        #expect(try post("upsert", "{\"model\":\"m\\u0000\",\"prompt\":\"p\",\"response\":\"x\"}").status == 422)
        #expect(try post("upsert", "{\"model\":\"m\",\"prompt\":\"p\",\"response\":\"x\",\"metadata\":"
            + "{\"a\":\"\\u0000\"}}").status == 422)
        #expect(try post("upsert", "{\"model\":\"m\",\"prompt\":\"p\",\"response\":\"x\",\"metadata\":"
            + "{\"n\":1e999999}}").status == 422)
        #expect(try post("upsert", "{\"model\":\"m\",\"prompt\":\"p\",\"response\":\"x\",\"tags\":[\"\\u0000\"]}")
            .status == 400)
        #expect(try post("upsert", "{\"model\":\"m\",\"prompt\":\"nul \\u0000 inside\",\"response\":\"x\"}")
            .status == 201)
    }

    @Test func messagesDescriptorsWork() throws {
        let messages = "[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":\"hello\"}]"
        #expect(try post("upsert", "{\"model\":\"m\",\"messages\":\(messages),\"response\":\"hi\"}").status == 201)
        let spaced = "[ {\"content\":\"be brief\", \"role\":\"system\"}, {\"role\":\"user\",\"content\":\"hello\"} ]"
        #expect(try object(try post("lookup", "{\"model\":\"m\",\"messages\":\(spaced)}"))["response"] as? String
            == "hi")
    }
}
