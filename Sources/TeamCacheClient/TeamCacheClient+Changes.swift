import CacheKeys
import Foundation

/// One change of a namespace's feed, as a follower applies it (`GET /v1/caches/{ns}/changes`).
public struct CacheChange: Sendable, Equatable {
    public enum Kind: String, Sendable { case put, delete }

    /// This change's position: a follower that applied it resumes after it.
    public let cursor: String
    public let kind: Kind
    /// The key's bytes (the server sends text keys as `key`, others as `key_base64`).
    public let key: [UInt8]
    /// A put's fields.
    public let etag: String?
    public let size: Int?
    public let contentType: String?
    /// RFC 3339, UTC: after it (and `staleUntil`), a follower drops the entry by itself;
    /// expiry is not a change.
    public let expiresAt: String?
    public let staleUntil: String?
    /// With `includeBody`: the stored body (in `encoding`, identity or gzip), when the entry
    /// still held this version when the page was read.
    public let body: Data?
    public let encoding: String?

    /// The key as text, when it is UTF-8.
    public var keyText: String? { String(validating: key, as: UTF8.self) }
}

/// One page of a feed: apply `changes` in order, then ask again from `next`.
public struct CacheChangesPage: Sendable, Equatable {
    public let changes: [CacheChange]
    public let next: String
    /// More changes may follow right away (the page was cut by its limit or byte budget).
    public let more: Bool
}

extension TeamCacheClient {
    /// The namespace's committed changes after `since` (read scope). `wait` holds an empty
    /// page until the next change (up to 60 s). A cursor the feed no longer holds (older than
    /// its retention, from before a wipe, or another store's) throws `.problem(status: 410, …)`:
    /// resync from an export and follow from its `TeamCache-Changes-Cursor`.
    public func changes(namespace: String, since: String = "0", limit: Int? = nil, wait: TimeInterval? = nil,
                        includeBody: Bool = false) async throws -> CacheChangesPage {
        var query = "since=\(since.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? since)"
        if let limit { query += "&limit=\(limit)" }
        if let wait { query += "&wait=\(wait)" }
        if includeBody { query += "&include=body" }
        let (data, _) = try await send("GET", "/v1/caches/\(namespace)/changes?\(query)",
                                       headers: ["Accept-Encoding": "gzip"], accept: [200],
                                       timeout: configuration.timeout + (wait ?? 0))
        return try Self.feedPage(try Self.parse(data))
    }

    static func feedPage(_ json: JSONValue) throws -> CacheChangesPage {
        guard case .array(let items)? = json["changes"], let next = json["next"]?.stringValue,
              let more = json["more"]?.boolValue else { throw TeamCacheClientError.malformedResponse }
        return CacheChangesPage(changes: try items.map(feedChange), next: next, more: more)
    }

    private static func feedChange(_ json: JSONValue) throws -> CacheChange {
        guard let cursor = json["cursor"]?.stringValue, let kind = json["kind"]?.stringValue.flatMap(CacheChange.Kind.init)
        else { throw TeamCacheClientError.malformedResponse }
        let key: [UInt8]
        if let text = json["key"]?.stringValue {
            key = Array(text.utf8)
        } else if let encoded = json["key_base64"]?.stringValue, let bytes = Data(base64Encoded: encoded) {
            key = Array(bytes)
        } else {
            throw TeamCacheClientError.malformedResponse
        }
        return CacheChange(cursor: cursor, kind: kind, key: key, etag: json["etag"]?.stringValue,
                          size: json["size"]?.integerValue, contentType: json["content_type"]?.stringValue,
                          expiresAt: json["expires_at"]?.stringValue, staleUntil: json["stale_until"]?.stringValue,
                          body: json["body_base64"]?.stringValue.flatMap { Data(base64Encoded: $0) },
                          encoding: json["encoding"]?.stringValue)
    }
}
