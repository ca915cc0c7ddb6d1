import CacheCore
import CacheKeys
import Foundation
import Locking
import Observability
import Postgres

/// Group commit for upserts: writes that arrive while others are being committed share
/// the next transaction, in one statement: set-based for plain and create-only writes
/// (`EntryGroupWrite`), one `tc_put_entry` call per row for `If-Match` writes. A commit
/// (and its WAL flush) is the dominant cost of a small write; sharing it is what lets a
/// handful of connections keep up with many writers.
///
/// No thread of its own, and no caller waits for another's batch: a caller that finds a
/// free batch slot becomes a committer and runs batches from the queue until it is empty;
/// every other caller only queues its write. A caller on an event loop hands the committing
/// to a worker instead (`offLoop`): one hand-off a group, not one a write. One group runs at
/// a time unless a full group waits or the running ones have been busy a while
/// (`startsAnotherGroup`); at most `concurrent` run at once. Each
/// write's completion is called once it is committed (or failed), on the committer's thread;
/// `put` waits for it. So an HTTP write waiting for its commit holds no worker thread, and
/// batches grow with the number of writes in flight, not with the number of threads.
///
/// A batch the server rejects (it rolled back whole) is retried one write at a time, so one
/// bad row never fails its neighbours; a batch whose outcome is unknown (the connection
/// broke, the result did not decode) is never replayed: it may have committed.
/// A write refused because the write queue is full: nothing was stored.
public struct WriteQueueFull: Error {}

/// A write dropped from the queue because its request was given up at its deadline.
public struct WriteAbandoned: Error {}

final class EntryWriteBatcher: Sendable {
    /// A queued write and whom to tell when it is committed.
    private struct Slot {
        let write: EntryWrite
        /// Told first, as soon as the group's outcome is known (drop cached copies here).
        let committed: (@Sendable (Result<WriteOutcome, any Error>) -> Void)?
        let completion: @Sendable (Result<WriteOutcome, any Error>, WALPosition?) -> Void
        /// When it was queued (`monotonicNow`), for the wait it is counted in the metrics.
        let queuedAt: UInt64
    }

    /// One call per row, in the batch's order (sorted, so concurrent batches lock the same
    /// keys in the same order); `ordinal` maps rows back to writes.
    static let putBatch = """
        SELECT b.ordinal, r.outcome, r.entry_id, r.expires_at
        FROM unnest($1::text[], $2::bytea[], $3::bytea[], $4::text[], $5::text[], $6::int8[], $7::text[],
                    $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::int8[], $14::int8[],
                    $15::int8[], $16::int8[], $17::text[], $18::text[], $23::int4[])
             WITH ORDINALITY AS b(namespace, key, body, encoding, content_type, identity_size, etag, model, version,
                                  prompt_digest, tags, metadata, input_tokens, output_tokens, ttl, writer,
                                  condition, if_match, stale_while_revalidate, ordinal)
        CROSS JOIN LATERAL tc_put_entry(b.namespace, b.key, b.body, b.encoding, b.content_type, b.identity_size,
            b.etag, b.model, b.version, b.prompt_digest, ARRAY(SELECT jsonb_array_elements_text(b.tags::jsonb)),
            b.metadata::jsonb, b.input_tokens, b.output_tokens, coalesce($19::timestamptz, now()), b.ttl, $20, b.writer, b.condition,
            ARRAY(SELECT jsonb_array_elements_text(b.if_match::jsonb)), $21, $22, b.stale_while_revalidate) r
        ORDER BY b.ordinal
        """

    private let pending = Locked(Pending())
    private let concurrent: Int
    private let maxBatch: Int
    private let metrics: WriteGroupMetrics?

    init(concurrent: Int, maxBatch: Int, metrics: WriteGroupMetrics?, busyAfter: TimeInterval = defaultBusyAfter) {
        self.concurrent = max(1, concurrent)
        self.maxBatch = max(1, maxBatch)
        self.metrics = metrics
        busyAfterNanoseconds = max(2_000_000, UInt64(max(0.002, min(busyAfter, 60)) * 1e9))
    }

    /// Writes queued at most, and their bodies' bytes at most: past either a write is refused
    /// at once (nothing stored: a 503 the client may retry), so a database that stalls
    /// cannot make the queue, and the memory of the bodies in it, grow without bound.
    static let maxQueued = 4096
    static let maxQueuedBytes = 256 * 1024 * 1024

    /// The writes waiting for a group, how many threads are committing groups, and when the
    /// latest group began.
    private struct Pending {
        var queue: [Slot] = []
        var running = 0
        var queuedBytes = 0
        var lastGroupStarted: UInt64 = 0
        /// A look scheduled at the running groups, for writes left queued behind them.
        var recheckScheduled = false
    }

