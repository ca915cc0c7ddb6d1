import CacheKeys
import Foundation

/// Filling a tier at start, from the entry browser's routes (read scope; no lookup counted).
extension TeamCacheClient {
    /// Fills the local tier with the namespace's `top` most-hit entries; how many copies it kept.
    /// Bodies over 64 KiB (the browser's preview) are left to their first read.
    @discardableResult
    public func warm(namespace: String, top: Int) async throws -> Int {
        let stats = try await stats(namespace: namespace, top: top)
        guard case .array(let entries)? = stats["top"] else { throw TeamCacheClientError.malformedResponse }
        return try await warm(namespace: namespace, keys: entries.compactMap { $0["key"]?.stringValue })
    }

    /// Fills the local tier with the namespace's entries tagged `tag` (at most 10,000).
    @discardableResult
    public func warm(namespace: String, tag: String) async throws -> Int {
        var keys: [String] = []
        var after: String?
        repeat {
            var query = "tag=\(Self.queryEscaped(tag))&limit=100"
            if let after { query += "&after=\(Self.queryEscaped(after))" }
            let page = try Self.parse(try await send("GET", "/v1/caches/\(namespace)/entries?\(query)", accept: [200]).0)
            guard case .array(let entries)? = page["entries"] else { throw TeamCacheClientError.malformedResponse }
            keys += entries.compactMap { $0["key"]?.stringValue }
            after = page["next"]?.stringValue
        } while after != nil && keys.count < 10_000
        return try await warm(namespace: namespace, keys: keys)
    }

    private func warm(namespace: String, keys: [String]) async throws -> Int {
        guard let tier = localTier else { throw TeamCacheClientError.transport("warm needs a client with a localTier") }
        try await tier.waitUntilLive(namespace)
        var kept = 0
        for key in keys {
            let since = tier.mark()
            let path = "/v1/caches/\(namespace)/inspect/" + (key.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? key)
            let (data, response) = try await send("GET", path, accept: [200, 404])
            guard response.statusCode == 200, let copy = Self.inspected(try Self.parse(data)) else { continue }
            tier.keep(namespace, key, copy, since: since)
            kept += 1
        }
        return kept
    }

    static func inspected(_ json: JSONValue) -> LocalCopy? {
        guard let body = json["body"], body["kind"]?.stringValue == "text", body["truncated"]?.boolValue == false,
              let text = body["text"]?.stringValue, let ttl = json["ttl"]?.integerValue,
              let etag = json["etag"]?.stringValue else { return nil }
        let now = Date().timeIntervalSince1970
        let metadata = json["metadata"].flatMap { $0 == .null ? nil : $0.serialized }
        let isDescriptor = json["model"].map { $0 != .null } ?? false
        return LocalCopy(kind: isDescriptor ? .lookup : .raw, etag: etag, body: Data(text.utf8),
                         contentType: json["content_type"]?.stringValue ?? "application/octet-stream", metadata: metadata,
                         expiresAt: now + Double(ttl),
                         updatedAt: json["updated_at"]?.stringValue.flatMap(Self.instant) ?? now)
    }

    static func queryEscaped(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? text
    }
}

extension LocalTier {
    /// Starts following `namespace` and waits (up to `feedWait + 5` s) until it is live: copies
    /// kept before could predate the follower's cursor.
    func waitUntilLive(_ namespace: String) async throws {
        state.withLock { follow(namespace, in: &$0) }
        let deadline = Date().addingTimeInterval(feedWait + 5)
        while !isLive(namespace) && Date() < deadline { try await Task.sleep(nanoseconds: 20_000_000) }
    }
}
