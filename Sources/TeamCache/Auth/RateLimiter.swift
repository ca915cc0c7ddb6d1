import CacheCore
import Foundation
import Locking

/// A token bucket per API token, in memory per replica: `rate` requests a second with
/// bursts up to `burst`.
final class RateLimiter: Sendable {
    private struct Bucket {
        var tokens: Double
        var updated: TimeInterval
    }

    private let rate: Double
    private let burst: Double
    private let buckets = Locked<[Int64: Bucket]>([:])

    init(rate: Double, burst: Double) {
        self.rate = rate
        self.burst = burst
    }

    /// nil when allowed; otherwise the seconds to wait before a request would be.
    func admit(_ tokenID: Int64, now: TimeInterval = Uptime.coarse) -> Int? {
        buckets.withLock { buckets in
            var bucket = buckets[tokenID] ?? Bucket(tokens: burst, updated: now)
            bucket.tokens = min(burst, bucket.tokens + (now - bucket.updated) * rate)
            bucket.updated = now
            defer { buckets[tokenID] = bucket }
            if bucket.tokens >= 1 {
                bucket.tokens -= 1
                return nil
            }
            // Clamped: a tiny configured rate must not turn into an Int overflow here.
            return Int(min(max(1, ((1 - bucket.tokens) / rate).rounded(.up)), 86_400))
        }
    }
}
