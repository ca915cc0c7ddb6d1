import Foundation
import Locking

/// The source of "now" for TTLs, so tests can move time instead of sleeping.
public protocol Clock: Sendable {
    func now() -> Date
    /// Whether what the database stores is stamped with the database's own clock (`now()`):
    /// one clock for every replica, so an entry is never dated in another replica's future,
    /// where no eviction (which compares write times with its own "now") could reach it.
    /// A test's clock stamps with its own time, so tests can move time by hand.
    var stampsWithDatabaseClock: Bool { get }
}

extension Clock {
    public var stampsWithDatabaseClock: Bool { false }
}

public struct SystemClock: Clock {
    public init() {}
    public func now() -> Date { Date() }
    public var stampsWithDatabaseClock: Bool { true }
}

/// A clock tests set and advance by hand.
public final class ManualClock: Clock, Sendable {
    private let current: Locked<Date>

    public init(_ start: Date = Date()) { current = Locked(start) }

    public func now() -> Date { current.value }

    public func advance(by seconds: TimeInterval) {
        current.withLock { $0 = $0.addingTimeInterval(seconds) }
    }
}
