/// When each recently changed key last changed, as a count: the memory that lets a reader
/// note the count before it reads a key and ask afterwards whether the key (or its
/// namespace, or everything) changed since, so a change landing in between is never lost.
///
/// Waking parked requests, keeping hot entries and remembering held leases all need this
/// one rule. Bounded: past `bound` keys the table is reset and every question about a time
/// before the reset answers "changed" (the safe answer). Not thread-safe: its owner holds
/// its own lock around it.
public struct RecentChanges: Sendable {
    /// Changes so far; note it before a read.
    public private(set) var count: UInt64 = 0
    /// Each key's last change, by a 64-bit hash of (namespace, key), never the key itself: a
    /// key may be 512 bytes, and a table of 100,000 such keys once held 46 MB outside every
    /// budget (16 bytes an entry now, ~3 MB at 100,000). Two keys sharing a hash only make one
    /// look changed when the other did: a re-read, a fill refused, a lease asked again; the
    /// safe answer. The hasher is seeded per process, so no client can aim collisions.
    private var last: [UInt64: UInt64] = [:]
    /// The last change of any key of a namespace (the change feed's waiters ask this), and
    /// the last change of a whole namespace at once (a namespace-wide invalidation).
    private var lastInNamespace: [String: UInt64] = [:]
    private var namespaceWide: [String: UInt64] = [:]
    private var forgottenBefore: UInt64 = 0
    public let bound: Int

    public init(bound: Int = 10_000) { self.bound = bound }

    /// Keys and namespace-wide changes remembered now: at most `bound` (`lastInNamespace`
    /// holds no more namespaces than these name).
    public var remembered: Int { last.count + namespaceWide.count }

    static func identity(_ namespace: String, _ key: [UInt8]) -> UInt64 {
        var hasher = Hasher()
        hasher.combine(namespace)
        key.withUnsafeBytes { hasher.combine(bytes: $0) }
        hasher.combine(key.count)
        return UInt64(bitPattern: Int64(hasher.finalize()))
    }

    /// A change of `key`, or of the whole namespace when `key` is nil.
    public mutating func record(_ namespace: String, _ key: [UInt8]?) {
        count &+= 1
        if remembered >= bound {
            last = [:]
            lastInNamespace = [:]
            namespaceWide = [:]
            forgottenBefore = count
        }
        if let key, !key.isEmpty {
            last[Self.identity(namespace, key)] = count
        } else {
            namespaceWide[namespace] = count
        }
        lastInNamespace[namespace] = count
    }

    /// A change of everything (notifications may have been missed).
    public mutating func recordEverything() {
        count &+= 1
        forgottenBefore = count
    }

    /// Whether (namespace, key) may have changed after `since` (a count noted earlier). The
    /// empty key (no entry has one) asks whether any key of the namespace did.
    public func changed(_ namespace: String, _ key: [UInt8], since: UInt64) -> Bool {
        if since < forgottenBefore { return true }
        if key.isEmpty { return (lastInNamespace[namespace] ?? 0) > since }
        return max(last[Self.identity(namespace, key)] ?? 0, namespaceWide[namespace] ?? 0) > since
    }
}
