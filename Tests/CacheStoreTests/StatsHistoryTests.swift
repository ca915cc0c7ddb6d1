import CacheCore
@testable import CacheStore
import Foundation
import Locking
import Postgres
import Testing
import TestSupport

/// The stats history (migration 0015): lookups counted on a test clock land in the minute and
/// hour they happened in, whatever minute they are flushed or folded in; every step's points
/// sum to the totals `/stats` reads; two folders racing write each delta once; the eviction
/// cycle's trim keeps what the retention says.
@Suite struct StatsHistoryTests {
    static let price = PriceTable.Price(model: "hist-model", input: 2, output: 8)
    /// What one answer from an entry of 100 input and 50 output tokens saved at that price.
    static let costOfOneHit = 100 * 2 * 1000 + 50 * 8 * 1000

    struct Fixture {
        let clock: ManualClock
        let store: EntryStore
        let tracker: AccessTracker
        let namespace: Namespace
        let hour: Int

        init(_ name: String) throws {
            let shared = TestService.shared.app.store
            // Three hours back, 90 s before an hour ends: the test crosses a minute, then the hour.
            let hour = (Int(Date().timeIntervalSince1970) / 3600 - 3) * 3600
            clock = ManualClock(Date(timeIntervalSince1970: Double(hour + 3600 - 90)))
            store = EntryStore(pool: shared.pool, policy: shared.policy, clock: clock)
            tracker = AccessTracker(pool: shared.pool)
            tracker.setServerPrices(PriceTable([StatsHistoryTests.price]))
            namespace = try #require(Namespace(TestService.namespace(name)))
            tracker.admitNamespace(namespace.name)
            self.hour = hour
        }

        func write(_ key: String) throws -> StoredEntry {
            var write = EntryWrite(namespace: namespace, key: EntryKey(Array(key.utf8))!,
                                   body: StoredBody.fromIdentity(Array(repeating: 7, count: 300), contentType: "text/plain",
                                                                 policy: store.policy),
                                   contentType: "text/plain")
            write.model = StatsHistoryTests.price.model
            write.inputTokens = 100
            write.outputTokens = 50
            _ = try store.putOne(write)
            return try #require(try store.fetch(namespace, EntryKey(Array(key.utf8))!))
        }

        func record(_ lookup: AccessTracker.Lookup, _ entry: StoredEntry?, times: Int = 1) {
            for _ in 0..<times { tracker.record(lookup, namespace: namespace.name, entry: entry, at: clock.now()) }
        }

        func history(step: Int) throws -> [StatsPoint] {
            let range = try HistoryRange(since: Date(timeIntervalSince1970: Double(hour - 3600)), until: nil, step: step,
                                         now: clock.now(), policy: store.policy)
            return try store.history(namespace, range)
        }
    }

    /// The access tracker flushes lookups of minutes whose writes were folded already: a fold
    /// of those late counts keeps the minutes' levels (it once gave them the totals as of that
    /// fold: 2 entries at 58:30, when the second was written an hour later). Interleaved on
    /// purpose: both writes folded, then the lookups flushed and folded.
    @Test func lateLookupCountsKeepTheLevelsOfTheirMinutes() throws {
        let fixture = try Fixture("hist-late")
        let hour = fixture.hour
        let entry = try fixture.write("a")              // 58:30
        fixture.record(.hit, entry, times: 3)
        fixture.clock.advance(by: 45)                    // 59:15
        fixture.record(.hit, entry, times: 2)
        fixture.clock.advance(by: 60)                    // 00:15 of the next hour
        _ = try fixture.write("b")
        try fixture.fold()                               // the writes, not the lookups
        try fixture.tracker.flush()
        try fixture.fold()                               // the lookups, late
        let minutes = try fixture.history(step: 60)
        func at(_ t: Int) -> StatsPoint { minutes.first { $0.t == t } ?? StatsPoint(t: -1) }
        let m58 = at(hour + 58 * 60), m59 = at(hour + 59 * 60), next = at(hour + 3600)
        #expect((m58.hits, m59.hits) == (3, 2))
        #expect((m58.entries, m59.entries, next.entries) == (1, 1, 2), "\(m58.entries) \(m59.entries) \(next.entries)")
    }

