import CacheCore
import CacheKeys
import Foundation
import HTTPServer

/// `POST /v1/caches/{ns}/evict`: delete by predicate, fields AND-combined.
extension CacheAPI {
    static let evictMembers: Set<String> = ["keys", "tag", "model", "version", "created_before", "accessed_before",
                                             "older_than", "idle_for", "all"]

    func evict(_ request: HTTPRequest, _ context: RequestContext) throws -> HTTPResponse {
        let namespace = try context.namespace
        let json = try RequestParsing.jsonObject(request)
        // An unknown member is a 400 here: a misspelt predicate would evict more than meant.
        try RequestParsing.rejectUnknownMembers(json, allowed: Self.evictMembers, status: 400)
        let predicate = try Self.predicate(json)
        guard predicate.isRestrictive else {
            throw HTTPError(400, "Give at least one predicate; wiping a namespace needs `\"all\": true`.")
        }
        return try guarded(request) {
            // Batches may have committed even if a later one fails: the namespace's kept copies go.
            let evicted = try store.evict(namespace, predicate)
            eviction?.recordManual(entries: evicted.entries, bytes: evicted.bytes)
            var response = HTTPResponse.json(200, JSONValue.object([("evicted", .int(evicted.entries))]).serialized)
            stampAfterCommit(&response)
            return response
        }
    }

    static func predicate(_ json: JSONValue) throws -> EvictionPredicate {
        var predicate = EvictionPredicate()
        if let keys = json["keys"] {
            guard case .array(let items) = keys else { throw HTTPError(400, "`keys` must be an array of strings.") }
            predicate.keys = try items.map { item in
                guard let text = item.stringValue, let key = EntryKey(Array(text.utf8)) else {
                    throw HTTPError(400, "Each of `keys` must be a string of 1 to 512 bytes without NUL.")
                }
                return key.bytes
            }
        }
        predicate.tag = try string(json, "tag")
        predicate.model = try string(json, "model")
        predicate.version = try string(json, "version")
        predicate.createdBefore = try date(json, "created_before")
        predicate.accessedBefore = try date(json, "accessed_before")
        predicate.olderThan = try seconds(json, "older_than")
        predicate.idleFor = try seconds(json, "idle_for")
        if let all = json["all"] {
            guard all.boolValue == true else { throw HTTPError(400, "`all` may only be true.") }
            predicate.all = true
        }
        return predicate
    }

    private static func string(_ json: JSONValue, _ name: String) throws -> String? {
        guard let value = json[name] else { return nil }
        guard let text = value.stringValue, !text.isEmpty, !text.utf8.contains(0) else {
            throw HTTPError(400, "`\(name)` must be a non-empty string without NUL.")
        }
        return text
    }

    private static func date(_ json: JSONValue, _ name: String) throws -> Date? {
        guard let value = json[name] else { return nil }
        guard let date = value.stringValue.flatMap(RFC3339.parse) else {
            throw HTTPError(400, "`\(name)` must be an RFC 3339 timestamp, e.g. 2026-11-29T12:00:00Z.")
        }
        return date
    }

    /// 100 years: beyond it a cut-off would leave PostgreSQL's timestamp range.
    static let maxAgeSeconds = 3_153_600_000

    private static func seconds(_ json: JSONValue, _ name: String) throws -> Int? {
        guard let value = json[name] else { return nil }
        guard let number = value.integerValue, (0...maxAgeSeconds).contains(number) else {
            throw HTTPError(400, "`\(name)` must be a whole number of seconds from 0 to \(maxAgeSeconds).")
        }
        return number
    }
}
