import CacheKeys
import Foundation
import Locking

/// Why a dump line was not imported (it is skipped whole: nothing of it is stored).
public struct DumpLineError: Error, CustomStringConvertible, Equatable {
    public let reason: String
    public var description: String { reason }
    init(_ reason: String) { self.reason = reason }
}

extension DumpedEntry {
    /// A dump line as an entry to import, every field checked as the API checks a write.
    ///
    /// Lines from another tool may leave out what a TeamCache export always has: `etag` and
    /// `identity_size` are then computed from the body (and checked when given), `encoding`
    /// is identity, `content_type` application/octet-stream, `created_at`/`updated_at` now,
    /// `expires_at` now plus the default TTL; the body may be `body` (UTF-8 text) instead
    /// of `body_base64`. `namespace` (the `--namespace` of the import) puts the entry there
    /// whatever the line says.
    public static func parse(_ line: [UInt8], namespace override: Namespace?, policy: CachePolicy,
                             now: Date) throws(DumpLineError) -> DumpedEntry {
        let json: JSONValue
        do { json = try JSONParser.parse(line) } catch { throw DumpLineError("not a JSON object") }
        guard case .object = json else { throw DumpLineError("not a JSON object") }
        let namespace: String
        if let override { namespace = override.name } else { namespace = try namespaceMember(json) }
        let key = try keyMember(json)
        let (body, encoding) = try bodyMember(json)
        let identity: [UInt8]
        switch encoding {
        case .identity: identity = body
        case .gzip:
            do { identity = try Gzip.decompress(body, limit: policy.maxBodyBytes) } catch Gzip.Failure.tooLarge {
                throw DumpLineError("body larger than TEAMCACHE_MAX_BODY_BYTES")
            } catch {
                throw DumpLineError("body is not valid gzip")
            }
        }
        guard identity.count <= policy.maxBodyBytes else {
            throw DumpLineError("body larger than TEAMCACHE_MAX_BODY_BYTES")
        }
        let etag = ETag.of(identity: identity)
        if let given = json["etag"], given.stringValue != etag { throw DumpLineError("etag does not match the body") }
        if let given = json["identity_size"], given.integerValue != identity.count {
            throw DumpLineError("identity_size does not match the body")
        }
        let created = try timestampMember(json, "created_at") ?? timestamp(now)
        let updated = try timestampMember(json, "updated_at") ?? created
        let expires = try timestampMember(json, "expires_at")
        // As a write's TTL: at most TEAMCACHE_MAX_TTL ahead.
        if let expires, let date = parseTimestamp(expires), date > now.addingTimeInterval(Double(policy.maxTTL)) {
            throw DumpLineError("expires_at is further ahead than TEAMCACHE_MAX_TTL")
        }
        return DumpedEntry(
            namespace: namespace, key: key, body: body, encoding: encoding,
            contentType: try contentTypeMember(json),
            identitySize: identity.count, etag: etag, model: try text(json, "model", limit: 256),
            version: try text(json, "version", limit: 256, mayBeEmpty: true), promptDigest: try digestMember(json),
            tags: try tagsMember(json), metadata: try metadataMember(json),
            inputTokens: try count(json, "input_tokens"), outputTokens: try count(json, "output_tokens"),
            createdAt: created, updatedAt: updated, expiresAt: expires,
            staleWhileRevalidate: try count(json, "stale_while_revalidate", max: min(policy.maxTTL, Int(Int32.max))),
            // Held far below the column's range (a larger one, as a store that saturated it
            // exports, is taken as the bound): the access flush adds hits to it, and a count at
            // bigint's limit once failed every flush (every namespace's stats) while it lived.
            hitCount: min(try count(json, "hit_count"), Self.maxHitCount),
            lastAccessedAt: try timestampMember(json, "last_accessed_at"))
    }

    private static func namespaceMember(_ json: JSONValue) throws(DumpLineError) -> String {
        guard let text = json["namespace"]?.stringValue else { throw DumpLineError("no namespace (give --namespace)") }
        guard let namespace = Namespace(text) else { throw DumpLineError("invalid namespace") }
        return namespace.name
    }

    private static func keyMember(_ json: JSONValue) throws(DumpLineError) -> [UInt8] {
        let bytes: [UInt8]
        if let text = json["key"]?.stringValue {
            bytes = Array(text.utf8)
        } else if let encoded = json["key_base64"]?.stringValue, let data = Data(base64Encoded: encoded) {
            bytes = Array(data)
        } else {
            throw DumpLineError("no key (key or key_base64)")
        }
        guard let key = EntryKey(bytes) else { throw DumpLineError("invalid key (1 to 512 bytes)") }
        return key.bytes
    }

