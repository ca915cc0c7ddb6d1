import CacheCore
import CacheKeys
import CacheStore
import Foundation
import HTTPServer

/// `GET /v1/caches/{ns}/stats` and `GET /v1/stats`.
extension CacheAPI {
    /// Read scope sees keys, models and hit counts of the top entries; who wrote them
    /// (`writer_token_id`) and what was asked (`prompt_digest`) only an admin of the namespace.
    func namespaceStats(_ request: HTTPRequest, _ context: RequestContext) throws -> HTTPResponse {
        let namespace = try context.namespace
        return try stats(request, namespace: namespace, detailed: context.principal.token?.administers(namespace) ?? true)
    }

    func globalStats(_ request: HTTPRequest, _ context: RequestContext) throws -> HTTPResponse {
        try stats(request, namespace: nil, detailed: true)
    }

    /// Most namespaces `GET /v1/caches` lists (name order; `truncated` says when there are more).
    static let maxListed = 10_000

    /// `GET /v1/caches`: the namespaces the token may read, each with its totals (a dashboard's
    /// overview). A token that may read none is 403; with auth off, every namespace.
    func listCaches(_ request: HTTPRequest, _ principal: Authenticator.Principal) throws -> HTTPResponse {
        _ = try RequestParsing.query(request)
        let pattern: String
        if let token = principal.token {
            guard token.scopes.contains(.read) || token.scopes.contains(.admin) else {
                throw HTTPError(403, "This token may read no namespace.")
            }
            pattern = token.namespacePattern
        } else {
            pattern = "*"
        }
        return try guarded(request) {
            let listed = try store.cacheTotals(matching: pattern, limit: Self.maxListed + 1)
            let caches = listed.prefix(Self.maxListed).map { namespace, stats -> JSONValue in
                var members: [(String, JSONValue)] = [("namespace", .string(namespace))]
                if case .object(let totals) = Self.json(stats, global: false, detailed: false) {
                    members += totals.filter { !["top", "leases", "encrypted"].contains($0.0) }
                }
                return .object(members)
            }
            // What the token may do, so a dashboard offers only what will work (auth off: null).
            let scopes = principal.token.map { token in
                JSONValue.object([("scopes", .array(Scope.allCases.filter(token.scopes.contains).map { .string($0.rawValue) })),
                                  ("namespaces", .string(token.namespacePattern))])
            } ?? .null
            return .json(200, JSONValue.object([("caches", .array(Array(caches))),
                                                ("truncated", .bool(listed.count > Self.maxListed)),
                                                ("token", scopes)]).serialized)
        }
    }

    private func stats(_ request: HTTPRequest, namespace: Namespace?, detailed: Bool) throws -> HTTPResponse {
        let top = try RequestParsing.integer("top", in: try RequestParsing.query(request), 0...1000) ?? 20
        return try guarded(request) {
            let stats = try store.stats(namespace, top: top)
            return .json(200, Self.json(stats, global: namespace == nil, detailed: detailed).serialized)
        }
    }

    static func json(_ stats: CacheStats, global: Bool, detailed: Bool) -> JSONValue {
        let top = stats.top.map { entry -> JSONValue in
            var members: [(String, JSONValue)] = []
            if global { members.append(("namespace", .string(entry.namespace))) }
            members += [
                ("key", .string(EntryKey(entry.key)?.display ?? "")),
                ("key_path", .string(EntryKey(entry.key)?.pathSegment ?? "")),
                ("model", entry.model.map(JSONValue.string) ?? .null),
                ("hit_count", .int(entry.hitCount)),
                ("last_accessed_at", .string(RFC3339.format(entry.lastAccessedAt))),
            ]
            if detailed {
                members += [("prompt_digest", entry.promptDigest.map(JSONValue.string) ?? .null),
                            ("writer_token_id", entry.writerTokenID.map(JSONValue.int) ?? .null)]
            }
            return .object(members)
        }
        return .object([
            ("entries", .int(stats.entries)),
            ("bytes", .object([("identity", .int(stats.identityBytes)), ("stored", .int(stats.storedBytes))])),
            ("lookups", .object([("hit", .int(stats.hits)), ("miss", .int(stats.misses)), ("stale", .int(stats.stale)),
                                 ("bypass", .int(stats.bypass)), ("collapsed", .int(stats.collapsed)),
                                 ("local", .int(stats.localHits))])),
            ("hit_ratio", .double((stats.hitRatio * 10000).rounded() / 10000)),
            ("tokens_saved", .object([("input", .int(stats.inputTokensSaved)),
                                      ("output", .int(stats.outputTokensSaved))])),
            ("cost_saved", .double(Self.money(stats.costSavedNanos))),
            ("writes", .int(stats.writes)),
            ("evictions", .int(stats.evictions)),
            ("leases", .object([("held", .int(stats.leasesHeld))])),
            ("top", .array(top)),
        ] + (global ? [] : [("encrypted", .bool(stats.encrypted))]))
    }

    /// Billionths of the currency as an amount, to the millionth (a hit on a small model can
    /// save a few millionths; more digits would be noise from the price's own rounding).
    static func money(_ nanos: Int) -> Double { (Double(nanos) / 1000).rounded() / 1_000_000 }
}
