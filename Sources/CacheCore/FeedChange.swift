import CacheKeys
import Foundation

/// One change of a namespace's feed (`GET /v1/caches/{ns}/changes`, migration 0012): an entry
/// created or replaced (`put`), or deleted or evicted (`delete`, a tombstone).
public struct FeedChange: Sendable, Equatable {
    public enum Kind: String, Sendable { case put, delete }

    /// The feed position of this change: a follower that applied it resumes after it.
    public var cursor: Int64
    public var kind: Kind
    public var key: [UInt8]
    /// A put's fields, as the entry was stored by this change.
    public var etag: String?
    public var identitySize: Int?
    public var storedSize: Int?
    public var contentType: String?
    public var expiresAt: String?
    public var staleUntil: String?
    /// With `include=body`, a put's body in its stored encoding, when the entry still holds
    /// this change's version (a later change replaced or deleted it: that change follows).
    public var body: [UInt8]?
    public var encoding: BodyEncoding?
    /// The entry's id while it holds this change's version (to fetch the body by).
    package var entryID: Int64?

    public var json: JSONValue {
        var members: [(String, JSONValue)] = [("cursor", .string(String(cursor))), ("kind", .string(kind.rawValue))]
        if let text = String(validating: key, as: UTF8.self) {
            members.append(("key", .string(text)))
        } else {
            members.append(("key_base64", .string(Data(key).base64EncodedString())))
        }
        guard kind == .put else { return .object(members) }
        members += [
            ("etag", etag.map { .string($0) } ?? .null), ("size", identitySize.map { .int($0) } ?? .null),
            ("stored_size", storedSize.map { .int($0) } ?? .null),
            ("content_type", contentType.map { .string($0) } ?? .null),
            ("expires_at", expiresAt.map { .string($0) } ?? .null),
            ("stale_until", staleUntil.map { .string($0) } ?? .null),
        ]
        if let body, let encoding {
            members += [("body_base64", .string(Data(body).base64EncodedString())), ("encoding", .string(encoding.rawValue))]
        }
        return .object(members)
    }

    /// Every member (the store builds these from its rows).
    package init(cursor: Int64, kind: Kind, key: [UInt8], etag: String? = nil, identitySize: Int? = nil,
                 storedSize: Int? = nil, contentType: String? = nil, expiresAt: String? = nil,
                 staleUntil: String? = nil, body: [UInt8]? = nil, encoding: BodyEncoding? = nil,
                 entryID: Int64? = nil) {
        self.cursor = cursor
        self.kind = kind
        self.key = key
        self.etag = etag
        self.identitySize = identitySize
        self.storedSize = storedSize
        self.contentType = contentType
        self.expiresAt = expiresAt
        self.staleUntil = staleUntil
        self.body = body
        self.encoding = encoding
        self.entryID = entryID
    }
}

/// One page of a feed: its changes in feed order, and the cursor to ask from next.
public struct FeedPage: Sendable {
    public var changes: [FeedChange]
    /// The last change given (or the cursor asked from, when none): a follower asking from it
    /// again sees only changes after those it was given.
    public var next: Int64
    /// Whether more changes may follow `next` right now (the page was cut by its limit or
    /// budget, or changes are still waiting for their numbers).
    public var more: Bool
    /// Changes were waiting for their numbers when the page was read: asking again soon
    /// (not waiting for a notification) finds them.
    public var behind = false

    public init(changes: [FeedChange], next: Int64, more: Bool, behind: Bool = false) {
        self.changes = changes
        self.next = next
        self.more = more
        self.behind = behind
    }
}

/// Why a cursor cannot be followed.
public enum FeedCursorError: Error, Equatable {
    /// Changes after the cursor were trimmed (older than the retention) or lost to a TRUNCATE:
    /// the follower must resync (from an export) and follow from a newer cursor.
    case gone(floor: Int64)
    /// The cursor is past the feed's head: it came from another store, or this one was
    /// restored from an older backup; the follower must resync too.
    case ahead(head: Int64)
    /// The cursor was handed out on a history this database no longer has (a failover to a
    /// standby that had not replayed it, or a point-in-time restore): resync.
    case lost
}

/// A feed cursor: decimal digits, 0 for "from the start" (total: anything else is nil).
public enum FeedCursor {
    public static func parse(_ text: String) -> Int64? {
        let digits = text.utf8
        guard (1...19).contains(digits.count), digits.allSatisfy({ (0x30...0x39).contains($0) }) else { return nil }
        return Int64(text)
    }
}
