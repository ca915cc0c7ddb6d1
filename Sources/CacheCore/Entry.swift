import Foundation

/// An entry as read from the store.
///
/// Its members live in one immutable object: a hit copies its entry out of the near cache
/// (under the cache's lock) and into the read plan, and a struct of sixteen members copied
/// sixteen references each time (ten string and array retains, ~1,000 instructions a hit with
/// their releases); the object is one. `responseFields`, set once when a near-cache copy is
/// kept, stays beside it.
public struct StoredEntry: Sendable {
    /// The members, with the initializer Swift writes for a struct; held in one `Box`.
    private struct Members {
        let id: Int64
        let namespace: String
        let key: [UInt8]
        let body: [UInt8]
        let encoding: BodyEncoding
        let contentType: String
        let identitySize: Int
        let etag: String
        let model: String?
        let metadata: String?
        let inputTokens: Int
        let outputTokens: Int
        let updatedAt: Date
        let expiresAt: Date
        let staleWhileRevalidate: Int
    }

    private final class Box: Sendable {
        let members: Members
        init(_ members: Members) { self.members = members }
    }

    private let box: Box
    private var members: Members { box.members }

    public var id: Int64 { members.id }
    public var namespace: String { members.namespace }
    public var key: [UInt8] { members.key }
    public var body: [UInt8] { members.body }
    public var encoding: BodyEncoding { members.encoding }
    public var contentType: String { members.contentType }
    public var identitySize: Int { members.identitySize }
    public var etag: String { members.etag }
    public var model: String? { members.model }
    /// The metadata object as JSON text.
    public var metadata: String? { members.metadata }
    public var inputTokens: Int { members.inputTokens }
    public var outputTokens: Int { members.outputTokens }
    public var updatedAt: Date { members.updatedAt }
    public var expiresAt: Date { members.expiresAt }
    /// Seconds after `expiresAt` for which the entry is still served, while one caller
    /// refreshes it (RFC 5861 `stale-while-revalidate`); 0: no such window.
    public var staleWhileRevalidate: Int { members.staleWhileRevalidate }
    /// The fields every hit on a near-cache copy answers with, in wire form, rendered once
    /// when it is kept (`Content-Type`, `ETag`, `Last-Modified`, `Expires`, `Vary`); nil:
    /// written field by field.
    public var responseFields: [UInt8]?
    /// A near-cache copy's identity bytes, when its body is stored gzip: attached on its first
    /// answer to a client that does not take gzip (`NearCache.attach`), so later ones are served
    /// from the copy itself, not looked up in `InflatedBodies` (a second hash probe and a
    /// comparison of two ETags, each in memory no other part of the hit touches). nil: not
    /// attached, or not gzip.
    public var inflatedBody: [UInt8]?

    /// Whether both are copies of the same read (not merely equal members): a near-cache
    /// node's entry is replaced by another read when the row is, and an attachment made for
    /// the old one must not land on the new.
    package func isSameRead(as other: StoredEntry) -> Bool { box === other.box }

    /// Every member (the store builds these from its rows).
    package init(id: Int64, namespace: String, key: [UInt8], body: [UInt8], encoding: BodyEncoding,
                 contentType: String, identitySize: Int, etag: String, model: String?, metadata: String?,
                 inputTokens: Int, outputTokens: Int, updatedAt: Date, expiresAt: Date,
                 staleWhileRevalidate: Int = 0) {
        box = Box(Members(id: id, namespace: namespace, key: key, body: body, encoding: encoding,
                              contentType: contentType, identitySize: identitySize, etag: etag, model: model,
                              metadata: metadata, inputTokens: inputTokens, outputTokens: outputTokens,
                              updatedAt: updatedAt, expiresAt: expiresAt,
                              staleWhileRevalidate: staleWhileRevalidate))
    }
}

/// Whether a stored entry may be served now.
public enum Freshness: Equatable, Sendable {
    /// Fresh, with whole seconds of freshness left.
    case fresh(ttl: Int)
    /// Expired `by` seconds but allowed by the request's `max-stale`.
    case stale(by: Int)
    /// Expired `by` seconds, within the entry's stale-while-revalidate window: served, and
    /// one caller is asked to refresh it.
    case revalidate(by: Int)
    /// Expired beyond what the request accepts: a miss.
    case expired

    /// `maxStale` nil: no stale entry is acceptable; `Int.max`: any staleness (bare `max-stale`).
    public static func of(_ entry: StoredEntry, now: Date, maxStale: Int?) -> Freshness {
        let left = entry.expiresAt.timeIntervalSince(now)
        if left > 0 { return .fresh(ttl: wholeSeconds(left, up: true)) }
        // The windows compare the exact interval: `max-stale=0` accepts nothing past expiry
        // (rounding the overdue time down once served entries up to a second past it).
        let overdue = wholeSeconds(-left, up: false)
        if -left < Double(entry.staleWhileRevalidate) { return .revalidate(by: max(overdue, 1)) }
        if let maxStale, -left <= Double(maxStale) { return .stale(by: max(overdue, 1)) }
        return .expired
    }

    /// Whole seconds, tolerating the microsecond noise between PostgreSQL timestamps and
    /// `Date`'s floating point (6.000001 s of freshness is 6, not 7).
    public static func wholeSeconds(_ interval: TimeInterval, up: Bool) -> Int {
        let tolerance = 0.001
        return up ? Int((interval - tolerance).rounded(.up)) : Int((interval + tolerance).rounded(.down))
    }
}

/// Everything one upsert writes.
public struct EntryWrite: Sendable {
    public var namespace: Namespace
    public var key: EntryKey
    public var body: StoredBody
    public var contentType: String
    public var model: String?
    public var version: String?
    public var promptDigest: String?
    public var tags: [String] = []
    /// A JSON object, as text.
    public var metadata: String?
    public var inputTokens = 0
    public var outputTokens = 0
    /// nil: the namespace's default TTL, else the server's.
    public var ttlSeconds: Int?
    /// CLOCK_MONOTONIC nanoseconds past which the write must not start (its request was
    /// given up, answered "outcome unknown"): a write still queued then is dropped. nil: none.
    public var notAfter: UInt64?
    /// Seconds past expiry the entry is still served while it is refreshed (0: none).
    public var staleWhileRevalidate = 0
    public var writerTokenID: Int64?
    public var condition: WriteCondition = .none
    /// What is stored instead of the body, its encoding and the metadata, when the namespace
    /// is encrypted (set by the store, `EntryStore.sealed`).
    package var sealed: (body: [UInt8], encoding: String, metadata: String?)?

    package var storedBytes: [UInt8] { sealed?.body ?? body.bytes }
    package var storedEncoding: String { sealed?.encoding ?? body.encoding.rawValue }
    package var storedMetadata: String? { sealed.map(\.metadata) ?? metadata }

    public init(namespace: Namespace, key: EntryKey, body: StoredBody, contentType: String) {
        self.namespace = namespace
        self.key = key
        self.body = body
        self.contentType = contentType
    }
}

/// A conditional write (RFC 9110 §13).
public enum WriteCondition: Sendable, Equatable {
    case none
    /// `If-None-Match: *`: create only.
    case absent
    /// `If-Match`: replace only an entry whose tag is listed (`*`: any existing entry).
    case match([String])
}

/// What an upsert did.
public enum WriteOutcome: Sendable, Equatable {
    case created(expiresAt: Date)
    case replaced(expiresAt: Date)
    case preconditionFailed
    /// A hard cap would be passed; nothing was stored.
    case storeFull
}
