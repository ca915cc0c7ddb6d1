import CacheKeys

/// Answers and stream events that report a failure rather than an answer: never stored, even
/// with a 200 or a stream that then ends as usual (some OpenAI-compatible servers send an error
/// event and then `[DONE]`). The Python client's transport applies the same rules
/// (`teamcache._openai_stream.is_failure`).
enum AnswerFailure {
    /// A member `error` that is not null, `object: "error"`, an error or failure event, or a
    /// Responses object that did not finish (failed, cancelled, or still queued or running: a
    /// background call's first answer).
    static func reported(by document: JSONValue) -> Bool {
        guard case .object = document else { return false }
        if let error = document["error"], error != .null { return true }
        if document["object"]?.stringValue == "error" { return true }
        if let type = document["type"]?.stringValue, failedTypes.contains(type) { return true }
        guard document["object"]?.stringValue == "response", let status = document["status"]?.stringValue else {
            return false
        }
        return unfinishedStatuses.contains(status)
    }

    private static let failedTypes: Set<String> = ["error", "response.failed", "response.cancelled"]
    private static let unfinishedStatuses: Set<String> = ["failed", "cancelled", "queued", "in_progress"]
}
