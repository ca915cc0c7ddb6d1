import CacheCore
import CacheKeys
import Cryptography
import Foundation
import HTTPServer

/// The entry browser's routes (read scope), for the dashboard and for people with curl:
/// `GET /v1/caches/{ns}/entries?prefix=&tag=&model=&after=&limit=` lists entries in key
/// order (a page may be short and still have a `next`: each reads a bounded run of keys); `GET /v1/caches/{ns}/inspect/{key}` shows one with a preview of its body. Looking
/// is not a lookup: neither counts a hit or a miss, nor moves an entry's last access.
extension CacheAPI {
    /// The most of a body `inspect` shows: a preview, not a download (GET the entry for that).
    static let previewBytes = 64 * 1024

    func listEntries(_ request: HTTPRequest, _ context: RequestContext) throws -> HTTPResponse {
        let namespace = try context.namespace
        let items = try RequestParsing.query(request)
        if let unknown = items.keys.first(where: { !["prefix", "tag", "model", "after", "limit"].contains($0) }) {
            throw HTTPError(400, "Unknown query parameter \"\(unknown)\" (known: prefix, tag, model, after, limit).")
        }
        var query = EntryQuery()
        query.limit = try RequestParsing.integer("limit", in: items, 1...EntryQuery.maxLimit) ?? 50
        query.prefix = try items["prefix"].map { prefix in
            guard (1...EntryKey.maxBytes).contains(prefix.utf8.count), !prefix.utf8.contains(0) else {
                throw HTTPError(400, "`prefix` must be 1 to \(EntryKey.maxBytes) bytes without NUL.")
            }
            return Array(prefix.utf8)
        }
        query.tag = try items["tag"].map(RequestParsing.tag)
        query.model = try items["model"].map { model in
            guard (1...256).contains(model.utf8.count), !model.utf8.contains(0) else {
                throw HTTPError(400, "`model` must be 1 to 256 bytes without NUL.")
            }
            return model
        }
        query.after = try items["after"].map { hex in
            guard hex.utf8.count <= 2 * EntryKey.maxBytes, let bytes = Bytes.fromHex(hex), EntryKey(bytes) != nil else {
                throw HTTPError(400, "`after` must be a page's `next` (a key in hex).")
            }
            return bytes
        }
        return try guarded(request) {
            let page = try store.listEntries(namespace, query)
            let now = clock.now()
            return .json(200, JSONValue.object([
                ("entries", .array(page.entries.map { .object(Self.members($0, now: now)) })),
                ("next", page.next.map { .string(Bytes.hex($0)) } ?? .null),
            ]).serialized)
        }
    }

    func inspectEntry(_ request: HTTPRequest, _ context: RequestContext) throws -> HTTPResponse {
        let namespace = try context.namespace, key = try context.key
        _ = try RequestParsing.query(request)
        return try guarded(request) {
            var query = EntryQuery()
            query.prefix = key.bytes
            query.limit = 1
            guard let listing = try store.listEntries(namespace, query).entries.first, listing.key == key.bytes,
                  let entry = try store.fetch(namespace, key) else {
                throw HTTPError(404, "No entry under this key.")
            }
            var members = Self.members(listing, now: clock.now())
            members += [("etag", .string(entry.etag)),
                        ("metadata", entry.metadata.flatMap { try? JSONParser.parse($0) } ?? .null),
                        ("tokens", .object([("input", .int(entry.inputTokens)), ("output", .int(entry.outputTokens))])),
                        ("body", try Self.preview(entry, limit: policy.maxBodyBytes))]
            return .json(200, JSONValue.object(members).serialized)
        }
    }

    static func members(_ listing: EntryListing, now: Date) -> [(String, JSONValue)] {
        let key = EntryKey(listing.key)
        return [
            ("key", .string(key?.display ?? "")), ("key_path", .string(key?.pathSegment ?? "")),
            ("model", listing.model.map(JSONValue.string) ?? .null), ("tags", .array(listing.tags.map(JSONValue.string))),
            ("content_type", .string(listing.contentType)),
            ("bytes", .object([("identity", .int(listing.identitySize)), ("stored", .int(listing.storedSize))])),
            ("created_at", .string(RFC3339.format(listing.createdAt))),
            ("updated_at", .string(RFC3339.format(listing.updatedAt))),
            ("expires_at", .string(RFC3339.format(listing.expiresAt))),
            ("ttl", .int(Int(listing.expiresAt.timeIntervalSince(now).rounded(.down)))),
            ("hit_count", .int(listing.hitCount)),
            ("last_accessed_at", listing.lastAccessedAt.map { .string(RFC3339.format($0)) } ?? .null),
        ]
    }

    /// The body as text (UTF-8, cut at a character) or, when it is not text, its first bytes
    /// in base64; `truncated` when there was more.
    static func preview(_ entry: StoredEntry, limit: Int) throws -> JSONValue {
        var identity = entry.body
        if entry.encoding == .gzip {
            guard let inflated = try? Gzip.decompress(entry.body, limit: limit) else {
                throw HTTPError(500, "The stored body does not inflate.")
            }
            identity = inflated
        }
        let truncated = identity.count > previewBytes
        var shown = Array(identity.prefix(previewBytes))
        if String(validating: shown, as: UTF8.self) == nil, truncated {
            // A character cut in two at the end is still text: drop its first bytes.
            for _ in 0..<3 where String(validating: shown, as: UTF8.self) == nil && !shown.isEmpty { shown.removeLast() }
        }
        if let text = String(validating: shown, as: UTF8.self) {
            return .object([("kind", .string("text")), ("text", .string(text)), ("truncated", .bool(truncated)),
                            ("bytes", .int(identity.count))])
        }
        let sample = Array(identity.prefix(4096))
        return .object([("kind", .string("binary")), ("base64", .string(Data(sample).base64EncodedString())),
                        ("truncated", .bool(identity.count > sample.count)), ("bytes", .int(identity.count))])
    }
}
