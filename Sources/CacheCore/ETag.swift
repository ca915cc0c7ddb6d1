import Hashing

/// Strong entity tags from the identity bytes' SHA-256, so a body uploaded plain or as gzip
/// gets the same tag.
public enum ETag {
    public static func of(identity bytes: [UInt8]) -> String {
        "\"" + Bytes.hex(SHA256.hash(bytes).prefix(16)) + "\""
    }

    /// Weak comparison for `If-None-Match` (RFC 9110 §13.1.2): `*`, or any listed tag
    /// equal to `etag` ignoring a `W/` prefix.
    public static func matches(ifNoneMatch header: String, etag: String) -> Bool {
        let candidates = header.split(separator: ",").map { $0.trimmingCharacters(in: " \t") }
        return candidates.contains { $0 == "*" || strip($0) == strip(etag) }
    }

    /// The tags listed in an `If-Match` header (strong comparison: `W/` tags never match).
    public static func list(ifMatch header: String) -> [String] {
        header.split(separator: ",").map { $0.trimmingCharacters(in: " \t") }.filter { !$0.hasPrefix("W/") }
    }

    private static func strip(_ tag: String) -> Substring {
        tag.hasPrefix("W/") ? tag.dropFirst(2) : Substring(tag)
    }
}

extension StringProtocol {
    func trimmingCharacters(in characters: String) -> String {
        var view = Substring(self)
        while let first = view.first, characters.contains(first) { view.removeFirst() }
        while let last = view.last, characters.contains(last) { view.removeLast() }
        return String(view)
    }
}
