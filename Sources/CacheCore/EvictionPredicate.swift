import Foundation

/// Which entries of one namespace `POST /evict` removes; every field given must hold (AND).
public struct EvictionPredicate: Sendable, Equatable {
    public var keys: [[UInt8]]?
    public var tag: String?
    public var model: String?
    public var version: String?
    public var createdBefore: Date?
    public var accessedBefore: Date?
    public var olderThan: Int?
    public var idleFor: Int?
    public var all = false

    public init() {}

    /// False for an empty predicate: a wipe must say `all: true`.
    public var isRestrictive: Bool {
        keys != nil || tag != nil || model != nil || version != nil || createdBefore != nil || accessedBefore != nil
            || olderThan != nil || idleFor != nil || all
    }
}
