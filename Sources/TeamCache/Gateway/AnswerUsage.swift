import CacheKeys

/// The tokens and finish reason of a model answer (a JSON document or one stream event),
/// stored with the entry so every hit counts the tokens it saved.
struct AnswerUsage: Sendable, Equatable {
    var inputTokens: Int?
    var outputTokens: Int?
    var finishReason: String?

    /// What `document` says, over what is known already (later events refine earlier ones).
    mutating func read(_ document: JSONValue) {
        guard case .object = document else { return }
        // Anthropic streams: message_start carries the input, message_delta the output and reason.
        if let message = document["message"], case .object = message { read(message) }
        if let response = document["response"], case .object = response, document["type"]?.stringValue == "response.completed" {
            read(response)
        }
        if let usage = document["usage"], case .object = usage {
            if let input = (usage["prompt_tokens"] ?? usage["input_tokens"])?.integerValue { inputTokens = input }
            if let output = (usage["completion_tokens"] ?? usage["output_tokens"])?.integerValue { outputTokens = output }
        }
        if case .array(let choices)? = document["choices"], let first = choices.first,
           let reason = first["finish_reason"]?.stringValue {
            finishReason = reason
        }
        if document["object"]?.stringValue == "response", let status = document["status"]?.stringValue {
            finishReason = status
        }
        if let reason = (document["stop_reason"] ?? document["delta"]?["stop_reason"])?.stringValue {
            finishReason = reason
        }
    }

    /// The entry's metadata object: tokens, finish reason, and how to replay it.
    func metadata(contentType: String, endpoint: String) -> JSONValue {
        var members: [(String, JSONValue)] = []
        if let inputTokens { members.append(("input_tokens", .int(inputTokens))) }
        if let outputTokens { members.append(("output_tokens", .int(outputTokens))) }
        if let finishReason { members.append(("finish_reason", .string(finishReason))) }
        members.append(("content_type", .string(contentType)))
        members.append(("endpoint", .string(endpoint)))
        return .object(members)
    }
}