    /// A further group runs beside the running ones only when a group's worth of writes
    /// waits, or when even the latest of them began this long ago (one held up by a lock must
    /// not hold up every write: a write queued behind it is looked at again after this long,
    /// whether or not another write comes). One group at a time, as large as the writes waiting make it, commits
    /// far more than several small ones at once: ~12,000 PUTs a second instead of ~6,300 on
    /// 2 cores with 64 writers (groups of ~16 instead of ~4; each statement pays its triggers
    /// and its commit once), with a lower p99 (bench/results/2026-12-05-writes.md).
    static let defaultBusyAfter: TimeInterval = 0.02
    private let busyAfterNanoseconds: UInt64
    private let recheckQueue = DispatchQueue(label: "teamcache.write-groups.recheck")

    /// What `submit` found when it queued its write.
    private enum Admission {
        case refused, queued, commits
        /// Queued behind running groups: look again once they have been busy a while.
        case queuedBehind
    }

    /// Queues `write`; `completion` gets its outcome once it is committed (alone or with
    /// others). If a batch slot is free, this thread commits batches until the queue is empty;
    /// or, given `offLoop` (the caller may not block: an event loop), that thread does.
    func submit(_ write: EntryWrite, into store: EntryStore,
                committed: (@Sendable (Result<WriteOutcome, any Error>) -> Void)? = nil,
                offLoop: BlockingWork? = nil,
                completion: @escaping @Sendable (Result<WriteOutcome, any Error>, WALPosition?) -> Void) {
        let size = write.body.bytes.count
        let slot = Slot(write: write, committed: committed, completion: completion, queuedAt: Self.monotonicNow())
        let admission = pending.withLock { pending -> Admission in
            guard pending.queue.count < Self.maxQueued,
                  pending.queue.isEmpty || pending.queuedBytes + size <= Self.maxQueuedBytes else { return .refused }
            pending.queuedBytes += size
            pending.queue.append(slot)
            // Read under the lock: a time read before it could precede the latest group's
            // start, and the busy check's unsigned difference would wrap.
            return admit(&pending, now: Self.monotonicNow())
        }
        switch admission {
        case .refused:
            committed?(.failure(WriteQueueFull()))
            completion(.failure(WriteQueueFull()), nil)
        case .queued: return
        case .queuedBehind: recheck(after: busyAfterNanoseconds, store: store)
        case .commits:
            guard let offLoop else { return commitWhileQueued(store: store) }
            // Counted as running already, so the group must be committed by someone: when the
            // workers' queue is full, by the recheck queue's one thread (as a stuck group is).
            if !offLoop({ [self] in commitWhileQueued(store: store) }) {
                recheckQueue.async { [self] in commitWhileQueued(store: store) }
            }
        }
    }

    /// Whether the writes queued get a committer now (this thread, counted as running and
    /// its group's start noted, so a write right behind it does not start a second one), or
    /// wait for the running ones, with a look scheduled if none is.
    private func admit(_ pending: inout Pending, now: UInt64) -> Admission {
        if startsAnotherGroup(pending, now: now) {
            pending.running += 1
            pending.lastGroupStarted = now
            return .commits
        }
        guard pending.running < concurrent, !pending.recheckScheduled else { return .queued }
        pending.recheckScheduled = true
        return .queuedBehind
    }

    /// A look at the queue once the running groups may have been busy too long: a write
    /// queued behind a group held by a lock gets a group of its own even if no later write
    /// comes to start one (callers wait for their own commits, so often none does).
    /// On a serial queue of its own: a look that finds the groups stuck commits the queue on
    /// that one thread (its work blocks on the database), so looks never add more than one
    /// thread to the callers' however many groups are held.
    private func recheck(after nanoseconds: UInt64, store: EntryStore) {
        recheckQueue.asyncAfter(deadline: .now() + .nanoseconds(Int(nanoseconds))) { [self] in
            let (admission, age) = pending.withLock { pending -> (Admission, UInt64) in
                // Under the lock, as in `submit`: a time read before it could precede a group
                // started meanwhile, and the unsigned differences below would wrap.
                let now = Self.monotonicNow()
                pending.recheckScheduled = false
                guard !pending.queue.isEmpty else { return (.queued, 0) }
                return (admit(&pending, now: now), now &- pending.lastGroupStarted)
            }
            switch admission {
            case .commits: commitWhileQueued(store: store)
            // The latest group is younger than the busy time: look again when it will not be.
            case .queuedBehind: recheck(after: busyAfterNanoseconds - min(age, busyAfterNanoseconds - 1_000_000), store: store)
            case .queued, .refused: return
            }
        }
    }

