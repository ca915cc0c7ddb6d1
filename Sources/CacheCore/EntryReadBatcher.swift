import Foundation
import Observability
import Postgres

/// Reads entries for one event loop: every read queued during a loop iteration goes to
/// PostgreSQL as one statement over the loop's own non-blocking connection, and each
/// answer comes back on the loop. No worker thread and no context switch per read, and
/// PostgreSQL plans and executes once per batch rather than once per key.
///
/// Batches grow with load on their own: while one is in flight, new reads queue, and
/// all of them leave together when it returns. When the connection is down, `read`
/// refuses and the caller reads through the pool (which knows how to answer 503).
/// Loop-confined.
public final class EntryReadBatcher: @unchecked Sendable {
    // @unchecked: used on its loop's thread only, except `close` after the loop stopped.
    public typealias Completion = (Outcome) -> Void

    public enum Outcome {
        case found(StoredEntry)
        case absent
        /// The entry's stored body is over `inlineBodyLimit`: it was not sent, and the
        /// caller reads the entry through the pool, off the loop.
        case oversized
        case failed(PostgresError)
    }

    /// Stored bodies sent over a loop's connection at most. libpq keeps its input buffer at
    /// the largest answer it ever received, and a batch of 256 large entries would make
    /// that gigabytes on a connection that lives as long as the process.
    public static let inlineBodyLimit = 64 * 1024

    /// One index probe per requested key (LIMIT 1 keeps the planner from turning the
    /// lateral join into a scan of the table); `ordinal` says which request a row answers.
    static let selectBatch = """
        SELECT q.ordinal, e.* FROM unnest($1::text[], $2::bytea[]) WITH ORDINALITY AS q(namespace, key, ordinal)
        CROSS JOIN LATERAL (SELECT \(EntryStore.entryColumns.replacingOccurrences(of: " body,", with: """
             CASE WHEN octet_length(body) <= \(inlineBodyLimit) THEN body END AS body,
             octet_length(body) > \(inlineBodyLimit) AS oversized,
            """)) FROM entries
                            WHERE namespace = q.namespace AND key = q.key LIMIT 1) e
        """

    public static let applicationName = "teamcache-reads"

    private struct Read {
        let namespace: Namespace
        let key: EntryKey
        let completion: Completion
    }

    private let connection: LoopConnection
    private let maxBatch: Int
    private let batchSizes: HistogramFamily?
    private var waiting: [Read] = []

    public init(url: String, maxBatch: Int, timeout: TimeInterval, limits: SessionLimits = SessionLimits(),
                batchSizes: HistogramFamily?) {
        // Named apart from the pool's connections, for pg_stat_activity.
        var configuration = LoopConnection.Configuration(
            url: url, overrides: ["application_name": Self.applicationName],
            statements: [(Self.selectBatch, [.textArray([]), .bytesArray([])])], timeout: timeout)
        configuration.limits = limits
        connection = LoopConnection(configuration)
        self.maxBatch = max(1, maxBatch)
        self.batchSizes = batchSizes
    }

    /// Starts connecting and hooks the batch sender into the loop. Call on the loop's thread.
    public func attach(to reactor: any Reactor) {
        connection.attach(to: reactor)
        reactor.onEachIteration { [unowned self] in sendWaiting() }
    }

    /// Queues a read; `completion` runs on the loop with the entry (nil when absent). False
    /// when there is no connection: the caller reads through the pool instead.
    public func read(_ namespace: Namespace, _ key: EntryKey, completion: @escaping Completion) -> Bool {
        guard connection.isOpen else { return false }
        waiting.append(Read(namespace: namespace, key: key, completion: completion))
        return true
    }

    /// Closes the connection (at shutdown, after the loop stopped).
    public func close() {
        connection.close()
    }

    /// Runs at the end of each loop iteration: sends what queued up if nothing is in flight.
    private func sendWaiting() {
        connection.checkDeadline()
        // Reconnect without waiting for a read to ask: reads go to the pool meanwhile.
        connection.connectIfDue()
        guard !waiting.isEmpty else { return }
        guard connection.isOpen else {
            // The connection broke with reads queued behind the one in flight.
            let reads = waiting
            waiting.removeAll()
            for read in reads { read.completion(.failed(PostgresError(.connectionLost))) }
            return
        }
        guard connection.isIdle else { return }
        let batch: [Read]
        if waiting.count <= maxBatch {
            batch = waiting
            waiting.removeAll(keepingCapacity: true)
        } else {
            batch = Array(waiting.prefix(maxBatch))
            waiting.removeFirst(maxBatch)
        }
        batchSizes?.observe([], Double(batch.count))
        let parameters: [PostgresValue] = [.textArray(batch.map(\.namespace.name)), .bytesArray(batch.map(\.key.bytes))]
        connection.send(Self.selectBatch, parameters) { result in
            Self.deliver(result, to: batch)
        }
    }

    private static func deliver(_ result: Result<PostgresResult, PostgresError>, to batch: [Read]) {
        let outcomes: [Outcome]
        do {
            var found = [Outcome](repeating: .absent, count: batch.count)
            for row in try result.get().rows {
                guard let ordinal = try row.int("ordinal"), (1...batch.count).contains(ordinal) else {
                    throw PostgresError(.decoding, serverMessage: "batch row without a valid ordinal")
                }
                found[ordinal - 1] = try row.bool("oversized") == true ? .oversized : .found(try EntryStore.entry(row))
            }
            outcomes = found
        } catch {
            let failure = error as? PostgresError ?? PostgresError(.decoding, serverMessage: "\(error)")
            for read in batch { read.completion(.failed(failure)) }
            return
        }
        for (read, outcome) in zip(batch, outcomes) { read.completion(outcome) }
    }
}
