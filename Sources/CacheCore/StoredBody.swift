/// How a body is kept in the store.
public enum BodyEncoding: String, Sendable {
    case identity
    case gzip
}

/// A body ready to store: the stored bytes, their encoding, and facts about the identity bytes.
public struct StoredBody: Sendable {
    public let bytes: [UInt8]
    public let encoding: BodyEncoding
    public let identitySize: Int
    public let etag: String

    /// Prepares an uploaded plain body: compressed when it is large enough and shrinks by at
    /// least a tenth, otherwise kept as it is.
    public static func fromIdentity(_ identity: [UInt8], contentType: String, policy: CachePolicy) -> StoredBody {
        let etag = ETag.of(identity: identity)
        if identity.count >= policy.minCompressBytes && !alreadyCompressed(contentType) {
            if let compressed = Gzip.compress(identity, level: policy.compressionLevel),
               compressed.count * 10 < identity.count * 9 {
                return StoredBody(bytes: compressed, encoding: .gzip, identitySize: identity.count, etag: etag)
            }
        }
        return StoredBody(bytes: identity, encoding: .identity, identitySize: identity.count, etag: etag)
    }

    /// Accepts an uploaded gzip body as it is, after inflating it once to verify it and to
    /// measure and tag the identity bytes. The limit applies to the inflated size.
    public static func fromGzip(_ gzip: [UInt8], policy: CachePolicy) throws(Gzip.Failure) -> StoredBody {
        let identity: [UInt8]
        do {
            identity = try Gzip.decompress(gzip, limit: policy.maxBodyBytes)
        } catch let failure as Gzip.Failure {
            throw failure
        } catch {
            throw .malformed
        }
        return StoredBody(bytes: gzip, encoding: .gzip, identitySize: identity.count, etag: ETag.of(identity: identity))
    }

    /// Media types that are compressed already; gzip would only cost CPU.
    static func alreadyCompressed(_ contentType: String) -> Bool {
        let type = contentType.lowercased()
        return type.hasPrefix("image/") && !type.hasPrefix("image/svg") || type.hasPrefix("video/")
            || type.hasPrefix("audio/") || type.contains("zip") || type.contains("compressed")
            || type == "application/octet-stream+gzip"
    }
}
