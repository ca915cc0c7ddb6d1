import CacheKeys
import Foundation

/// One entry of a dump (`teamcache export` / `import`): every stored field, one JSON object a
/// line. The key is `key` when it is UTF-8 text, else `key_base64`; the body is base64 of the
/// stored bytes in their stored encoding; timestamps are RFC 3339 in UTC with microseconds,
/// so an import restores them exactly. `stale_until` (expiry plus the stale-while-revalidate
/// window) is written for readers and ignored on import.
public struct DumpedEntry: Sendable, Equatable {
    public var namespace: String
    public var key: [UInt8]
    public var body: [UInt8]
    public var encoding: BodyEncoding
    public var contentType: String
    public var identitySize: Int
    public var etag: String
    public var model: String?
    public var version: String?
    public var promptDigest: String?
    public var tags: [String]
    /// JSON text, as stored.
    public var metadata: String?
    public var inputTokens: Int
    public var outputTokens: Int
    public var createdAt: String
    public var updatedAt: String
    /// nil (a line from another tool without one): the namespace's default TTL from now.
    public var expiresAt: String?
    public var staleWhileRevalidate: Int
    public var hitCount: Int
    /// nil: now (the idle clock of an imported entry starts at its import).
    public var lastAccessedAt: String?

    /// Written for readers only.
    var staleUntil: String?

    /// The dump line, newline included.
    public func line() -> [UInt8] {
        var members: [(String, JSONValue)] = [("namespace", .string(namespace))]
        if let text = String(validating: key, as: UTF8.self) {
            members.append(("key", .string(text)))
        } else {
            members.append(("key_base64", .string(Data(key).base64EncodedString())))
        }
        members += [
            ("body_base64", .string(Data(body).base64EncodedString())), ("encoding", .string(encoding.rawValue)),
            ("content_type", .string(contentType)), ("identity_size", .int(identitySize)), ("etag", .string(etag)),
            ("tags", .array(tags.map { .string($0) })),
            ("model", model.map { .string($0) } ?? .null), ("version", version.map { .string($0) } ?? .null),
            ("prompt_digest", promptDigest.map { .string($0) } ?? .null),
            ("metadata", metadata.flatMap { try? JSONParser.parse($0) } ?? .null),
            ("input_tokens", .int(inputTokens)), ("output_tokens", .int(outputTokens)),
            ("created_at", .string(createdAt)), ("updated_at", .string(updatedAt)),
            ("expires_at", expiresAt.map { .string($0) } ?? .null), ("stale_while_revalidate", .int(staleWhileRevalidate)),
            ("stale_until", staleUntil.map { .string($0) } ?? .null), ("hit_count", .int(hitCount)),
            ("last_accessed_at", lastAccessedAt.map { .string($0) } ?? .null),
        ]
        return Array(JSONValue.object(members).serialized.utf8) + [UInt8(ascii: "\n")]
    }

    /// Every member (the store builds these from its rows).
    package init(namespace: String, key: [UInt8], body: [UInt8], encoding: BodyEncoding, contentType: String,
                 identitySize: Int, etag: String, model: String? = nil, version: String? = nil,
                 promptDigest: String? = nil, tags: [String], metadata: String? = nil, inputTokens: Int,
                 outputTokens: Int, createdAt: String, updatedAt: String, expiresAt: String? = nil,
                 staleWhileRevalidate: Int, hitCount: Int, lastAccessedAt: String? = nil, staleUntil: String? = nil) {
        self.namespace = namespace
        self.key = key
        self.body = body
        self.encoding = encoding
        self.contentType = contentType
        self.identitySize = identitySize
        self.etag = etag
        self.model = model
        self.version = version
        self.promptDigest = promptDigest
        self.tags = tags
        self.metadata = metadata
        self.inputTokens = inputTokens
        self.outputTokens = outputTokens
        self.createdAt = createdAt
        self.updatedAt = updatedAt
        self.expiresAt = expiresAt
        self.staleWhileRevalidate = staleWhileRevalidate
        self.hitCount = hitCount
        self.lastAccessedAt = lastAccessedAt
        self.staleUntil = staleUntil
    }
}
