import CacheCore
@testable import CacheStore
import Foundation
import Locking
import Postgres
import Testing
import TestSupport

/// The access tracker wakes its flusher early when a batch fills, and keeps doing so after a
/// flush failed (the restored batch is already past the size: "exactly at the size" never
/// comes again), without asking a dead database in a tight loop.
@Suite struct AccessFlushTests {
    static func entry(_ id: Int64, now: Date) -> StoredEntry {
        StoredEntry(id: id, namespace: "n", key: [1], body: [], encoding: .identity, contentType: "t", identitySize: 0,
                    etag: "e", model: nil, metadata: nil, inputTokens: 0, outputTokens: 0, updatedAt: now,
                    expiresAt: now.addingTimeInterval(60))
    }

    @Test func theEarlyFlushFiresAgainAfterAFailedFlush() throws {
        // No database behind this socket: every flush fails fast.
        let nowhere = "postgresql://postgres@%2Ftmp%2Ftc-nowhere-\(getpid()):1/none"
        let pool = ConnectionPool(.init(url: nowhere, maxConnections: 1, acquireTimeout: 0.2))
        let fired = Locked(0)
        let tracker = AccessTracker(pool: pool, batchSize: 3, batchFull: { fired.withLock { $0 += 1 } })
        let now = Date()
        for id in 1...3 { tracker.record(.hit, namespace: "n", entry: Self.entry(Int64(id), now: now), at: now) }
        #expect(fired.value == 1)
        tracker.record(.hit, namespace: "n", entry: Self.entry(4, now: now), at: now)
        #expect(fired.value == 1, "asked once per batch, not once per hit")
        #expect(throws: (any Error).self) { try tracker.flush() }
        // Restored, past the size. Not again within a second of the failure...
        tracker.record(.hit, namespace: "n", entry: Self.entry(5, now: now), at: now)
        #expect(fired.value == 1)
        // ...but after it.
        Thread.sleep(forTimeInterval: 1.1)
        tracker.record(.hit, namespace: "n", entry: Self.entry(6, now: now), at: now)
        #expect(fired.value == 2)
    }

    /// A periodic flush that failed after its ticks were put off is tried again at the next
    /// tick, as it was before ticks were put off: the counts waited their turn already.
    @Test func aFailedFlushIsTriedAgainAtTheNextTick() throws {
        let nowhere = "postgresql://postgres@%2Ftmp%2Ftc-nowhere-\(getpid()):1/none"
        let pool = ConnectionPool(.init(url: nowhere, maxConnections: 1, acquireTimeout: 0.2))
        let tracker = AccessTracker(pool: pool)
        let now = Date()
        for id in 0...AccessTracker.deferrableEntries {
            tracker.record(.hit, namespace: "n", entry: Self.entry(Int64(id), now: now), at: now)
        }
        for _ in 0..<AccessTracker.maxDeferredTicks { try tracker.flushIfDue() }
        #expect(throws: (any Error).self, "the flush after the ticks put off") { try tracker.flushIfDue() }
        #expect(throws: (any Error).self, "tried again at the next tick") { try tracker.flushIfDue() }
        #expect(tracker.pendingEntries == AccessTracker.deferrableEntries + 1, "kept for the next flush")
    }

    /// The periodic flush writes every tick while few entries' counts wait; with more, it waits
    /// up to `maxDeferredTicks` ticks and then writes; a full batch is written at its tick
    /// whatever the count. (No database: a flush takes what is pending and drops it.)
    @Test func thePeriodicFlushWaitsUnderLoadForABoundedNumberOfTicks() throws {
        let now = Date()
        let tracker = AccessTracker(pool: nil, batchSize: AccessTracker.deferrableEntries + 10)
        func hits(_ ids: ClosedRange<Int>) {
            for id in ids { tracker.record(.hit, namespace: "n", entry: Self.entry(Int64(id), now: now), at: now) }
        }
        hits(1...AccessTracker.deferrableEntries)
        try tracker.flushIfDue()
        #expect(tracker.pendingEntries == 0, "few pending: written at the first tick")

        hits(1...AccessTracker.deferrableEntries + 1)
        for tick in 1...AccessTracker.maxDeferredTicks {
            try tracker.flushIfDue()
            #expect(tracker.pendingEntries == AccessTracker.deferrableEntries + 1, "written at deferred tick \(tick)")
        }
        try tracker.flushIfDue()
        #expect(tracker.pendingEntries == 0, "still waiting after \(AccessTracker.maxDeferredTicks) ticks")

        // The count of ticks put off starts again after a flush.
        hits(1...AccessTracker.deferrableEntries + 1)
        try tracker.flushIfDue()
        #expect(tracker.pendingEntries == AccessTracker.deferrableEntries + 1)
        // A full batch asked for its flush: written at the next tick.
        hits(AccessTracker.deferrableEntries + 2...AccessTracker.deferrableEntries + 10)
        try tracker.flushIfDue()
        #expect(tracker.pendingEntries == 0, "a full batch waited")
        // And a stop's flush writes whatever waits.
        hits(1...AccessTracker.deferrableEntries + 1)
        try tracker.flushIfDue()
        try tracker.flush()
        #expect(tracker.pendingEntries == 0)
    }

