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
    private var last: [String: [[UInt8]: UInt64]] = [:]
    /// The last change of any key of a namespace (the change feed's waiters ask this).
    private var lastInNamespace: [String: UInt64] = [:]
    private var remembered = 0
    private var forgottenBefore: UInt64 = 0
    public let bound: Int

    public init(bound: Int = 10_000) { self.bound = bound }

    /// A change of `key`, or of the whole namespace when `key` is nil.
    public mutating func record(_ namespace: String, _ key: [UInt8]?) {
        count &+= 1
        if remembered >= bound {
            last = [:]
            lastInNamespace = [:]
            remembered = 0
            forgottenBefore = count
        }
        if last[namespace, default: [:]].updateValue(count, forKey: key ?? []) == nil { remembered += 1 }
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
        let keys = last[namespace]
        return max(keys?[key] ?? 0, keys?[[]] ?? 0) > since
    }
}
