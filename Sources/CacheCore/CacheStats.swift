import Foundation

/// Totals of a namespace, or of the whole store.
public struct CacheStats: Sendable, Equatable {
    public var entries = 0
    public var identityBytes = 0
    public var storedBytes = 0
    public var hits = 0
    public var misses = 0
    public var stale = 0
    public var bypass = 0
    /// Hits answered by waiting for another caller's fill (counted in `hits` too).
    public var collapsed = 0
    /// Hits a client's local tier answered and reported (counted in `hits` too).
    public var localHits = 0
    public var inputTokensSaved = 0
    public var outputTokensSaved = 0
    /// What hits saved, in billionths of the price table's currency.
    public var costSavedNanos = 0
    public var writes = 0
    public var evictions = 0
    /// Miss leases held right now (callers filling a key while others may wait for them).
    public var leasesHeld = 0
    /// The namespace seals its bodies at rest (a client keeping copies should ask before it
    /// writes them to disk in plaintext).
    public var encrypted = false
    public var top: [TopEntry] = []

    public init() {}

    /// Hits over hits and misses; stale answers and bypasses are in neither.
    public var hitRatio: Double {
        let lookups = Double(hits) + Double(misses)
        return lookups == 0 ? 0 : Double(hits) / lookups
    }
}

/// One of the most-hit entries.
public struct TopEntry: Sendable, Equatable {
    public let namespace: String
    public let key: [UInt8]
    public let promptDigest: String?
    public let model: String?
    public let hitCount: Int
    public let lastAccessedAt: Date
    public let writerTokenID: Int?

    /// Every member (the store builds these from its rows).
    package init(namespace: String, key: [UInt8], promptDigest: String?, model: String?, hitCount: Int,
                 lastAccessedAt: Date, writerTokenID: Int?) {
        self.namespace = namespace
        self.key = key
        self.promptDigest = promptDigest
        self.model = model
        self.hitCount = hitCount
        self.lastAccessedAt = lastAccessedAt
        self.writerTokenID = writerTokenID
    }
}

/// Per-namespace settings.
public struct NamespaceSettings: Sendable, Equatable {
    public var defaultTTL: Int?
    public var maxBytes: Int?
    /// The namespace's own prices, looked at before the server's (nil: the server's only).
    public var prices: PriceTable?

    public init(defaultTTL: Int? = nil, maxBytes: Int? = nil, prices: PriceTable? = nil) {
        self.defaultTTL = defaultTTL
        self.maxBytes = maxBytes
        self.prices = prices
    }
}
