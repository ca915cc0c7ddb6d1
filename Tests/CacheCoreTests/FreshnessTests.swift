@testable import CacheCore
import Foundation
import Testing

@Suite struct FreshnessTests {
    func entry(expiresIn seconds: TimeInterval, now: Date) -> StoredEntry {
        StoredEntry(id: 1, namespace: "n", key: [1], body: [], encoding: .identity, contentType: "t", identitySize: 0,
                    etag: "e", model: nil, metadata: nil, inputTokens: 0, outputTokens: 0, updatedAt: now,
                    expiresAt: now.addingTimeInterval(seconds))
    }

    @Test func wholeSecondsTolerateMicrosecondNoise() {
        let now = Date(timeIntervalSince1970: 1_780_000_000.123456)
        #expect(Freshness.of(entry(expiresIn: 6.000_000_4, now: now), now: now, maxStale: nil) == .fresh(ttl: 6))
        #expect(Freshness.of(entry(expiresIn: 5.999_999_6, now: now), now: now, maxStale: nil) == .fresh(ttl: 6))
        #expect(Freshness.of(entry(expiresIn: 5.5, now: now), now: now, maxStale: nil) == .fresh(ttl: 6))
        #expect(Freshness.of(entry(expiresIn: -9.999_999_7, now: now), now: now, maxStale: 60) == .stale(by: 10))
        #expect(Freshness.of(entry(expiresIn: -10.000_000_3, now: now), now: now, maxStale: 60) == .stale(by: 10))
        #expect(Freshness.of(entry(expiresIn: -10.5, now: now), now: now, maxStale: 10) == .stale(by: 10))
        #expect(Freshness.of(entry(expiresIn: -11.2, now: now), now: now, maxStale: 10) == .expired)
        #expect(Freshness.of(entry(expiresIn: -1, now: now), now: now, maxStale: nil) == .expired)
        #expect(Freshness.of(entry(expiresIn: -99_999, now: now), now: now, maxStale: Int.max) == .stale(by: 99_999))
    }
}
