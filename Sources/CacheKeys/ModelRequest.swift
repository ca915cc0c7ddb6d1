/// How a model API request is cached: the descriptor its key comes from, whether it is a
/// stream, and the body to send upstream when it differs from the caller's. The one mapping
/// from OpenAI- and Anthropic-style request bodies to descriptors, written down in
/// docs/gateway-keys.md and pinned, with the Python transport's, by the shared vectors in
/// clients/python/tests/vectors/gateway_keys.json.
public struct ModelRequest: Sendable {
    /// The API's shape.
    public enum Kind: String, Sendable, CaseIterable {
        case openai
        case anthropic
    }

    /// The endpoint relative to the upstream's base URL, as the key records it
    /// (`/chat/completions`, `/v1/messages`).
    public let endpoint: String
    public let descriptor: Descriptor
    public let stream: Bool
    /// The body to send instead of the caller's: a streamed chat completion asks for usage
    /// (`stream_options.include_usage`) so a stored stream records its tokens. Nil: as sent.
    public let upstreamBody: [UInt8]?

    /// Members that never change an answer, left out of the key (OpenAI). Not for `/responses`:
    /// a Responses object echoes each of them, so one caller's `user` or `metadata` would reach
    /// another in a hit.
    static let openAIIgnored: Set<String> = ["user", "safety_identifier", "metadata", "store", "prompt_cache_key",
                                             "prompt_cache_retention", "service_tier"]
    /// Members that never change an answer, left out of the key (Anthropic).
    static let anthropicIgnored: Set<String> = ["metadata", "service_tier"]

    /// The cached endpoints of each kind, relative to the base URL (without the leading slash).
    public static func cachedPaths(_ kind: Kind) -> [String] {
        switch kind {
        case .openai: ["chat/completions", "responses", "embeddings", "completions"]
        case .anthropic: ["v1/messages"]
        }
    }

    /// The plan of a request to `path` (relative to the base URL, no leading slash, no
    /// query), or nil when it is not cached (another path or method, a body that is not a
    /// JSON object with a `model`, a background response, a descriptor the key refuses).
    public static func plan(kind: Kind, method: String, path: String, body: [UInt8]) -> ModelRequest? {
        guard method == "POST", cachedPaths(kind).contains(path),
              let json = try? JSONParser.parse(body), case .object(let members) = json,
              case .string = json["model"] else { return nil }
        switch kind {
        case .openai: return openAI(endpoint: "/" + path, json, members)
        case .anthropic: return anthropic(endpoint: "/" + path, json, members)
        }
    }

    private static func openAI(endpoint: String, _ json: JSONValue, _ members: [(String, JSONValue)]) -> ModelRequest? {
        if let background = json["background"], truthy(background) { return nil }
        if endpoint == "/responses" && keepsServerState(json) { return nil }
        let stream = json["stream"] == .bool(true)
        let ignored = endpoint == "/responses" ? [] : openAIIgnored
        var params = members.filter { !ignored.contains($0.0) && !["model", "stream", "endpoint"].contains($0.0) }
        if !stream { params.removeAll { $0.0 == "stream_options" } }
        params.append(("endpoint", .string(endpoint)))
        if stream { params.append(("stream", .bool(true))) }
        var descriptor: [(String, JSONValue)] = [("model", json["model"]!)]
        var schema: JSONValue?
        if endpoint == "/chat/completions" {
            if let messages = take("messages", from: &params) { descriptor.append(("messages", messages)) }
            if !stream { schema = take("response_format", from: &params) }
        } else {
            let inputName = endpoint == "/completions" ? "prompt" : "input"
            switch take(inputName, from: &params) {
            // A string the key's normalising would change (whitespace at its ends, a CR) is kept
            // as sent: "hello\n" and "hello" are different inputs to a model.
            case .string(let text)? where Descriptor.normalise(prompt: text) == text:
                descriptor.append(("prompt", .string(text)))
            case .array(let items)? where endpoint == "/responses"
                && items.allSatisfy({ if case .object = $0 { true } else { false } }):
                descriptor.append(("messages", .array(items)))
            case let value? where value != .null:
                descriptor.append(("messages", .array([.object([(inputName, value)])])))
            default:
                break
            }
            if endpoint == "/responses" && !stream, let text = json["text"], case .object(let textMembers) = text,
               let format = text["format"] {
                schema = format
                let rest = textMembers.filter { $0.0 != "format" }
                params.removeAll { $0.0 == "text" }
                if !rest.isEmpty { params.append(("text", .object(rest))) }
            }
        }
        if let schema, schema != .null { descriptor.append(("schema", schema)) }
        descriptor.append(("params", .object(params)))
        guard let made = try? Descriptor(json: .object(descriptor)) else { return nil }
        let asksUsage = stream && endpoint == "/chat/completions"
        return ModelRequest(endpoint: endpoint, descriptor: made, stream: stream,
                            upstreamBody: asksUsage ? withUsage(members) : nil)
    }