    /// A flush called while another is writing waits for it: when it returns, what was counted
    /// before it is in PostgreSQL. Here the first flush is held at its counter insert by a lock
    /// on `counter_deltas` (in a database of its own, so no other test waits for it); the
    /// second, which finds nothing pending, must not return before the first commits. (CI once
    /// read a namespace's hits as 0 right after a flush that raced another test's flush on the
    /// shared service: the other had taken the counts and not committed them yet.)
    @Test func aFlushCalledDuringAnotherWaitsForItsCommit() throws {
        let database = try TestDatabase.shared.migratedDatabase(prefix: "flushwait")
        var configuration = ConnectionPool.Configuration(url: TestDatabase.shared.url,
                                                         overrides: TestDatabase.shared.overrides(database: database),
                                                         maxConnections: 3)
        // The held insert waits as long as the test holds the lock, not the service's 2 s.
        configuration.limits = .unbounded
        let pool = ConnectionPool(configuration)
        let tracker = AccessTracker(pool: pool)
        let now = Date()
        tracker.record(.hit, namespace: "n", entry: Self.entry(1, now: now), at: now)
        let holder = try TestDatabase.shared.connect(database: database)
        try holder.execute("BEGIN; LOCK TABLE counter_deltas IN EXCLUSIVE MODE")
        let group = DispatchGroup()
        DispatchQueue.global().async(group: group) { try? tracker.flush() }
        // The first flush has taken the counts and waits at its insert.
        let deadline = Date().addingTimeInterval(10)
        var waiting = false
        while !waiting && Date() < deadline {
            Thread.sleep(forTimeInterval: 0.02)
            waiting = try pool.withConnection {
                try $0.query("""
                    SELECT count(*) AS n FROM pg_stat_activity
                    WHERE datname = current_database() AND wait_event_type = 'Lock'
                      AND query LIKE 'INSERT INTO counter_deltas%'
                    """).first?.int("n") ?? 0
            } > 0
        }
        try #require(waiting, "the first flush never reached its insert")
        let hitsSeen = Locked<Int?>(nil)
        let second = DispatchGroup()
        DispatchQueue.global().async(group: second) {
            try? tracker.flush()
            let hits = try? pool.withConnection {
                try $0.query("SELECT coalesce(sum(hits), 0)::bigint AS hits FROM counter_deltas WHERE namespace = 'n'")
                    .first?.int("hits")
            }
            hitsSeen.withLock { $0 = hits ?? -1 }
        }
        let returnedWhileHeld = second.wait(timeout: .now() + 0.5) == .success
        try holder.execute("COMMIT")
        #expect(second.wait(timeout: .now() + 10) == .success, "the second flush never returned")
        #expect(group.wait(timeout: .now() + 10) == .success, "the first flush never returned")
        #expect(!returnedWhileHeld, "the second flush returned while the first was still writing")
        #expect(hitsSeen.value == 1, "the second flush returned before the first one's counts were committed")
    }

    /// A hit count at bigint's end (a dump's, before imports bounded it) saturates: the flush
    /// that adds to it once failed, and with it every flush of every namespace's counts.
    @Test func aHitCountAtItsLimitSaturates() throws {
        let own = try OwnDatabase(prefix: "hitlimit")
        defer { own.pool.closeIdle() }
        let (policy, store, pool) = (own.policy, own.store, own.pool)
        let namespace = try #require(Namespace("counted"))
        let key = try #require(EntryKey(Array("k".utf8)))
        _ = try store.put(EntryWrite(namespace: namespace, key: key,
                                     body: StoredBody.fromIdentity([1], contentType: "t/t", policy: policy),
                                     contentType: "t/t"))
        let connection = try own.connect()
        try connection.execute("UPDATE entry_access SET hit_count = 9223372036854775807")
        let entry = try #require(try store.fetch(namespace, key))
        let tracker = AccessTracker(pool: pool)
        tracker.record(.hit, namespace: "counted", entry: entry, at: Date())
        try tracker.flush()
        let row = try connection.query("SELECT hit_count FROM entry_access").first
        #expect(try row?.int("hit_count") == Int.max)
        let hits = try connection.query("SELECT sum(hits)::int8 AS n FROM counter_deltas WHERE namespace = 'counted'")
        #expect(try hits.first?.int("n") == 1, "the namespace's counts were written with it")
    }
}
