import Cryptography

/// Strong entity tags from the identity bytes' SHA-256, so a body uploaded plain or as gzip
/// gets the same tag.
public enum ETag {
    public static func of(identity bytes: [UInt8]) -> String {
        "\"" + Bytes.hex(SHA256.hash(bytes).prefix(16)) + "\""
    }
}
