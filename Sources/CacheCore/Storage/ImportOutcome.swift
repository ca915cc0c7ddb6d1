/// What importing one entry did (migration 0011's outcomes).
public enum ImportOutcome: String, Sendable, CaseIterable {
    case imported, unchanged, skipped
    /// Its expiry and window had passed already: not imported.
    case expired
    /// A byte cap of the store or the namespace would be passed; nothing stored.
    case storeFull = "store_full"
}

/// What an import does with an entry already stored under the key.
public enum ImportConflictPolicy: String, Sendable, CaseIterable {
    case skip, replace, newer
}
