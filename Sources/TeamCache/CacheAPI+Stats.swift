import CacheCore
import CacheKeys
import Foundation
import HTTPServer

/// `GET /v1/caches/{ns}/stats` and `GET /v1/stats`.
extension CacheAPI {
    func namespaceStats(_ request: HTTPRequest, _ principal: Authenticator.Principal) throws -> HTTPResponse {
        try stats(request, namespace: try RequestParsing.namespace(request))
    }

    func globalStats(_ request: HTTPRequest, _ principal: Authenticator.Principal) throws -> HTTPResponse {
        try stats(request, namespace: nil)
    }

    private func stats(_ request: HTTPRequest, namespace: Namespace?) throws -> HTTPResponse {
        let top = try RequestParsing.integer("top", in: try RequestParsing.query(request), 0...1000) ?? 20
        return try guarded(request) {
            let stats = try store.stats(namespace, top: top)
            return .json(200, Self.json(stats, global: namespace == nil).serialized)
        }
    }

    static func json(_ stats: CacheStats, global: Bool) -> JSONValue {
        let top = stats.top.map { entry -> JSONValue in
            var members: [(String, JSONValue)] = []
            if global { members.append(("namespace", .string(entry.namespace))) }
            members += [
                ("key", .string(EntryKey(entry.key)?.display ?? "")),
                ("prompt_digest", entry.promptDigest.map(JSONValue.string) ?? .null),
                ("model", entry.model.map(JSONValue.string) ?? .null),
                ("hit_count", .int(entry.hitCount)),
                ("last_accessed_at", .string(Timestamp.format(entry.lastAccessedAt))),
                ("writer_token_id", entry.writerTokenID.map(JSONValue.int) ?? .null),
            ]
            return .object(members)
        }
        return .object([
            ("entries", .int(stats.entries)),
            ("bytes", .object([("identity", .int(stats.identityBytes)), ("stored", .int(stats.storedBytes))])),
            ("lookups", .object([("hit", .int(stats.hits)), ("miss", .int(stats.misses)), ("stale", .int(stats.stale)),
                                 ("bypass", .int(stats.bypass)), ("collapsed", .int(stats.collapsed))])),
            ("hit_ratio", .double((stats.hitRatio * 10000).rounded() / 10000)),
            ("tokens_saved", .object([("input", .int(stats.inputTokensSaved)),
                                      ("output", .int(stats.outputTokensSaved))])),
            ("top", .array(top)),
        ])
    }
}
