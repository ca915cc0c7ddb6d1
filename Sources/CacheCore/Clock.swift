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

/// Seconds since boot, from the clock the kernel last ticked (`CLOCK_MONOTONIC_COARSE`: at
/// most one tick, 1-10 ms, behind the precise one), for timeouts counted in seconds on the
/// hit path. It is read without the time-stamp counter: a few nanoseconds where
/// `ProcessInfo.systemUptime` (the precise clock, through Foundation) cost ~30 ns a read, and a
/// near-cache hit read it twice (perf, `bench/near.sh`). Only ever compare it with itself:
/// a precise reading may be a tick ahead.
public enum Uptime {
    public static var coarse: TimeInterval {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC_COARSE, &now)
        return TimeInterval(now.tv_sec) + TimeInterval(now.tv_nsec) / 1e9
    }
}
