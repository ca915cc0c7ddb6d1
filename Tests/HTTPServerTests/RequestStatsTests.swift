@testable import HTTPServer
import Testing

/// A loop's request stats find the last request's series by position: counted by hand, every
/// series must agree, whether requests repeat one key, alternate, or add keys (which regrows
/// the table and moves every position) between repeats.
@Suite struct RequestStatsTests {
    @Test func everyRequestIsCountedInItsOwnSeries() {
        var generator = SystemRandomNumberGenerator()
        let stats = RequestStats()
        var expected: [RequestStats.Key: (count: UInt64, sum: Double)] = [:]
        let methods = ["GET", "HEAD", "PUT", "POST", "DELETE", "PATCH"]
        for step in 0..<20_000 {
            // Runs of one key, keys never seen, and a few hot keys in between (the first one hot:
            // it is seen again after many keys were added).
            let route = Int.random(in: step % 7 == 6 ? -2..<200 : 0..<3, using: &generator)
            let method = methods.randomElement(using: &generator)!
            let status = [200, 201, 304, 404, 503].randomElement(using: &generator)!
            let seconds = Double(Int.random(in: 0..<3_000, using: &generator)) / 1_000
            for _ in 0..<Int.random(in: 1...3, using: &generator) {
                stats.observe(route: route, method: method, status: status, seconds: seconds)
                let key = RequestStats.Key(route: route, method: RequestStats.methodCode(method),
                                           statusClass: UInt8(status / 100))
                expected[key, default: (0, 0)].count += 1
                expected[key, default: (0, 0)].sum += seconds
            }
        }
        let snapshot = stats.snapshot()
        #expect(snapshot.count == expected.count)
        for (key, series) in snapshot {
            #expect(series.count == expected[key]?.count && series.buckets.reduce(0, +) == series.count)
            #expect(abs(series.sum - (expected[key]?.sum ?? -1)) < 1e-6)
        }
    }
}