    @Test func lookupsAndWritesLandInTheMinuteAndHourTheyHappenedIn() throws {
        let fixture = try Fixture("hist-bounds")
        let hour = fixture.hour
        // 58:30 — one write, three hits, a miss.
        let entry = try fixture.write("a")
        fixture.record(.hit, entry, times: 3)
        fixture.record(.miss, nil)
        // 59:15 — two hits: another minute, same flush.
        fixture.clock.advance(by: 45)
        fixture.record(.hit, entry, times: 2)
        // 00:15 of the next hour — a hit, a stale answer, a collapsed one, another write.
        fixture.clock.advance(by: 60)
        fixture.record(.hit, entry)
        fixture.record(.stale, entry)
        fixture.record(.collapsed, entry)
        _ = try fixture.write("b")
        try fixture.tracker.flush()
        // Not folded yet: the history already counts what waits to be folded.
        let beforeFold = try (fixture.history(step: 60), fixture.history(step: 3600), fixture.history(step: 86400))
        try fixture.fold()
        let minutes = try fixture.history(step: 60), hours = try fixture.history(step: 3600)
        let days = try fixture.history(step: 86400)
        #expect(beforeFold.0 == minutes && beforeFold.1 == hours && beforeFold.2 == days)

        // Every point present, none twice, each a step after the last.
        for (points, step) in [(minutes, 60), (hours, 3600), (days, 86400)] {
            #expect(zip(points, points.dropFirst()).allSatisfy { $1.t == $0.t + step }, "step \(step)")
            #expect(points.first?.t ?? 1 <= hour - 3600 && points.last?.t ?? 0 >= hour + 3600 - step, "step \(step)")
        }
        func at(_ points: [StatsPoint], _ t: Int) -> StatsPoint { points.first { $0.t == t } ?? StatsPoint(t: -1) }
        let m58 = at(minutes, hour + 58 * 60), m59 = at(minutes, hour + 59 * 60), next = at(minutes, hour + 3600)
        #expect((m58.hits, m58.misses, m58.writes, m58.stale) == (3, 1, 1, 0))
        #expect((m59.hits, m59.misses, m59.writes) == (2, 0, 0))
        #expect((next.hits, next.collapsed, next.stale, next.writes) == (2, 1, 1, 1))
        #expect(m58.costSavedNanos == 3 * Self.costOfOneHit && next.costSavedNanos == 3 * Self.costOfOneHit)
        #expect((m58.inputTokensSaved, m58.outputTokensSaved) == (300, 150))
        let h0 = at(hours, hour), h1 = at(hours, hour + 3600)
        #expect((h0.hits, h0.misses, h0.writes) == (5, 1, 1) && (h1.hits, h1.stale, h1.collapsed, h1.writes) == (2, 1, 1, 1))
        // Bytes are levels: one entry after 58:30, two after the next hour's write.
        #expect(m58.entries == 1 && m59.entries == 1 && next.entries == 2 && minutes.last?.entries == 2,
                "\(m58.entries) \(m59.entries) \(next.entries) \(minutes.last?.entries ?? -1)")
        #expect(at(minutes, hour + 57 * 60).entries == 0)

