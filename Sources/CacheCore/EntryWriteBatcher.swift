import CacheKeys
import Foundation
import Observability
import Postgres

/// Group commit for upserts: writes that arrive while others are being committed share
/// the next transaction, one statement calling `tc_put_entry` per row. A commit (and its
/// WAL flush) is the dominant cost of a small write; sharing it is what lets a handful
/// of connections keep up with many writers.
///
/// No thread of its own: a caller that finds a free batch slot becomes the leader, takes
/// what has queued (its own write among it) and runs it; the others wait for their result.
/// Every caller returns only after its write is committed (or failed), as before.
///
/// A batch the server rejects (it rolled back whole) is retried one write at a time, so one
/// bad row never fails its neighbours; a batch whose outcome is unknown (the connection
/// broke, the result did not decode) is never replayed: it may have committed.
final class EntryWriteBatcher: @unchecked Sendable {
    // @unchecked: `queue`, `running` and every slot's `result` are guarded by `condition`.
    private final class Slot {
        let write: EntryWrite
        var result: Result<WriteOutcome, any Error>?
        init(_ write: EntryWrite) { self.write = write }
    }

    /// One call per row, in the batch's order (sorted, so concurrent batches lock the same
    /// keys in the same order); `ordinal` maps rows back to writes.
    static let putBatch = """
        SELECT b.ordinal, r.outcome, r.entry_id, r.expires_at
        FROM unnest($1::text[], $2::bytea[], $3::bytea[], $4::text[], $5::text[], $6::int8[], $7::text[],
                    $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::int8[], $14::int8[],
                    $15::int8[], $16::int8[], $17::text[], $18::text[])
             WITH ORDINALITY AS b(namespace, key, body, encoding, content_type, identity_size, etag, model, version,
                                  prompt_digest, tags, metadata, input_tokens, output_tokens, ttl, writer,
                                  condition, if_match, ordinal)
        CROSS JOIN LATERAL tc_put_entry(b.namespace, b.key, b.body, b.encoding, b.content_type, b.identity_size,
            b.etag, b.model, b.version, b.prompt_digest, ARRAY(SELECT jsonb_array_elements_text(b.tags::jsonb)),
            b.metadata::jsonb, b.input_tokens, b.output_tokens, $19, b.ttl, $20, b.writer, b.condition,
            ARRAY(SELECT jsonb_array_elements_text(b.if_match::jsonb)), $21, $22) r
        ORDER BY b.ordinal
        """

    private let condition = NSCondition()
    private var queue: [Slot] = []
    private var running = 0
    private let concurrent: Int
    private let maxBatch: Int
    private let batchSizes: HistogramFamily?

    init(concurrent: Int, maxBatch: Int, batchSizes: HistogramFamily?) {
        self.concurrent = max(1, concurrent)
        self.maxBatch = max(1, maxBatch)
        self.batchSizes = batchSizes
    }

    /// Commits `write` (alone or with others) and returns its outcome.
    func put(_ write: EntryWrite, into store: EntryStore) throws -> WriteOutcome {
        let slot = Slot(write)
        condition.lock()
        queue.append(slot)
        while slot.result == nil {
            guard running < concurrent, !queue.isEmpty else {
                condition.wait()
                continue
            }
            let batch = takeBatch()
            running += 1
            condition.unlock()
            let results = Self.run(batch.map(\.write), store: store)
            batchSizes?.observe([], Double(batch.count))
            condition.lock()
            for (member, result) in zip(batch, results) { member.result = result }
            running -= 1
            condition.broadcast()
        }
        condition.unlock()
        return try slot.result!.get()
    }

    /// Bodies in one statement at most (its `bytea[]` parameter must stay far below libpq's
    /// 2 GiB limit, and one statement should not hold hundreds of MiB at once).
    static let maxBatchBytes = 64 * 1024 * 1024

    /// The front of the queue, up to `maxBatch` writes and `maxBatchBytes` of bodies (at
    /// least one write, however large). Called with the lock held.
    private func takeBatch() -> [Slot] {
        var count = 0, bytes = 0
        for slot in queue.prefix(maxBatch) {
            bytes += slot.write.body.bytes.count
            if count > 0 && bytes > Self.maxBatchBytes { break }
            count += 1
        }
        let batch = Array(queue.prefix(count))
        queue.removeFirst(count)
        return batch
    }

    private static func run(_ writes: [EntryWrite], store: EntryStore) -> [Result<WriteOutcome, any Error>] {
        if writes.count == 1 { return [Result { try store.putOne(writes[0]) }] }
        do {
            return try putBatch(writes, store: store).map { .success($0) }
        } catch let error as PostgresError where error.kind == .query && !error.isUnavailable {
            // The server rejected the statement, so its transaction rolled back whole: each
            // write can run again on its own (and the bad one fails alone).
            return writes.map { write in Result { try store.putOne(write) } }
        } catch {
            // Anything else may have come after the commit (a lost connection, a result that
            // did not decode): running the writes again could answer a create-only write 412
            // for its own committed row. Each gets the error instead.
            return writes.map { _ in .failure(error) }
        }
    }

    /// All of `writes` in one statement, so one transaction and one commit.
    private static func putBatch(_ writes: [EntryWrite], store: EntryStore) throws -> [WriteOutcome] {
        // Sorted by key: two batches touching the same keys take their row locks in one order.
        let order = writes.indices.sorted { left, right in
            let (a, b) = (writes[left], writes[right])
            if a.namespace.name != b.namespace.name { return a.namespace.name < b.namespace.name }
            return a.key.bytes.lexicographicallyPrecedes(b.key.bytes)
        }
        let sorted = order.map { writes[$0] }
        let conditions = sorted.map { EntryStore.condition($0.condition) }
        let parameters: [PostgresValue] = [
            .textArray(sorted.map(\.namespace.name)), .bytesArray(sorted.map(\.key.bytes)),
            .bytesArray(sorted.map(\.body.bytes)), .textArray(sorted.map(\.body.encoding.rawValue)),
            .textArray(sorted.map(\.contentType)), .intArray(sorted.map { Int64($0.body.identitySize) }),
            .textArray(sorted.map(\.body.etag)), .optionalTextArray(sorted.map(\.model)),
            .optionalTextArray(sorted.map(\.version)), .optionalTextArray(sorted.map(\.promptDigest)),
            .textArray(sorted.map { jsonArray($0.tags) }), .optionalTextArray(sorted.map(\.metadata)),
            .intArray(sorted.map { Int64($0.inputTokens) }), .intArray(sorted.map { Int64($0.outputTokens) }),
            .optionalIntArray(sorted.map { $0.ttlSeconds.map(Int64.init) }), .optionalIntArray(sorted.map(\.writerTokenID)),
            .textArray(conditions.map(\.name)), .textArray(conditions.map { jsonArray($0.tags) }),
            .timestamp(store.clock.now()), .int(store.policy.defaultTTL),
            .int(store.policy.storeHardCap), .double(store.policy.hardCapRatio),
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