    /// Commits groups until the queue is empty; leaves the count of running threads under
    /// the same lock that finds the queue empty, so no write is stranded.
    private func commitWhileQueued(store: EntryStore) {
        while let (batch, abandoned) = nextBatch() {
            // Their requests were given up: they never start (their answers are dropped).
            for member in abandoned {
                member.committed?(.failure(WriteAbandoned()))
                member.completion(.failure(WriteAbandoned()), nil)
            }
            let started = Self.monotonicNow()
            let results = Self.run(batch.map(\.write), store: store)
            // Before the answers (a few histogram updates): a caller that has its answer and then
            // reads the metrics finds its group counted. A group whose every write was given up
            // ran nothing: it is not a transaction.
            if !batch.isEmpty {
                metrics?.observe(count: batch.count, ranNanoseconds: Self.monotonicNow() &- started,
                                 waitedNanoseconds: batch.map { started &- $0.queuedAt })
            }
            for (member, result) in zip(batch, results) { member.committed?(result) }
            let position = Self.position(after: results, store: store)
            for (member, result) in zip(batch, results) { member.completion(result, position) }
        }
    }

    /// Whether a write just queued makes its thread a committer: when none runs, or when
    /// fewer than `concurrent` run and a full group waits or they have all been busy a while.
    private func startsAnotherGroup(_ pending: Pending, now: UInt64) -> Bool {
        if pending.running == 0 { return true }
        guard pending.running < concurrent else { return false }
        return pending.queue.count >= maxBatch || now &- pending.lastGroupStarted >= busyAfterNanoseconds
    }

    /// The next group to commit, or nil (and this thread no longer counted) when none waits.
    private func nextBatch() -> (batch: [Slot], abandoned: [Slot])? {
        pending.withLock { pending in
            guard !pending.queue.isEmpty else {
                pending.running -= 1
                return nil
            }
            let now = Self.monotonicNow()
            pending.lastGroupStarted = now
            return Self.takeBatch(from: &pending, now: now, maxBatch: maxBatch)
        }
    }

    /// Once per group, after its commit: past every write in it (nil when positions are not
    /// tracked, nothing committed, or it could not be read in time: counted).
    private static func position(after results: [Result<WriteOutcome, any Error>], store: EntryStore)
        -> WALPosition? {
        guard store.tracksPositions, results.contains(where: { (try? $0.get()) != nil }) else { return nil }
        return try? store.currentPosition()
    }

    /// Commits `write` (alone or with others) and returns its outcome.
    func put(_ write: EntryWrite, into store: EntryStore) throws -> WriteOutcome {
        let outcome = HandOff<Result<WriteOutcome, any Error>>()
        submit(write, into: store) { result, _ in outcome.put(result) }
        return try outcome.take().get()
    }

    /// Bodies in one statement at most (its `bytea[]` parameter must stay far below libpq's
    /// 2 GiB limit, and one statement should not hold hundreds of MiB at once).
    static let maxBatchBytes = 64 * 1024 * 1024

    /// How a group is written: plain and create-only writes set-based (`EntryGroupWrite`),
    /// `If-Match` writes through `tc_put_entry`. A group holds one kind.
    enum Kind: Equatable {
        case plain, createOnly, match

        init(_ condition: WriteCondition) {
            switch condition {
            case .none: self = .plain
            case .absent: self = .createOnly
            case .match: self = .match
            }
        }
    }

    /// A group from the queue: the first write's kind, then every queued write of that kind
    /// whose key no earlier write in the queue has (a key's writes commit in the order they
    /// came, and a set-based statement must not touch a row twice), up to `maxBatch` writes
    /// and `maxBatchBytes` of bodies (at least one write, however large).
    private static func takeBatch(from pending: inout Pending, now: UInt64, maxBatch: Int)
        -> (batch: [Slot], abandoned: [Slot]) {
        let abandoned = pending.queue.filter { slot in slot.write.notAfter.map { $0 <= now } ?? false }
        if !abandoned.isEmpty { pending.queue.removeAll { slot in slot.write.notAfter.map { $0 <= now } ?? false } }
        pending.queuedBytes -= abandoned.reduce(0) { $0 + $1.write.body.bytes.count }
        guard let first = pending.queue.first else { return ([], abandoned) }
        let kind = Kind(first.write.condition)
        var taken: [Int] = [], seen = Set<KeyIdentity>(), bytes = 0
        for (index, slot) in pending.queue.enumerated() {
            guard taken.count < maxBatch else { break }
            let identity = KeyIdentity(slot.write)
            guard seen.insert(identity).inserted, Kind(slot.write.condition) == kind else { continue }
            bytes += slot.write.body.bytes.count
            if !taken.isEmpty && bytes > maxBatchBytes { break }
            taken.append(index)
        }
        let batch = taken.map { pending.queue[$0] }
        for index in taken.reversed() { pending.queue.remove(at: index) }
        pending.queuedBytes -= batch.reduce(0) { $0 + $1.write.body.bytes.count }
        return (batch, abandoned)
    }

