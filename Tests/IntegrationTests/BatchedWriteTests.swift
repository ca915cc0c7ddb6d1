import CacheCore
import CacheStore
import Foundation
import Glibc
import Locking
import Observability
import Postgres
import Testing
import TestSupport

/// Upserts that arrive together share a transaction: each still gets its own outcome,
/// committed before its answer, and one failing write never fails its neighbours.
@Suite struct BatchedWriteTests {
    /// 48 PUTs sent at once over separate connections: every one is created with its own
    /// body, and the commits carried more than one write each.
    @Test func concurrentUpsertsShareCommitsAndEachKeepsItsOwnBody() throws {
        let service = try TestService { $0.authEnabled = false }
        defer { service.stop() }
        let namespace = TestService.namespace("wbatch")
        var bodies: [String: [UInt8]] = [:]
        var writes = 0
        for round in 0..<4 {
            let paths = (0..<48).map { entryPath(namespace, "r\(round)-k\($0)") }
            for path in paths { bodies[path] = randomBytes(100 + bodies.count) }
            let clients = try paths.map { _ in try RawClient(port: service.port, timeout: 10) }
            for (client, path) in zip(clients, paths) {
                let body = bodies[path]!
                try client.send(Array("PUT \(path) HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: \(body.count)\r\n\r\n".utf8) + body)
            }
            for client in clients { #expect(try client.readResponse().status == 201) }
            writes += paths.count
        }
        for (path, body) in bodies { #expect(try service.request("GET", path).body == body, "\(path)") }
        let metrics = try service.metrics()
        let commits = metricSample(metrics, "teamcache_db_write_batch_size_count")
        #expect(metricSample(metrics, "teamcache_db_write_batch_size_sum") == Double(writes))
        #expect(commits > 0 && commits < Double(writes), "every write had a transaction of its own")
    }

    /// Create-only writes to one key racing: exactly one wins, and the entry holds one of
    /// the bodies whole. A key is written once per group (its writes commit in the order
    /// they came, and a set-based statement touches a row once), so each is a group.
    @Test func createOnlyWritesToOneKeyYieldOneCreate() throws {
        let (store, metrics) = oneCommitAtATime()
        let namespace = Namespace(TestService.namespace("wrace"))!
        let key = EntryKey(Array("same".utf8))!
        let outcomes = Locked<[WriteOutcome]>([])
        onThreads(16) { index in
            var write = EntryWrite(namespace: namespace, key: key,
                                   body: StoredBody.fromIdentity([UInt8](repeating: UInt8(index), count: 300),
                                                                 contentType: "application/octet-stream",
                                                                 policy: store.policy),
                                   contentType: "application/octet-stream")
            write.condition = .absent
            if let outcome = try? store.put(write) { outcomes.withLock { $0.append(outcome) } }
        }
        let created = outcomes.value.filter { if case .created = $0 { true } else { false } }
        #expect(outcomes.value.count == 16 && created.count == 1)
        #expect(outcomes.value.filter { $0 == .preconditionFailed }.count == 15)
        let entry = try #require(try store.fetch(namespace, key))
        let body = entry.encoding == .gzip ? try gunzip(entry.body) : entry.body
        #expect(Set(body).count == 1 && body.count == 300)
        #expect(metricSample(metrics.render(), "teamcache_db_write_batch_size_count") == 16)
    }

    /// A write PostgreSQL rejects (metadata that is not JSON, which the HTTP layer would have
    /// refused) fails alone; the writes batched with it are committed.
    @Test func aRejectedWriteFailsAloneAndItsNeighboursCommit() throws {
        let (store, metrics) = oneCommitAtATime()
        let namespace = Namespace(TestService.namespace("wbad"))!
        let results = Locked<[Int: Bool]>([:])
        onThreads(12) { index in
            var write = EntryWrite(namespace: namespace, key: EntryKey(Array("k\(index)".utf8))!,
                                   body: StoredBody.fromIdentity(Array("v\(index)".utf8), contentType: "text/plain",
                                                                 policy: store.policy),
                                   contentType: "text/plain")
            write.metadata = index == 5 ? "{not json" : "{\"n\": \(index)}"
            let stored = (try? store.put(write)) != nil
            results.withLock { $0[index] = stored }
        }
        for index in 0..<12 {
            #expect(results.value[index] == (index != 5), "write \(index)")
            let entry = try store.fetch(namespace, EntryKey(Array("k\(index)".utf8))!)
            #expect((entry != nil) == (index != 5))
        }
        #expect(metricSample(metrics.render(), "teamcache_db_write_batch_size_count") < 12, "no write was batched")
    }

    /// A write queued right behind a group held by a row lock, with no write after it, is
    /// looked at again once that group has been busy a while and gets a group of its own:
    /// it does not wait for the lock (callers wait for their own commits, so often no later
    /// write comes to start one). The busy time is 1 s here, so the write surely comes
    /// within it; without the second look it would wait for the lock, past the 5 s allowed.
    @Test func aWriteQueuedBehindAHeldGroupCommitsWithoutALaterWrite() throws {
        let (url, pool) = try Self.poolThatWaitsForLocks("behind")
        defer { pool.closeIdle() }
        let store = EntryStore(pool: pool, policy: CachePolicy(), concurrentWriteBatches: 2, writeGroupsBusyAfter: 1)
        let write = Self.plainWrites(try #require(Namespace("behind")))
        _ = try store.put(write("held"))
        let holder = try Self.holding(url, "behind", "held")
        let done = Locked<[String: Date]>([:])
        let group = DispatchGroup()
        func putAside(_ key: String) {
            group.enter()
            Thread {
                if (try? store.put(write(key))) != nil { done.withLock { $0[key] = Date() } }
                group.leave()
            }.start()
        }
        putAside("held")
        try #require(try Self.oneWaitsForALock(url), "the held group never waited for its lock")
        let queued = Date()
        putAside("free")
        for _ in 0..<500 where done.value["free"] == nil { Thread.sleep(forTimeInterval: 0.01) }
        let freeAt = done.value["free"]
        #expect(freeAt != nil, "the write behind the held group waited for its lock")
        if let freeAt { #expect(freeAt.timeIntervalSince(queued) < 5) }
        #expect(done.value["held"] == nil, "the held group still waits meanwhile")
        try holder.execute("COMMIT")
        #expect(group.wait(timeout: .now() + 10) == .success)
        #expect(done.value["held"] != nil)
    }

    /// The group and wait times on the metrics page are the ones the writes lived through: a
    /// group held by a row lock for a second counts that second as its run, and the two writes
    /// queued behind it (one group at a time) count it as their waits, then commit as one quick
    /// group; the quick ones count as quick. A write given up before its group (past its
    /// deadline) makes no group of its own.
    @Test func aHeldGroupCountsItsRunAndTheWriteBehindItCountsItsWait() throws {
        let (url, pool) = try Self.poolThatWaitsForLocks("groupmetrics")
        defer { pool.closeIdle() }
        let registry = MetricsRegistry()
        let metrics = WriteGroupMetrics(sizes: registry.histogram("sizes", "", bounds: [1]),
                                        groupSeconds: registry.histogram("runs", "", bounds: [0.5]),
                                        waitSeconds: registry.histogram("waits", "", bounds: [0.5]))
        let store = EntryStore(pool: pool, policy: CachePolicy(), concurrentWriteBatches: 1, writeGroupMetrics: metrics,
                               writeGroupsBusyAfter: 60)
        let namespace = try #require(Namespace("groupmetrics"))
        let write = Self.plainWrites(namespace)
        _ = try store.put(write("held"))
        let holder = try Self.holding(url, "groupmetrics", "held")
        let group = DispatchGroup()
        for key in ["held", "behind", "behind too"] {
            group.enter()
            Thread {
                _ = try? store.put(write(key))
                group.leave()
            }.start()
            if key == "held" {
                try #require(try Self.oneWaitsForALock(url), "the held group never waited for its lock")
            }
        }
        // Long enough that both writes behind are queued well within it on a loaded machine,
        // and their waits pass the 0.5 s bound with room to spare.
        Thread.sleep(forTimeInterval: 2)
        try holder.execute("COMMIT")
        #expect(group.wait(timeout: .now() + 10) == .success)
        var expired = write("expired")
        expired.notAfter = 1
        #expect(throws: WriteAbandoned.self) { try store.put(expired) }
        #expect(try store.fetch(namespace, EntryKey(Array("expired".utf8))!) == nil)
        let page = registry.render()
        // Three groups (the first write, the held one, the two behind it) of four writes.
        #expect(metricSample(page, "runs_count") == 3 && metricSample(page, "waits_count") == 4, "\(page)")
        #expect(metricSample(page, "runs_bucket{le=\"0.5\"}") == 2, "\(page)")
        #expect(metricSample(page, "runs_sum") > 1)
        #expect(metricSample(page, "waits_bucket{le=\"0.5\"}") == 2, "\(page)")
        #expect(metricSample(page, "waits_sum") > 2)
        #expect(metricSample(page, "sizes_count") == 3 && metricSample(page, "sizes_sum") == 4, "\(page)")
    }

    /// Writes submitted from a thread that may not block, as an event loop submits a PUT:
    /// every group is committed on a thread the hand-off gave, never the submitting one, and
    /// the hand-off is asked once a group, not once a write.
    @Test func writesSubmittedFromALoopAreCommittedOffIt() throws {
        let (store, metrics) = oneCommitAtATime()
        let namespace = try #require(Namespace(TestService.namespace("wloop")))
        // Its (absent) sealing key is then remembered: nothing before the commit would block.
        _ = try store.put(Self.write(namespace, "first", store.policy))
        let handOffs = Locked(0)
        let offLoop: BlockingWork = { work in
            handOffs.withLock { $0 += 1 }
            Thread { work() }.start()
            return true
        }
        let outcomes = submitFromOneThread(store, (0..<40).map { Self.write(namespace, "k\($0)", store.policy) },
                                           offLoop: offLoop)
        #expect(outcomes.count == 40)
        #expect(outcomes.allSatisfy { $0.outcome.map { if case .created = $0 { true } else { false } } == true })
        #expect(outcomes.allSatisfy { !$0.onSubmitter }, "a group was committed on the submitting thread")
        let groups = Int(metricSample(metrics.render(), "teamcache_db_write_batch_size_count")) - 1
        #expect(handOffs.value >= 1 && handOffs.value <= groups, "\(handOffs.value) hand-offs for \(groups) groups")
        for index in 0..<40 { #expect(try store.fetch(namespace, EntryKey(Array("k\(index)".utf8))!) != nil) }
    }

    /// A hand-off that cannot take work (the workers' queue full): a write whose namespace's
    /// key must be read first is refused as a full queue refuses it, nothing stored; a write
    /// that only needs its group committed still is, by the batcher's own recheck thread.
    @Test func writesFromALoopWhoseHandOffIsRefused() throws {
        let (store, _) = oneCommitAtATime()
        let refusing: BlockingWork = { _ in false }
        let unknown = try #require(Namespace(TestService.namespace("wrefused")))
        let refused = submitFromOneThread(store, [Self.write(unknown, "k", store.policy)], offLoop: refusing)
        #expect(refused.count == 1 && refused.first?.outcome == nil && refused.first?.queueFull == true)
        #expect(try store.fetch(unknown, EntryKey(Array("k".utf8))!) == nil)

        let known = try #require(Namespace(TestService.namespace("wrecheck")))
        _ = try store.put(Self.write(known, "first", store.policy))
        let outcomes = submitFromOneThread(store, (0..<10).map { Self.write(known, "k\($0)", store.policy) },
                                           offLoop: refusing)
        #expect(outcomes.count == 10 && outcomes.allSatisfy { $0.outcome != nil && !$0.onSubmitter })
        for index in 0..<10 { #expect(try store.fetch(known, EntryKey(Array("k\(index)".utf8))!) != nil) }
    }

    /// A write whose namespace's sealing key is not remembered yet, from a loop: the whole
    /// write goes on from the hand-off's thread (which reads the key), is stored, and is told
    /// its outcome exactly once.
    @Test func aWriteFromALoopWhoseKeyMustBeReadGoesOnFromAWorker() throws {
        let (store, _) = oneCommitAtATime()
        let namespace = try #require(Namespace(TestService.namespace("wunknown")))
        let handOffs = Locked(0)
        let offLoop: BlockingWork = { work in
            handOffs.withLock { $0 += 1 }
            Thread { work() }.start()
            return true
        }
        let outcomes = submitFromOneThread(store, [Self.write(namespace, "k", store.policy)], offLoop: offLoop)
        // Told once (a second completion would leave the helper's group unbalanced: a crash).
        #expect(outcomes.count == 1)
        let outcome = try #require(outcomes.first)
        #expect(!outcome.onSubmitter)
        #expect(outcome.outcome.map { if case .created = $0 { true } else { false } } == true)
        #expect(handOffs.value == 1)
        #expect(try store.fetch(namespace, EntryKey(Array("k".utf8))!) != nil)
    }

    private static func write(_ namespace: Namespace, _ key: String, _ policy: CachePolicy) -> EntryWrite {
        EntryWrite(namespace: namespace, key: EntryKey(Array(key.utf8))!,
                   body: StoredBody.fromIdentity(Array("value of \(key)".utf8), contentType: "text/plain",
                                                 policy: policy),
                   contentType: "text/plain")
    }

    /// Submits `writes` from this thread with `offLoop`, then waits for every completion: each
    /// write's outcome (nil: failed), whether it failed as a full queue, and whether its
    /// completion ran on this thread.
    private func submitFromOneThread(_ store: EntryStore, _ writes: [EntryWrite], offLoop: @escaping BlockingWork)
        -> [(outcome: WriteOutcome?, queueFull: Bool, onSubmitter: Bool)] {
        let submitter = pthread_self()
        let done = DispatchGroup()
        let outcomes = Locked<[(outcome: WriteOutcome?, queueFull: Bool, onSubmitter: Bool)]>([])
        for write in writes {
            done.enter()
            store.submit(write, committed: nil, offLoop: offLoop) { result, _ in
                let onSubmitter = pthread_equal(pthread_self(), submitter) != 0
                let queueFull = if case .failure(let error) = result { error is WriteQueueFull } else { false }
                outcomes.withLock { $0.append(((try? result.get()), queueFull, onSubmitter)) }
                done.leave()
            }
        }
        _ = done.wait(timeout: .now() + 30)
        return outcomes.value
    }

    /// A database of its own and a pool on it whose statements wait for row locks far longer
    /// than a test: a group held by a lock never gives up meanwhile.
    private static func poolThatWaitsForLocks(_ prefix: String) throws -> (url: String, pool: ConnectionPool) {
        let url = try DumpTests.databaseURL(prefix: prefix)
        var configuration = ConnectionPool.Configuration(url: url, maxConnections: 4)
        configuration.limits.lockTimeout = 30
        configuration.limits.statementTimeout = 60
        return (url, ConnectionPool(configuration))
    }

    /// Plain writes of a one-letter body into `namespace`, by key.
    private static func plainWrites(_ namespace: Namespace) -> @Sendable (String) -> EntryWrite {
        { key in
            EntryWrite(namespace: namespace, key: EntryKey(Array(key.utf8))!,
                       body: StoredBody.fromIdentity(Array("v".utf8), contentType: "text/plain", policy: CachePolicy()),
                       contentType: "text/plain")
        }
    }

    /// A transaction holding the row of `key` in `namespace` (until its COMMIT).
    private static func holding(_ url: String, _ namespace: String, _ key: String) throws -> PostgresConnection {
        let holder = try PostgresConnection(url: url, limits: .unbounded)
        try holder.execute("BEGIN")
        _ = try holder.query("SELECT id FROM entries WHERE namespace = $1 AND key = $2 FOR UPDATE",
                             [.text(namespace), .bytes(Array(key.utf8))])
        return holder
    }

    /// Whether, within 5 s, exactly one session of the database waits for a lock.
    private static func oneWaitsForALock(_ url: String) throws -> Bool {
        let watcher = try PostgresConnection(url: url, limits: .unbounded)
        for _ in 0..<500 {
            let waiting = try watcher.query("""
                SELECT count(*) AS n FROM pg_stat_activity
                WHERE datname = current_database() AND wait_event_type = 'Lock'
                """).first?.int("n")
            if waiting == 1 { return true }
            Thread.sleep(forTimeInterval: 0.01)
        }
        return false
    }

    /// A store on the shared pool committing one batch at a time, so writers that arrive
    /// together must share a batch; and the registry holding its batch sizes.
    private func oneCommitAtATime() -> (EntryStore, MetricsRegistry) {
        let shared = TestService.shared.app.store
        let metrics = MetricsRegistry()
        let sizes = metrics.histogram("teamcache_db_write_batch_size", "", bounds: [1, 4, 16])
        return (EntryStore(pool: shared.pool, policy: shared.policy, concurrentWriteBatches: 1,
                           writeGroupMetrics: WriteGroupMetrics(sizes: sizes)),
                metrics)
    }

    /// Runs `body(index)` on `count` threads started together; returns when all are done.
    private func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
        let group = DispatchGroup()
        let start = DispatchSemaphore(value: 0)
        for index in 0..<count {
            group.enter()
            Thread {
                start.wait()
                body(index)
                group.leave()
            }.start()
        }
        for _ in 0..<count { start.signal() }
        group.wait()
    }
}
