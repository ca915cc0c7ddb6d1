import CacheKeys

/// Reads a streamed answer (server-sent events) as it passes: whether it completed (`[DONE]`,
/// `response.completed`, `message_stop`), the usage it reported, and — when the gateway asked
/// for usage the caller did not — the usage-only event taken out of what is relayed and stored.
///
/// Parts pass through as they come unless events are filtered, when whole events pass as each
/// completes. What `feed` returns is exactly what the caller reads and what a hit replays.
struct StreamRecorder {
    /// Held at most while looking for an event's end; past it the stream cannot be read as
    /// events, passes unfiltered and is not stored.
    static let maxEventBytes = 1 << 20

    /// Take out the usage-only chat completion chunk (`choices: []` with `usage`).
    let stripsUsage: Bool
    private(set) var usage = AnswerUsage()
    private(set) var complete = false
    /// The stream could not be read as events (an event past the bound): never stored.
    private(set) var unreadable = false
    /// An event reported an error (`{"error": …}` mid-stream, as vLLM and others send before
    /// `[DONE]`, or `response.failed`, or Anthropic's `error` event): never stored.
    private(set) var failed = false
    private var pending: [UInt8] = []

    init(stripsUsage: Bool) {
        self.stripsUsage = stripsUsage
    }

    /// What of `part` goes to the caller now: the part itself, or (filtering) the events it
    /// completed, without the usage-only one.
    mutating func feed(_ part: [UInt8]) -> [UInt8] {
        if unreadable { return part }
        pending += part
        var filtered: [UInt8] = []
        var start = 0
        while let end = Self.eventEnd(in: pending, from: start) {
            let event = pending[start..<end]
            if !inspect(event) && stripsUsage { filtered += event }
            start = end
        }
        pending.removeFirst(start)
        if pending.count > Self.maxEventBytes {
            unreadable = true
            if stripsUsage { filtered += pending }
            pending = []
        }
        return stripsUsage ? filtered : part
    }

    /// The end of the stream: what is left to relay (an unterminated last event).
    mutating func finish() -> [UInt8] {
        defer { pending = [] }
        if !pending.isEmpty && !unreadable { _ = inspect(pending[...]) }
        return stripsUsage ? pending : []
    }

    /// Reads one event; true when it is the usage-only chunk asked for by the gateway.
    private mutating func inspect(_ event: ArraySlice<UInt8>) -> Bool {
        var usageOnly = false
        for line in event.split(whereSeparator: { $0 == 0x0A || $0 == 0x0D }) where line.starts(with: Self.dataPrefix) {
            var data = line.dropFirst(Self.dataPrefix.count)
            if data.first == 0x20 { data = data.dropFirst() }
            if data.elementsEqual(Self.done) {
                complete = true
                continue
            }
            guard Self.mayMatter(data), let document = try? JSONParser.parse(Array(data)) else { continue }
            usage.read(document)
            // An answer cut by its token limit is complete as the non-streamed one is (stored,
            // with its reason); an error is not an answer.
            switch document["type"]?.stringValue {
            case "response.completed", "response.incomplete", "message_stop": complete = true
            default: break
            }
            if AnswerFailure.reported(by: document) { failed = true }
            if case .array(let choices)? = document["choices"], choices.isEmpty, case .object? = document["usage"] {
                usageOnly = true
            }
        }
        return usageOnly
    }

    private static let dataPrefix = Array("data:".utf8)
    private static let done = Array("[DONE]".utf8)
    /// Every word `AnswerFailure` reads is here: an event without one cannot report a failure.
    private static let markers = ["usage", "finish_reason", "stop_reason", "response.completed", "response.incomplete",
                                  "failed", "cancelled", "message_stop", "error", "queued", "in_progress"]
        .map { Array($0.utf8) }

    /// Whether an event's data may carry usage, a reason or the end (most carry a few words
    /// of text and are not parsed).
    private static func mayMatter(_ data: ArraySlice<UInt8>) -> Bool {
        markers.contains { marker in
            data.count >= marker.count && data.indices.dropLast(marker.count - 1).contains { start in
                data[start..<(start + marker.count)].elementsEqual(marker)
            }
        }
    }

    /// The index just past the blank line ending the event that starts at `start`, if any
    /// (`\n\n`, `\r\n\r\n` or `\r\r`).
    static func eventEnd(in bytes: [UInt8], from start: Int) -> Int? {
        var index = start
        while index + 1 < bytes.count {
            let byte = bytes[index]
            if byte == 0x0A && bytes[index + 1] == 0x0A { return index + 2 }
            if byte == 0x0D && bytes[index + 1] == 0x0D { return index + 2 }
            if byte == 0x0D && index + 3 < bytes.count && bytes[index + 1] == 0x0A && bytes[index + 2] == 0x0D
                && bytes[index + 3] == 0x0A {
                return index + 4
            }
            index += 1
        }
        return nil
    }
}
