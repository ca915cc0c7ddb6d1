/// The value of `If-None-Match` or `If-Match` (RFC 9110 §13.1.1–2): `*`, or a list of
/// entity tags, each `"opaque"` or `W/"opaque"`. Elements that are not entity tags are
/// dropped (they can match nothing), so a malformed header never traps and never matches.
public enum EntityTagList: Sendable, Equatable {
    case any
    case tags([EntityTag])

    public struct EntityTag: Sendable, Equatable {
        public var weak: Bool
        /// The tag with its quotes, as the server writes it in `ETag`.
        public var quoted: String
    }

    /// nil when no field named `name` is present.
    public init?(_ headers: HTTPHeaders, _ name: String) {
        guard headers.contains(name) else { return nil }
        let elements = HeaderList.split(headers, name)
        if elements.contains("*") {
            self = .any
            return
        }
        self = .tags(elements.compactMap(Self.parse))
    }

    /// Weak comparison (for `If-None-Match`): `*` matches any current entry.
    public func matchesWeakly(_ etag: String) -> Bool {
        switch self {
        case .any: return true
        case .tags(let tags): return tags.contains { $0.quoted == Self.strong(etag) }
        }
    }

    /// Strong comparison (for `If-Match`): weak tags never match.
    public func matchesStrongly(_ etag: String) -> Bool {
        switch self {
        case .any: return true
        case .tags(let tags): return tags.contains { !$0.weak && $0.quoted == etag }
        }
    }

    /// The strong tags listed (what a conditional write may replace).
    public var strongTags: [String] {
        guard case .tags(let tags) = self else { return [] }
        return tags.filter { !$0.weak }.map(\.quoted)
    }

    static func parse(_ element: String) -> EntityTag? {
        var bytes = Array(element.utf8)[...]
        var weak = false
        if bytes.starts(with: "W/".utf8) {
            weak = true
            bytes = bytes.dropFirst(2)
        }
        // entity-tag = [ weak ] DQUOTE *etagc DQUOTE; etagc excludes DQUOTE, controls and space.
        guard bytes.count >= 2, bytes.first == HeaderList.quote, bytes.last == HeaderList.quote,
              bytes.dropFirst().dropLast().allSatisfy({ $0 == 0x21 || ($0 >= 0x23 && $0 != 0x7f) })
        else { return nil }
        return EntityTag(weak: weak, quoted: String(decoding: bytes, as: UTF8.self))
    }

    private static func strong(_ etag: String) -> String {
        etag.hasPrefix("W/") ? String(etag.dropFirst(2)) : etag
    }
}