    private static func anthropic(endpoint: String, _ json: JSONValue, _ members: [(String, JSONValue)]) -> ModelRequest? {
        let stream = json["stream"] == .bool(true)
        var params = members.filter {
            !anthropicIgnored.contains($0.0) && !["model", "stream", "messages", "system", "endpoint"].contains($0.0)
        }
        params.append(("endpoint", .string(endpoint)))
        if stream { params.append(("stream", .bool(true))) }
        guard case .array(var messages)? = json["messages"] else { return nil }
        // The system prompt changes the answer as much as a message does: it leads them.
        if let system = json["system"], system != .null {
            messages.insert(.object([("role", .string("system")), ("content", system)]), at: 0)
        }
        let descriptor: JSONValue = .object([("model", json["model"]!), ("messages", .array(messages)),
                                             ("params", .object(params))])
        guard let made = try? Descriptor(json: descriptor) else { return nil }
        return ModelRequest(endpoint: endpoint, descriptor: made, stream: stream, upstreamBody: nil)
    }

    /// Whether a Responses request's answer depends on state the server keeps and changes: a
    /// `conversation` (each call adds to it, and a hit would skip that), or a `prompt` template
    /// without a `version` (its current version).
    private static func keepsServerState(_ json: JSONValue) -> Bool {
        if let conversation = json["conversation"], conversation != .null { return true }
        guard let prompt = json["prompt"], case .object = prompt else { return false }
        return prompt["version"] == nil || prompt["version"] == .null
    }

    /// Removes and returns a member (a JSON `null` counts as absent, as in the Python client).
    private static func take(_ name: String, from members: inout [(String, JSONValue)]) -> JSONValue? {
        guard let index = members.firstIndex(where: { $0.0 == name }) else { return nil }
        let value = members.remove(at: index).1
        return value == .null ? nil : value
    }

    /// Python's truthiness of a JSON value (the transport tests `request.get("background")`).
    private static func truthy(_ value: JSONValue) -> Bool {
        switch value {
        case .null: false
        case .bool(let flag): flag
        case .number(let text): (Double(text) ?? 1) != 0
        case .string(let text): !text.isEmpty
        case .array(let items): !items.isEmpty
        case .object(let members): !members.isEmpty
        }
    }

    /// The streamed chat request asking for usage, or nil when the caller asked already.
    private static func withUsage(_ members: [(String, JSONValue)]) -> [UInt8]? {
        var members = members
        var options: [(String, JSONValue)] = []
        if let index = members.firstIndex(where: { $0.0 == "stream_options" }) {
            if case .object(let given) = members[index].1 {
                if given.contains(where: { $0.0 == "include_usage" && $0.1 == .bool(true) }) { return nil }
                options = given.filter { $0.0 != "include_usage" }
            }
            members.remove(at: index)
        }
        members.append(("stream_options", .object(options + [("include_usage", .bool(true))])))
        return Array(JSONValue.object(members).serialized.utf8)
    }
}
