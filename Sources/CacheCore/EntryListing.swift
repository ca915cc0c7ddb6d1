import Foundation

/// A question to the entry browser: entries of one namespace in key order, after a key, with
/// a key prefix, a tag or a model (all optional), at most `limit`.
public struct EntryQuery: Sendable, Equatable {
    public static let maxLimit = 100
    public var prefix: [UInt8]?
    public var tag: String?
    public var model: String?
    /// Entries after this key (the last of the previous page).
    public var after: [UInt8]?
    public var limit = 50

    public init() {}

    /// The smallest key past every key with `prefix` (nil: none is, the prefix is all 0xFF):
    /// the prefix's range ends there, so a page stops at it instead of scanning on.
    public var prefixEnd: [UInt8]? {
        guard var end = prefix else { return nil }
        while let last = end.last {
            if last < 0xFF {
                end[end.count - 1] = last + 1
                return end
            }
            end.removeLast()
        }
        return nil
    }
}

/// What the entry browser shows of an entry: its description, not its body.
public struct EntryListing: Sendable, Equatable {
    public var key: [UInt8]
    public var model: String?
    public var tags: [String]
    public var contentType: String
    public var identitySize: Int
    public var storedSize: Int
    public var createdAt: Date
    public var updatedAt: Date
    public var expiresAt: Date
    public var hitCount: Int
    public var lastAccessedAt: Date?

    public init(key: [UInt8], model: String?, tags: [String], contentType: String, identitySize: Int, storedSize: Int,
                createdAt: Date, updatedAt: Date, expiresAt: Date, hitCount: Int, lastAccessedAt: Date?) {
        self.key = key
        self.model = model
        self.tags = tags
        self.contentType = contentType
        self.identitySize = identitySize
        self.storedSize = storedSize
        self.createdAt = createdAt
        self.updatedAt = updatedAt
        self.expiresAt = expiresAt
        self.hitCount = hitCount
        self.lastAccessedAt = lastAccessedAt
    }
}

/// One page of the entry browser: its entries, and the key the next page goes on after (nil:
/// the last page). A page may be short, or empty, and still have a next: the store reads a
/// bounded run of keys per page, and filters may match few of them.
public struct EntryPage: Sendable, Equatable {
    public var entries: [EntryListing] = []
    public var next: [UInt8]?

    public init(entries: [EntryListing] = [], next: [UInt8]? = nil) {
        self.entries = entries
        self.next = next
    }
}
