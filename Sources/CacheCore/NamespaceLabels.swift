/// Which namespaces get their own lookup stats and metric series: those that hold entries
/// or have settings, up to `capacity`. Any other name a request mentions (a namespace that
/// holds nothing, or one past the cap) is counted under `other`, so no token can grow the
/// server's memory or `/metrics` by asking for namespaces at random.
///
/// Kept by the access tracker under its lock; learnt from the store by the namespace-gauges
/// refresh (so every replica hears of the others' namespaces within its interval), from
/// this replica's own writes, and from hits (a hit proves the namespace holds an entry).
///
/// A namespace that holds nothing yet is labelled provisionally when a token that may write
/// it asks for it (its first burst of misses is its own: a new namespace's ratio must not read
/// 1.0 because its misses went to `_other`). Provisional labels have a small cap of their
/// own, so a token that may write everywhere and asks for names at random cannot take the
/// places of real namespaces; one becomes real when the namespace comes to hold something.
public struct NamespaceLabels: Sendable {
    /// The label of everything folded together (not a valid namespace: it cannot collide).
    public static let other = "_other"
    public static let defaultCapacity = 1000
    public static let defaultProvisionalCapacity = 100

    public let capacity: Int
    public let provisionalCapacity: Int
    private(set) var known: Set<String> = []
    /// The labels given to namespaces that held nothing then (a subset of `known`).
    private(set) var provisional: Set<String> = []

    public init(capacity: Int = NamespaceLabels.defaultCapacity,
                provisionalCapacity: Int = NamespaceLabels.defaultProvisionalCapacity) {
        self.capacity = max(1, capacity)
        self.provisionalCapacity = max(0, provisionalCapacity)
    }

    /// Labels of every kind at most.
    public var totalCapacity: Int { capacity + provisionalCapacity }

    package func holds(_ namespace: String) -> Bool { known.contains(namespace) }

    /// A namespace that holds an entry or settings.
    package mutating func admit(_ namespace: String) {
        // Real labels stay within `capacity`: a provisional one is promoted only while there
        // is room (else it stays provisional, holding its provisional place).
        guard known.count - provisional.count < capacity else { return }
        if provisional.remove(namespace) != nil { return }
        known.insert(namespace)
    }

    /// A namespace a token that may write it asks for, holding nothing yet.
    package mutating func admitProvisionally(_ namespace: String) {
        guard !known.contains(namespace), provisional.count < provisionalCapacity else { return }
        known.insert(namespace)
        provisional.insert(namespace)
    }

    /// What the store holds now. Names already known stay (their series must not flap).
    package mutating func learn(_ namespaces: Set<String>) {
        for name in namespaces.sorted() { admit(name) }
    }
}