    static func monotonicNow() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
    }

    /// A key as the batch tells keys apart.
    private struct KeyIdentity: Hashable {
        let namespace: String
        let key: [UInt8]
        init(_ write: EntryWrite) { (namespace, key) = (write.namespace.name, write.key.bytes) }
    }

    private static func run(_ writes: [EntryWrite], store: EntryStore) -> [Result<WriteOutcome, any Error>] {
        guard let first = writes.first else { return [] }
        let kind = Kind(first.condition)
        if writes.count == 1 && kind == .match { return [Result { try store.putOne(first) }] }
        do {
            if kind == .match { return try putBatch(writes, store: store).map { .success($0) } }
            return try EntryGroupWrite.run(writes, createOnly: kind == .createOnly, store: store).map { .success($0) }
        } catch where mayReplayOneByOne(error) {
            return writes.map { write in Result { try store.putOne(write) } }
        } catch {
            return writes.map { _ in .failure(error) }
        }
    }

    /// Whether a group that failed with `error` may run again one write at a time: only when
    /// the server rejected the statement, so its transaction rolled back whole (and the bad
    /// write then fails alone). Anything else may have come after the commit (a lost
    /// connection, a cancelled wait for the answer, a result that did not decode): running
    /// the writes again could answer a create-only write 412 for its own committed row.
    static func mayReplayOneByOne(_ error: any Error) -> Bool {
        guard let error = error as? PostgresError else { return false }
        return error.kind == .query && !error.isUnavailable
    }

    /// All of `writes` in one statement, so one transaction and one commit.
    private static func putBatch(_ writes: [EntryWrite], store: EntryStore) throws -> [WriteOutcome] {
        // Sorted by key: two batches touching the same keys take their row locks in one order.
        let order = writes.indices.sorted { left, right in
            let (a, b) = (writes[left], writes[right])
            return KeyOrder.precedes(a.namespace.name, a.key.bytes, b.namespace.name, b.key.bytes)
        }
        let sorted = order.map { writes[$0] }
        let conditions = sorted.map { EntryStore.condition($0.condition) }
        let parameters: [PostgresValue] = [
            .textArray(sorted.map(\.namespace.name)), .bytesArray(sorted.map(\.key.bytes)),
            .bytesArray(sorted.map(\.storedBytes)), .textArray(sorted.map(\.storedEncoding)),
            .textArray(sorted.map(\.contentType)), .intArray(sorted.map { Int64($0.body.identitySize) }),
            .textArray(sorted.map(\.body.etag)), .optionalTextArray(sorted.map(\.model)),
            .optionalTextArray(sorted.map(\.version)), .optionalTextArray(sorted.map(\.promptDigest)),
            .textArray(sorted.map { jsonArray($0.tags) }), .optionalTextArray(sorted.map(\.storedMetadata)),
            .intArray(sorted.map { Int64($0.inputTokens) }), .intArray(sorted.map { Int64($0.outputTokens) }),
            .optionalIntArray(sorted.map { $0.ttlSeconds.map(Int64.init) }), .optionalIntArray(sorted.map(\.writerTokenID)),
            .textArray(conditions.map(\.name)), .textArray(conditions.map { jsonArray($0.tags) }),
            store.writeStamp, .int(store.policy.defaultTTL),
            .int(store.policy.storeHardCap), .double(store.policy.hardCapRatio),
            .intArray(sorted.map { Int64($0.staleWhileRevalidate) }),
        ]
        let result = try store.pool.withConnection { try $0.query(putBatch, parameters) }
        var outcomes = [WriteOutcome?](repeating: nil, count: writes.count)
        for row in result.rows {
            guard let ordinal = try row.int("ordinal"), (1...sorted.count).contains(ordinal) else {
                throw PostgresError(.decoding, serverMessage: "batch row without a valid ordinal")
            }
            outcomes[order[ordinal - 1]] = try store.outcome(row)
        }
        return try outcomes.map {
            guard let outcome = $0 else { throw PostgresError(.decoding, serverMessage: "a write got no outcome") }
            return outcome
        }
    }

    private static func jsonArray(_ items: [String]) -> String {
        JSONValue.array(items.map { .string($0) }).serialized
    }
}
