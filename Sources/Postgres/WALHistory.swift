import Foundation
import Locking

/// Where the primary's write-ahead log stood over the last minute, sampled a few times a
/// second: it turns a standby's replayed position into an honest bound on how stale that
/// standby's answers are. A standby that has replayed up to `p` holds everything the
/// primary had written when it stood at `p` or before; if the primary stood there at time
/// `t`, the standby is at most `now - t` behind, whether or not anything was written since.
public final class WALHistory: Sendable {
    /// A ring of samples: `next` is where the next one goes once the ring is full.
    private struct Ring {
        var samples: [(at: UInt64, position: WALPosition)] = []
        var next = 0
    }

    private let ring = Locked(Ring())
    private let capacity: Int
    /// Samples older than this say nothing about now: the primary is not being sampled.
    private let current: UInt64

    /// `capacity` samples kept (a minute at 10 a second by default); the newest must be
    /// younger than `currentFor` seconds to answer at all.
    public init(capacity: Int = 600, currentFor: TimeInterval = 1) {
        self.capacity = max(1, capacity)
        current = UInt64(max(0, currentFor) * 1e9)
    }

    /// Monotonic nanoseconds (CLOCK_MONOTONIC, the clock the event loops' `nanoseconds` read).
    public static var now: UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }

    /// The primary stood at `position` at monotonic time `at` (nanoseconds).
    public func record(_ position: WALPosition, at: UInt64) {
        ring.withLock { ring in
            if ring.samples.count < capacity {
                ring.samples.append((at, position))
            } else {
                ring.samples[ring.next] = (at, position)
            }
            ring.next = (ring.next + 1) % capacity
        }
    }

    /// The monotonic time (nanoseconds) as of which a standby that has replayed `replayed`
    /// is known to be current: the last sample at or before that position. nil when no
    /// sample is that old, or the newest sample is not current at `now` (unknown: treat
    /// the standby as too far behind).
    public func currentAsOf(replayed: WALPosition, now: UInt64) -> UInt64? {
        ring.withLock { ring in
            let samples = ring.samples
            guard !samples.isEmpty else { return nil }
            let newest = (ring.next + samples.count - 1) % samples.count
            guard now &- samples[newest].at <= current || samples[newest].at > now else { return nil }
            // Newest first: a standby keeping up matches the first or second sample.
            for step in 0..<samples.count {
                let sample = samples[(newest + samples.count - step) % samples.count]
                if sample.position <= replayed { return sample.at }
            }
            return nil
        }
    }
}
