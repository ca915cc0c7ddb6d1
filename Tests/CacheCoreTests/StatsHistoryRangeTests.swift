import CacheCore
import CacheKeys
import Foundation
import Testing

/// `HistoryRange` (which points a history answer holds) and `PriceTable` (what a hit saved).
@Suite struct StatsHistoryRangeTests {
    let policy = CachePolicy()
    let now = Date(timeIntervalSince1970: 1_796_400_000 + 1234)

    func range(_ since: Double?, _ until: Double? = nil, step: Int? = nil) throws -> HistoryRange {
        try HistoryRange(since: since.map { now.addingTimeInterval($0) }, until: until.map { now.addingTimeInterval($0) },
                         step: step, now: now, policy: policy)
    }

    @Test func pointsAreAlignedContiguousAndEndWithTheStepNowIsIn() throws {
        for step in HistoryRange.steps {
            let asked = try range(-Double(20 * step) - 17, step: step)
            #expect(asked.since % step == 0 && asked.until % step == 0)
            #expect(asked.until - step <= Int(now.timeIntervalSince1970) && Int(now.timeIntervalSince1970) < asked.until)
            #expect(asked.count == 21 || asked.count == 22, "step \(step): \(asked.count)")
        }
        // Until in the future ends now; the default is the last 24 hours in minutes.
        #expect(try range(-3600, 86400, step: 60).until == (try range(-3600, step: 60)).until)
        let defaults = try range(nil)
        #expect(defaults.step == 60 && (1440...1441).contains(defaults.count))
    }

    @Test func aStepIsChosenOrRefusedWhenItIsTooSmall() throws {
        #expect(try range(-7 * 86400).step == 3600)
        #expect(try range(-300 * 86400).step == 86400)
        #expect(throws: HistoryRange.Refusal.self) { try range(-3 * 86400, step: 60) }
        #expect(throws: HistoryRange.Refusal.self) { try range(-3600, step: 120) }
        #expect(throws: HistoryRange.Refusal.self) { try range(-60, -120) }
        #expect(throws: HistoryRange.Refusal.self) { try range(3600) }
    }

    /// Minute points older than their retention are not offered as zeros: the range starts at
    /// the oldest point kept.
    @Test func aRangeStartsNoEarlierThanItsStepsRetention() throws {
        var short = policy
        short.minutePointRetention = 3600
        let clamped = try HistoryRange(since: now.addingTimeInterval(-86400), until: nil, step: 60, now: now, policy: short)
        #expect(clamped.since >= Int(now.timeIntervalSince1970) - 3600 && clamped.count <= 61)
        // Clamped before counting: all the days kept is an answer, not a refusal.
        let all = try HistoryRange(since: Date(timeIntervalSince1970: 0), until: nil, step: 86400, now: now, policy: policy)
        #expect(all.count <= 401 && all.since > 0)
        #expect(try HistoryRange(since: Date(timeIntervalSince1970: 0), until: nil, step: nil, now: now, policy: policy)
            .step == 86400)
    }

    @Test func countsSumIntoTheirPointAndLevelsCarryForward() throws {
        let asked = try range(-600, step: 60)
        var sample = StatsPoint(t: asked.since + 120)
        sample.hits = 2
        var other = sample
        other.t = asked.since + 120
        other.hits = 3
        let points = asked.points(samples: [sample, other], levels: [asked.since + 240: (500, 2)], carried: (100, 1))
        #expect(points.count == asked.count && points[2].hits == 5 && points.map(\.hits).reduce(0, +) == 5)
        #expect(points[0].storedBytes == 100 && points[3].storedBytes == 100 && points[4].storedBytes == 500)
        #expect(points.last?.entries == 2)
    }

    @Test func aHitIsPricedByItsExactModelFirstThenTheFirstGlob() throws {
        let table = try PriceTable.parse(try JSONParser.parse("""
            [{"model": "gpt-*", "input": 1, "output": 2}, {"model": "gpt-4*", "input": 3, "output": 4},
             {"model": "gpt-4o", "input": 5, "output": 6}]
            """))
        #expect(table.price(for: "gpt-4o")?.input == 5)
        #expect(table.price(for: "gpt-4-turbo")?.input == 1)
        #expect(table.price(for: "claude") == nil)
        // 1,000 input and 100 output tokens at 5 and 6 per million: 0.0056, in billionths.
        #expect(PriceTable.nanos(try #require(table.price(for: "gpt-4o")), input: 1000, output: 100) == 5_600_000)
        var book = PriceBook(server: table)
        #expect(book.nanos(namespace: "a", model: "gpt-4o", input: 1000, output: 100) == 5_600_000)
        book.setNamespace("a", PriceTable([PriceTable.Price(model: "gpt-4o", input: 0, output: 0)]))
        #expect(book.nanos(namespace: "a", model: "gpt-4o", input: 1000, output: 100) == 0)
        #expect(book.nanos(namespace: "a", model: "gpt-4-turbo", input: 1000, output: 0) == 1_000_000)
        #expect(book.nanos(namespace: "b", model: "gpt-4o", input: 1000, output: 100) == 5_600_000)
        #expect(book.nanos(namespace: "b", model: nil, input: 1000, output: 100) == 0)
    }
}