    private static func bodyMember(_ json: JSONValue) throws(DumpLineError) -> ([UInt8], BodyEncoding) {
        let body: [UInt8]
        if let encoded = json["body_base64"]?.stringValue {
            guard let data = Data(base64Encoded: encoded) else { throw DumpLineError("body_base64 is not base64") }
            body = Array(data)
        } else if let text = json["body"]?.stringValue {
            body = Array(text.utf8)
        } else {
            throw DumpLineError("no body (body_base64 or body)")
        }
        guard let name = json["encoding"]?.stringValue ?? (json["encoding"] == nil ? "identity" : nil),
              let encoding = BodyEncoding(rawValue: name) else {
            throw DumpLineError("encoding must be identity or gzip")
        }
        return (body, encoding)
    }

    /// As the API takes a `Content-Type`: a media type (with a `/`) of at most 256 bytes, and,
    /// since it goes into every hit's head, no control characters (a CR or LF would split it).
    private static func contentTypeMember(_ json: JSONValue) throws(DumpLineError) -> String {
        guard let value = json["content_type"], value != .null else { return "application/octet-stream" }
        guard let text = value.stringValue, MediaType.isStorable(text) else {
            throw DumpLineError("content_type must be a media type of at most 256 bytes without control characters")
        }
        return text
    }

    /// A dumped hit count's bound (2^53: any count a store could reach, far from bigint's end).
    public static let maxHitCount = 1 << 53

    /// An optional string member without NUL, at most `limit` bytes (and at least one, unless
    /// `mayBeEmpty`: a descriptor's `version` may be "", and is stored so).
    private static func text(_ json: JSONValue, _ name: String, limit: Int, mayBeEmpty: Bool = false)
        throws(DumpLineError) -> String? {
        guard let value = json[name], value != .null else { return nil }
        let least = mayBeEmpty ? 0 : 1
        guard let text = value.stringValue, (least...limit).contains(text.utf8.count), !text.utf8.contains(0) else {
            throw DumpLineError("\(name) must be a string of \(least) to \(limit) bytes")
        }
        return text
    }

    /// The prompt's first characters, as a writer keeps them (`Descriptor.digest(of:)`: 200
    /// characters and at most 800 bytes, NUL replaced, "" for an empty prompt): whatever a
    /// store exported imports back, and a longer one is cut as a writer would cut it.
    private static func digestMember(_ json: JSONValue) throws(DumpLineError) -> String? {
        guard let value = json["prompt_digest"], value != .null else { return nil }
        guard let text = value.stringValue else { throw DumpLineError("prompt_digest must be a string") }
        return Descriptor.digest(of: text)
    }

    private static func count(_ json: JSONValue, _ name: String, max: Int = Int.max) throws(DumpLineError) -> Int {
        guard let value = json[name], value != .null else { return 0 }
        guard let number = value.integerValue, (0...max).contains(number) else {
            throw DumpLineError("\(name) must be an integer from 0 to \(max)")
        }
        return number
    }

    private static func tagsMember(_ json: JSONValue) throws(DumpLineError) -> [String] {
        guard let value = json["tags"], value != .null else { return [] }
        guard case .array(let items) = value else { throw DumpLineError("tags must be an array of strings") }
        let tags = items.compactMap(\.stringValue)
        guard tags.count == items.count, tags.count <= 64,
              tags.allSatisfy({ (1...128).contains($0.utf8.count) && !$0.utf8.contains(0) }) else {
            throw DumpLineError("tags: at most 64, each 1 to 128 bytes, without NUL")
        }
        return Array(Set(tags)).sorted()
    }

    private static func metadataMember(_ json: JSONValue) throws(DumpLineError) -> String? {
        guard let value = json["metadata"], value != .null else { return nil }
        guard case .object = value, value.isStorable else { throw DumpLineError("metadata must be a JSON object") }
        return value.serialized
    }

    /// An RFC 3339 timestamp member (nil when absent), kept as written once it parses.
    private static func timestampMember(_ json: JSONValue, _ name: String) throws(DumpLineError) -> String? {
        guard let value = json[name], value != .null else { return nil }
        guard let text = value.stringValue, text.utf8.count <= 40, Self.parseTimestamp(text) != nil else {
            throw DumpLineError("\(name) must be an RFC 3339 timestamp")
        }
        return text
    }

    /// RFC 3339 with or without fractional seconds; nil otherwise.
    public static func parseTimestamp(_ text: String) -> Date? { RFC3339.parse(text) }

    static func timestamp(_ date: Date) -> String { RFC3339.formatWithFraction(date) }
}
