import CacheKeys
import Foundation
import JSONEscaping

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

    /// The dump line, newline included: members in this order, no spaces, strings escaped as
    /// `JSONText` escapes them. Written straight into bytes (through `JSONValue` and a
    /// `String` it was most of an export's CPU); the base64 needs no escaping.
    public func line() -> [UInt8] {
        var line = DumpLine(capacity: (body.count + 2) / 3 * 4 + 640)
        line.string("namespace", namespace)
        if let text = String(validating: key, as: UTF8.self) {
            line.string("key", text)
        } else {
            line.base64("key_base64", key)
        }
        line.base64("body_base64", body)
        line.string("encoding", encoding.rawValue)
        line.string("content_type", contentType)
        line.integer("identity_size", identitySize)
        line.string("etag", etag)
        line.name("tags")
        line.bytes.append(UInt8(ascii: "["))
        for (index, tag) in tags.enumerated() {
            if index > 0 { line.bytes.append(UInt8(ascii: ",")) }
            JSONText.appendString(tag, to: &line.bytes)
        }
        line.bytes.append(UInt8(ascii: "]"))
        line.string("model", model)
        line.string("version", version)
        line.string("prompt_digest", promptDigest)
        line.name("metadata")
        // Stored metadata is a JSON object; written as parsed, so the line holds it in one form.
        line.bytes.append(contentsOf: (metadata.flatMap { try? JSONParser.parse($0) }?.serialized ?? "null").utf8)
        line.integer("input_tokens", inputTokens)
        line.integer("output_tokens", outputTokens)
        line.string("created_at", createdAt)
        line.string("updated_at", updatedAt)
        line.string("expires_at", expiresAt)
        line.integer("stale_while_revalidate", staleWhileRevalidate)
        line.string("stale_until", staleUntil)
        line.integer("hit_count", hitCount)
        line.string("last_accessed_at", lastAccessedAt)
        line.bytes += Array("}\n".utf8)
        return line.bytes
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

/// A dump line being written: `{"name":value,…`.
private struct DumpLine {
    var bytes: [UInt8] = []

    init(capacity: Int) { bytes.reserveCapacity(capacity) }

    mutating func name(_ name: StaticString) {
        bytes.append(bytes.isEmpty ? UInt8(ascii: "{") : UInt8(ascii: ","))
        bytes.append(UInt8(ascii: "\""))
        bytes.append(contentsOf: UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
        bytes += Array("\":".utf8)
    }

    mutating func string(_ name: StaticString, _ value: String?) {
        self.name(name)
        if let value { JSONText.appendString(value, to: &bytes) } else { bytes += Array("null".utf8) }
    }

    mutating func integer(_ name: StaticString, _ value: Int) {
        self.name(name)
        bytes.append(contentsOf: String(value).utf8)
    }

    mutating func base64(_ name: StaticString, _ value: [UInt8]) {
        self.name(name)
        bytes.append(UInt8(ascii: "\""))
        bytes.append(contentsOf: Data(value).base64EncodedData())
        bytes.append(UInt8(ascii: "\""))
    }
}
