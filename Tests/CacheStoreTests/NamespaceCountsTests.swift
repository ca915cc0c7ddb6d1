import CacheCore
@testable import CacheStore
import Foundation
import Postgres
import Testing
import TestSupport

/// The label cap bounds metric series, not the stats: a namespace that holds entries but
/// has no label of its own (past the cap) still has its lookups written to PostgreSQL under
/// its own name, while its series fold into `_other`. A namespace that holds nothing still
/// gets nothing written (a token asking for names at random makes no rows).
@Suite struct NamespaceCountsTests {
    @Test func aHeldNamespacePastTheLabelCapKeepsItsOwnCounts() throws {
        let database = try TestDatabase.shared.migratedDatabase(prefix: "counts")
        let pool = TestDatabase.shared.pool(on: database, maxConnections: 1)
        let tracker = AccessTracker(pool: pool, labels: NamespaceLabels(capacity: 1, provisionalCapacity: 0))
        // Learnt in sorted order: "a-held" takes the one label, "b-held" is past the cap.
        tracker.learnNamespaces(["a-held", "b-held"])
        let now = Date()
        for namespace in ["a-held", "b-held", "b-held", "c-empty"] { tracker.record(.miss, namespace: namespace, at: now) }
        // A hit proves a namespace holds something, learnt or not.
        let entry = StoredEntry(id: 1, namespace: "d-hit", key: [1], body: [], encoding: .identity, contentType: "t",
                                identitySize: 0, etag: "e", model: nil, metadata: nil, inputTokens: 3,
                                outputTokens: 4, updatedAt: now, expiresAt: now.addingTimeInterval(60))
        tracker.record(.hit, namespace: "d-hit", entry: entry, at: now)
        tracker.record(.miss, namespace: "d-hit", at: now)

        let series = tracker.totals()
        #expect(Set(series.keys) == ["a-held", NamespaceLabels.other], "\(series.keys.sorted())")
        #expect(series[NamespaceLabels.other]?.misses == 4 && series[NamespaceLabels.other]?.hits == 1)

        try tracker.flush()
        let connection = try TestDatabase.shared.connect(database: database)
        let rows = try connection.query("""
            SELECT namespace, sum(hits)::int8 AS hits, sum(misses)::int8 AS misses,
                   sum(output_tokens_saved)::int8 AS tokens
            FROM counter_deltas GROUP BY namespace
            """).rows
        var written: [String: [Int]] = [:]
        for row in rows {
            written[try row.string("namespace") ?? ""] = [try row.int("hits") ?? -1, try row.int("misses") ?? -1,
                                                         try row.int("tokens") ?? -1]
        }
        #expect(written["a-held"] == [0, 1, 0])
        #expect(written["b-held"] == [0, 2, 0], "a held namespace past the cap lost its counts")
        #expect(written["d-hit"] == [1, 1, 4])
        #expect(written["c-empty"] == nil)
        // Only the namespace that holds nothing is left under `_other` (the fold drops it).
        #expect(written[NamespaceLabels.other] == [0, 1, 0])
    }

    /// A flush that fails gives a namespace past the cap its counts back under its own name.
    @Test func aFailedFlushKeepsCountsPastTheCap() throws {
        let nowhere = "postgresql://postgres@%2Ftmp%2Ftc-nowhere-\(getpid()):1/none"
        let dead = ConnectionPool(.init(url: nowhere, maxConnections: 1, acquireTimeout: 0.2))
        let tracker = AccessTracker(pool: dead, labels: NamespaceLabels(capacity: 1, provisionalCapacity: 0))
        tracker.learnNamespaces(["a-held", "b-held"])
        tracker.record(.miss, namespace: "b-held", at: Date())
        #expect(throws: (any Error).self) { try tracker.flush() }
        let kept = tracker.state.withLock { state -> Int? in
            var copy = state.unlabelled["b-held"]
            return copy?.takePending().map(\.counts.misses).reduce(0, +)
        }
        #expect(kept == 1)
        #expect(tracker.state.withLock { $0.namespaces["b-held"] } == nil, "the label map stays bounded")
    }
}
