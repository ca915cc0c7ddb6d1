/// Which namespaces get their own lookup stats and metric series: those that hold entries
/// or have settings, up to `capacity`. Any other name a request mentions (a namespace that
/// holds nothing, or one past the cap) is counted under `other`, so no token can grow the
/// server's memory or `/metrics` by asking for namespaces at random.
///
/// Kept by the access tracker under its lock; learnt from the store by the namespace-gauges
/// refresh (so every replica hears of the others' namespaces within its interval), from
/// this replica's own writes, and from hits (a hit proves the namespace holds an entry).
public struct NamespaceLabels: Sendable {
    /// The label of everything folded together (not a valid namespace: it cannot collide).
    public static let other = "_other"
    public static let defaultCapacity = 1000

    public let capacity: Int
    private(set) var known: Set<String> = []

    public init(capacity: Int = NamespaceLabels.defaultCapacity) { self.capacity = max(1, capacity) }

    func holds(_ namespace: String) -> Bool { known.contains(namespace) }

    mutating func admit(_ namespace: String) {
        if known.count < capacity { known.insert(namespace) }
    }

    /// What the store holds now. Names already known stay (their series must not flap).
    mutating func learn(_ namespaces: Set<String>) {
        for name in namespaces.subtracting(known).sorted() where known.count < capacity { known.insert(name) }
    }
}
