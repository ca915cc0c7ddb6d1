/// The order of entries by (namespace, key) bytes: how PostgreSQL orders `COLLATE "C"` text
/// (its bytes) and bytea, and so the order every writer takes entry rows' locks in
/// (docs/consistency.md). Statements that write many rows send them already in it.
public enum KeyOrder {
    /// Whether (`namespace`, `key`) comes strictly before (`otherNamespace`, `otherKey`).
    public static func precedes(_ namespace: String, _ key: [UInt8], _ otherNamespace: String, _ otherKey: [UInt8]) -> Bool {
        // Bytes, not `String` comparison: Swift's `==` and `<` on strings are Unicode's canonical
        // equivalence and order ("é" == "e\u{301}"), which PostgreSQL's "C" collation is not.
        let (bytes, otherBytes) = (namespace.utf8, otherNamespace.utf8)
        if !bytes.elementsEqual(otherBytes) { return bytes.lexicographicallyPrecedes(otherBytes) }
        return key.lexicographicallyPrecedes(otherKey)
    }
}
