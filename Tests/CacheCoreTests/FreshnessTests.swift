@testable import CacheCore
import Foundation
import Testing

@Suite struct FreshnessTests {
    func entry(expiresIn seconds: TimeInterval, now: Date, window: Int = 0) -> StoredEntry {
        StoredEntry(id: 1, namespace: "n", key: [1], body: [], encoding: .identity, contentType: "t", identitySize: 0,
                    etag: "e", model: nil, metadata: nil, inputTokens: 0, outputTokens: 0, updatedAt: now,
                    expiresAt: now.addingTimeInterval(seconds), staleWhileRevalidate: window)
    }

    @Test func wholeSecondsTolerateMicrosecondNoise() {
        let now = Date(timeIntervalSince1970: 1_780_000_000.123456)
        #expect(Freshness.of(entry(expiresIn: 6.000_000_4, now: now), now: now, maxStale: nil) == .fresh(ttl: 6))
        #expect(Freshness.of(entry(expiresIn: 5.999_999_6, now: now), now: now, maxStale: nil) == .fresh(ttl: 6))
        #expect(Freshness.of(entry(expiresIn: 5.5, now: now), now: now, maxStale: nil) == .fresh(ttl: 6))
        #expect(Freshness.of(entry(expiresIn: -9.999_999_7, now: now), now: now, maxStale: 60) == .stale(by: 10))
        #expect(Freshness.of(entry(expiresIn: -10.000_000_3, now: now), now: now, maxStale: 60) == .stale(by: 10))
        #expect(Freshness.of(entry(expiresIn: -10.5, now: now), now: now, maxStale: 10) == .expired)
        #expect(Freshness.of(entry(expiresIn: -9.9, now: now), now: now, maxStale: 10) == .stale(by: 9))
        #expect(Freshness.of(entry(expiresIn: -11.2, now: now), now: now, maxStale: 10) == .expired)
        #expect(Freshness.of(entry(expiresIn: -1, now: now), now: now, maxStale: nil) == .expired)
        #expect(Freshness.of(entry(expiresIn: -99_999, now: now), now: now, maxStale: Int.max) == .stale(by: 99_999))
    }

    /// `max-stale=0` serves nothing past expiry, however little past it (the overdue time was
    /// rounded down, so an entry up to a second past expiry was served).
    @Test func maxStaleZeroServesNothingExpired() {
        let now = Date(timeIntervalSince1970: 1_780_000_000.25)
        for overdue in [0.000_1, 0.2, 0.5, 0.999] {
            #expect(Freshness.of(entry(expiresIn: -overdue, now: now), now: now, maxStale: 0) == .expired, "\(overdue)")
        }
        #expect(Freshness.of(entry(expiresIn: 0.5, now: now), now: now, maxStale: 0) == .fresh(ttl: 1))
        #expect(Freshness.of(entry(expiresIn: -0.5, now: now), now: now, maxStale: 1) == .stale(by: 1))
        #expect(Freshness.of(entry(expiresIn: -1.5, now: now), now: now, maxStale: 1) == .expired)
    }

    /// The stale-while-revalidate window: [expiry, expiry + N), before any max-stale.
    @Test func theRevalidateWindowComesBeforeMaxStale() {
        let now = Date(timeIntervalSince1970: 1_780_000_000.5)
        func windowed(_ seconds: TimeInterval, _ window: Int) -> StoredEntry {
            entry(expiresIn: seconds, now: now, window: window)
        }
        #expect(Freshness.of(windowed(5, 10), now: now, maxStale: nil) == .fresh(ttl: 5))
        #expect(Freshness.of(windowed(-0.2, 10), now: now, maxStale: nil) == .revalidate(by: 1))
        #expect(Freshness.of(windowed(-9.5, 10), now: now, maxStale: nil) == .revalidate(by: 9))
        #expect(Freshness.of(windowed(-10, 10), now: now, maxStale: nil) == .expired)
        #expect(Freshness.of(windowed(-10, 10), now: now, maxStale: 60) == .stale(by: 10))
        #expect(Freshness.of(windowed(-3, 10), now: now, maxStale: 60) == .revalidate(by: 3))
        #expect(Freshness.of(windowed(-1, 0), now: now, maxStale: nil) == .expired)
    }
}