        // Each step's points sum to the totals /stats reads.
        let totals = try fixture.store.stats(fixture.namespace, top: 0)
        for points in [minutes, hours, days] {
            var sum = StatsPoint(t: 0)
            for point in points { sum.addCounts(point) }
            #expect((sum.hits, sum.misses, sum.stale, sum.collapsed, sum.writes) ==
                    (totals.hits, totals.misses, totals.stale, totals.collapsed, totals.writes))
            #expect((sum.inputTokensSaved, sum.outputTokensSaved, sum.costSavedNanos) ==
                    (totals.inputTokensSaved, totals.outputTokensSaved, totals.costSavedNanos))
            #expect(points.last?.storedBytes == totals.storedBytes && points.last?.entries == totals.entries)
        }
        #expect(totals.costSavedNanos == 8 * Self.costOfOneHit && totals.hits == 7 && totals.writes == 2)
    }

    /// Four folders at once (the replicas' folders, and the eviction cycle's) while deltas
    /// keep coming: each delta is in the totals once and in each step's rollup once.
    @Test func foldersRacingWriteEachPointOnce() throws {
        let shared = TestService.shared.app.store
        let namespace = TestService.namespace("hist-race")
        let minute = (Int(Date().timeIntervalSince1970) / 60 - 5) * 60
        let insert = """
            INSERT INTO counter_deltas (namespace, hits, writes, at)
            SELECT $1, 1, 2, to_timestamp($2 + (g % 3) * 60) FROM generate_series(1, 50) AS g
            """
        let rounds = 40
        try concurrently(5) { worker in
            for _ in 0..<rounds {
                try shared.pool.withConnection { connection in
                    if worker == 0 {
                        _ = try connection.query(insert, [.text(namespace), .int(minute)])
                    } else {
                        _ = try EntryStore.foldCounters(on: connection, wait: worker.isMultiple(of: 2))
                    }
                }
            }
        }
        try shared.pool.withConnection { _ = try EntryStore.foldCounters(on: $0, wait: true) }
        let sums = try shared.pool.withConnection { connection in
            try connection.query("""
                SELECT step, sum(hits)::bigint AS hits, sum(writes)::bigint AS writes, count(*)::bigint AS points
                FROM stats_history WHERE namespace = $1 GROUP BY step ORDER BY step
                """, [.text(namespace)]).rows.map { (try $0.int("step"), try $0.int("hits"), try $0.int("writes"),
                                                       try $0.int("points")) }
        }
        #expect(sums.count == 2)
        for (step, hits, writes, points) in sums {
            #expect(hits == rounds * 50 && writes == rounds * 100, "step \(step ?? 0)")
            #expect(points == (step == 60 ? 3 : Set((0..<3).map { (minute + $0 * 60) / 3600 }).count))
        }
        let namespaceValue = try #require(Namespace(namespace))
        #expect(try shared.stats(namespaceValue, top: 0).hits == rounds * 50)
    }

    /// Minute points past their retention go, hour points past theirs go, the rest stay.
    @Test func theTrimKeepsWhatTheRetentionSays() throws {
        let shared = TestService.shared.app.store
        let namespace = TestService.namespace("hist-trim")
        var policy = shared.policy
        policy.minutePointRetention = 48 * 3600
        policy.hourPointRetention = 400 * 86400
        let now = Int(Date().timeIntervalSince1970) / 3600 * 3600
        let rows: [(step: Int, age: Int, kept: Bool)] = [
            (60, 49 * 3600, false), (60, 47 * 3600, true), (3600, 401 * 86400, false), (3600, 399 * 86400, true),
            (3600, 49 * 3600, true),
        ]
        let kept = try shared.pool.withConnection { connection -> [Int] in
            for row in rows {
                _ = try connection.query("""
                    INSERT INTO stats_history (namespace, step, t, hits) VALUES ($1, $2, to_timestamp($3), 1)
                    """, [.text(namespace), .int(row.step), .int(now - row.age)])
            }
            _ = try EntryStore.trimHistory(now: Date(timeIntervalSince1970: Double(now)), policy: policy, on: connection)
            return try connection.query("""
                SELECT extract(epoch FROM t)::bigint AS t FROM stats_history WHERE namespace = $1 ORDER BY t
                """, [.text(namespace)]).rows.compactMap { try $0.int("t") }
        }
        #expect(kept == rows.filter(\.kept).map { now - $0.age }.sorted())
    }
}

extension StatsHistoryTests {
    /// On one connection (its prepared statements are typed by their first call): settings
    /// without prices, then with them. The prices were once sent as text to a parameter the
    /// first call had let PostgreSQL type as jsonb ("unsupported jsonb version number 91").
    @Test func pricesFollowSettingsWithoutThemOnOneConnection() throws {
        let pool = try TestDatabase.shared.migratedPool(prefix: "prices", maxConnections: 1)
        defer { pool.closeIdle() }
        let store = EntryStore(pool: pool, policy: CachePolicy())
        let namespace = try #require(Namespace("priced"))
        try store.setSettings(namespace, NamespaceSettings(defaultTTL: 60))
        let prices = PriceTable([PriceTable.Price(model: "m*", input: 1, output: 2)])
        try store.setSettings(namespace, NamespaceSettings(defaultTTL: 60, prices: prices))
        #expect(try store.settings(namespace).prices == prices)
        #expect(try store.namespacePrices() == ["priced": prices])
        try store.setSettings(namespace, NamespaceSettings(defaultTTL: 60))
        #expect(try store.settings(namespace).prices == nil)
    }
}

extension StatsHistoryTests.Fixture {
    /// Folds now, waiting for a fold another test runs (so what was flushed is folded).
    func fold() throws {
        try store.pool.withConnection { _ = try EntryStore.foldCounters(on: $0, wait: true) }
    }
}

/// Runs `body` on `count` threads of its own at once (not a pool's: on two cores a pool would
/// run them one after another) and rethrows the first failure.
func concurrently(_ count: Int, _ body: @escaping @Sendable (Int) throws -> Void) throws {
    let failures = Locked<[any Error]>([])
    let done = DispatchGroup()
    for index in 0..<count {
        done.enter()
        Thread {
            do { try body(index) } catch { failures.withLock { $0.append(error) } }
            done.leave()
        }.start()
    }
    done.wait()
    if let first = failures.value.first { throw first }
}
