/// A bounded map that forgets the least recently used keys first, approximately, in O(1):
/// two generations, each up to half the capacity. A hit in the old generation moves the key
/// to the new one; when the new one is full, the old one is dropped whole and the new one
/// takes its place. So a burst of new keys (say, a flood of made-up tokens) can push out
/// only keys not used since the previous turnover, never every key at once.
struct GenerationalCache<Key: Hashable, Value> {
    private var young: [Key: Value] = [:]
    private var old: [Key: Value] = [:]
    private let half: Int

    init(capacity: Int) { half = max(1, capacity / 2) }

    var count: Int { young.count + old.count }

    mutating func value(_ key: Key) -> Value? {
        if let value = young[key] { return value }
        guard let value = old.removeValue(forKey: key) else { return nil }
        insert(key, value)
        return value
    }

    mutating func insert(_ key: Key, _ value: Value) {
        if young[key] == nil && young.count >= half {
            old = young
            young = [:]
            young.reserveCapacity(half)
        }
        young[key] = value
        old[key] = nil
    }

    mutating func remove(_ key: Key) {
        young[key] = nil
        old[key] = nil
    }
}
