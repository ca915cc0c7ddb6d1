import CacheCore
import CacheKeys
import CacheStore
import Foundation
import HTTPServer

/// `POST /v1/caches/{ns}/hits` (read scope): hits a client's local tier answered without
/// asking, reported in batches, so `/stats`, the history and the dashboard count them as the
/// hits (and the tokens and money saved) they were, marked `local`.
///
/// `{"hits": [{"key": "…", "count": N}, …]}` → `{"counted": C, "unknown": U}`: hits on keys
/// the namespace no longer holds (evicted or deleted since) are `unknown`, not counted: what
/// they saved cannot be priced. A reader could always have made the same hits by asking, so
/// the scope is `read`; the bounds keep one report cheap.
extension CacheAPI {
    static let maxReportedKeys = 1000
    static let maxReportedHits = 1_000_000

    func reportLocalHits(_ request: HTTPRequest, _ context: RequestContext) throws -> HTTPResponse {
        let namespace = try context.namespace
        let counts = try Self.reportedHits(try RequestParsing.jsonObject(request))
        let now = clock.now()
        var counted = 0
        for entry in try store.hitSubjects(namespace, Array(counts.keys)) {
            guard let key = EntryKey(entry.key), let count = counts[key] else { continue }
            tracker.recordLocal(namespace: namespace.name, entry: entry, count: count, at: now)
            counted += count
        }
        let reported = counts.values.reduce(0, +)
        return .json(200, JSONValue.object([("counted", .int(counted)), ("unknown", .int(reported - counted))]).serialized)
    }

    /// The report's counts by key (a key named twice is summed), or a `422` naming what is wrong.
    static func reportedHits(_ json: JSONValue) throws -> [EntryKey: Int] {
        try RequestParsing.rejectUnknownMembers(json, allowed: ["hits"])
        guard case .array(let items)? = json["hits"] else {
            throw HTTPError(422, "`hits` must be an array of {\"key\", \"count\"} objects.")
        }
        guard items.count <= maxReportedKeys else {
            throw HTTPError(422, "A report holds at most \(maxReportedKeys) keys; send more in several.")
        }
        var counts: [EntryKey: Int] = [:]
        var total = 0
        for (index, item) in items.enumerated() {
            guard case .object = item else { throw HTTPError(422, "`hits[\(index)]` must be an object.") }
            try RequestParsing.rejectUnknownMembers(item, allowed: ["key", "count"])
            guard let text = item["key"]?.stringValue, let key = EntryKey(Array(text.utf8)) else {
                throw HTTPError(422, "`hits[\(index)].key` must be a key of 1 to \(EntryKey.maxBytes) bytes without NUL.")
            }
            guard let count = item["count"]?.integerValue, (1...maxReportedHits).contains(count) else {
                throw HTTPError(422, "`hits[\(index)].count` must be an integer from 1 to \(maxReportedHits).")
            }
            total += count
            guard total <= maxReportedHits else {
                throw HTTPError(422, "A report counts at most \(maxReportedHits) hits; send more in several.")
            }
            counts[key, default: 0] += count
        }
        return counts
    }
}
