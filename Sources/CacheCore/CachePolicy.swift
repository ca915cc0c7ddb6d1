/// The rules entries are stored and served by.
public struct CachePolicy: Sendable {
    /// TTL when neither the request nor the namespace gives one (7 days).
    public var defaultTTL = 7 * 24 * 3600
    /// The largest `?ttl=` accepted.
    public var maxTTL = 365 * 24 * 3600
    /// How long an expired entry is kept so `max-stale` can still serve it (24 h).
    public var staleRetention = 24 * 3600
    /// The largest body, after inflating a gzip upload.
    public var maxBodyBytes = 8 * 1024 * 1024
    /// zlib level for bodies the server compresses.
    public var compressionLevel: Int32 = 6
    /// Bodies smaller than this are stored as they are: gzip's ~20 bytes of framing would eat the gain.
    public var minCompressBytes = 256
    /// Soft cap of the whole store in stored bytes (0: none); the eviction job keeps under it.
    public var storeMaxBytes: Int64 = 0
    /// Hard caps are the soft caps times this; a write past a hard cap is refused (507).
    public var hardCapRatio = 1.1
    /// Entries not read for this long are evicted (30 days).
    public var idleTTL = 30 * 24 * 3600
    /// How long the change feed keeps a change (7 days); a cursor older answers 410 Gone.
    public var changeRetention = 7 * 24 * 3600
    /// How long the stats history keeps its minute points (48 h) and its hour points (400 days).
    public var minutePointRetention = 48 * 3600
    public var hourPointRetention = 400 * 24 * 3600

    public init() {}

    /// Saturates at Int64.max rather than trapping on a huge configured cap.
    public var storeHardCap: Int64 {
        guard storeMaxBytes > 0 else { return 0 }
        return Int64(exactly: (Double(storeMaxBytes) * hardCapRatio).rounded(.down)) ?? Int64.max
    }
}
