import CacheCore
import Foundation
import Locking
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
    // @unchecked: made before its loop exists (one per loop, held by the service and looked
    // up by loop index on the read path) and closed after the loop stopped; in between only
    // its loop's thread reads and sends through it, except `staleness`, which other threads
    // read through a `Locked` of its own. (A `LoopBound` cannot hold it: it has no loop when made.)
    public typealias Completion = (Outcome) -> Void

    public enum Outcome {
        case found(StoredEntry)
        case absent
        /// The entry must be read through the pool, off the loop: its stored body is over
        /// `inlineBodyLimit` (it was not sent), or it is sealed and opening it here would block
        /// or take long (a data key not loaded yet, a large body: `Keyring.Opened.offLoop`).
        case readOffLoop
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

    /// The reader's session: its statements prepared, its setup, which server it must reach.
    static func session(url: String, timeout: TimeInterval, limits: SessionLimits, standby: Bool)
        -> LoopConnection.Configuration {
        // Named apart from the pool's connections, for pg_stat_activity.
        var configuration = LoopConnection.Configuration(
            url: url, overrides: ["application_name": standby ? replicaName : applicationName],
            statements: [(selectBatch, [.textArray([]), .bytesArray([])])] + (standby ? [(probeReplay, [])] : []),
            timeout: timeout)
        configuration.limits = limits
        // Its batch statement keeps one generic plan. PostgreSQL plans a prepared statement anew
        // for its first five runs, then keeps a generic plan only if that estimates below their
        // average; blind to the arrays' lengths, it takes 10 keys, dearer than any batch of fewer,
        // so under a light load (batches of one to a few keys) every batch was planned: 114-128
        // µs of PostgreSQL's CPU a database hit against 44-60 with the generic plan
        // (bench/results/2026-12-07-writes-9.md). The session runs nothing else a custom plan
        // would serve (the replay probe has no parameters). Not behind a transaction pooler: a
        // `SET` there would reach other clients' sessions, and nothing is prepared there anyway.
        if !limits.transactionPooler { configuration.setup = ["SET plan_cache_mode = force_generic_plan"] }
        // The primary's reader must not land on a standby; a standby's reader must (its probe checks).
        configuration.requirePrimary = !standby
        return configuration
    }

    private struct Read {
        let namespace: Namespace
        let key: EntryKey
        let completion: Completion
    }

    /// A standby's replay position and whether it is still a standby; asked between batches.
    static let probeReplay = "SELECT pg_last_wal_replay_lsn()::text AS replayed, pg_is_in_recovery() AS standby"
    static let probeInterval: UInt64 = 100_000_000

    private let connection: LoopConnection
    private let keyring: Keyring
    private let maxBatch: Int
    private let batchSizes: HistogramFamily?
    private var waiting: [Read] = []
    /// Reading from a standby: the primary's history the replay position is judged by.
    private let primary: WALHistory?
    private var lastProbe: UInt64 = 0
    /// Weakly, through its handle (`ReactorHandle`).
    private weak var reactorHandle: ReactorHandle?
    private var reactor: (any Reactor)? { reactorHandle?.reactor }
    private var reactorNow: UInt64 { reactor?.nanoseconds ?? 0 }
    /// What this connection's standby had replayed as of the last probe (nil: unknown, or
    /// the server is no standby). Any statement sent after that probe sees at least that much.
    public private(set) var replayed: WALPosition?
    /// Monotonic nanoseconds as of which this standby is known current (see `WALHistory`).
    /// Set on the loop; read there and by the metrics collector, so kept under a lock.
    private let knownCurrentAsOf = Locked<UInt64?>(nil)
    private var currentAsOf: UInt64? {
        get { knownCurrentAsOf.value }
        set { knownCurrentAsOf.withLock { $0 = newValue } }
    }

    /// `replicaOf`: this batcher reads from a standby of the primary `WALHistory` samples;
    /// it then probes the standby's replay position between batches.
    public init(url: String, maxBatch: Int, timeout: TimeInterval, limits: SessionLimits = SessionLimits(),
                batchSizes: HistogramFamily?, replicaOf primary: WALHistory? = nil, keyring: Keyring = Keyring(master: nil)) {
        self.keyring = keyring
        connection = LoopConnection(Self.session(url: url, timeout: timeout, limits: limits, standby: primary != nil))
        self.maxBatch = max(1, maxBatch)
        self.batchSizes = batchSizes
        self.primary = primary
        if primary != nil {
            // A new session may reach another server: nothing is known of it until probed.
            connection.onOpenChange = { [unowned self] _ in
                replayed = nil
                currentAsOf = nil
            }
        }
    }

    public static let replicaName = "teamcache-replica-reads"

    /// Whether a read sent now would see every commit up to `position` (a client's own
    /// write): true only when the last probe saw it replayed.
    public func hasReplayed(_ position: WALPosition) -> Bool {
        replayed.map { $0 >= position } ?? false
    }

    /// How far behind the primary a read sent at `now` may be, at most (nil: unknown). Any thread.
    public func staleness(now: UInt64) -> TimeInterval? {
        currentAsOf.map { now >= $0 ? TimeInterval(now - $0) / 1e9 : 0 }
    }

    /// Starts connecting and hooks the batch sender into the loop. Call on the loop's thread.
    public func attach(to reactor: any Reactor) {
        reactorHandle = reactor.handle
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
        // A standby is probed whether or not reads wait: reads are sent to it only while
        // recent probes show it current, so an idle one must keep proving that.
        if let primary, connection.isIdle, reactorNow &- lastProbe >= Self.probeInterval {
            probe(primary)
            return
        }
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
        connection.send(Self.selectBatch, parameters) { [keyring] result in
            Self.deliver(result, to: batch, keyring: keyring)
        }
    }

    /// Asks the standby how far it has replayed; reads queued meanwhile leave after it.
    private func probe(_ history: WALHistory) {
        lastProbe = reactorNow
        connection.send(Self.probeReplay, []) { [unowned self] result in
            let row = (try? result.get())?.first
            guard let row, (try? row.bool("standby")) == true, let text = try? row.string("replayed"),
                  let position = WALPosition(text) else {
                // Not a standby (promoted, or the URL names a primary), or no answer: unknown.
                replayed = nil
                currentAsOf = nil
                return
            }
            replayed = position
            currentAsOf = history.currentAsOf(replayed: position, now: reactorNow)
        }
    }

    private static func deliver(_ result: Result<PostgresResult, PostgresError>, to batch: [Read], keyring: Keyring) {
        let outcomes: [Outcome]
        do {
            var found = [Outcome](repeating: .absent, count: batch.count)
            for row in try result.get().rows {
                guard let ordinal = try row.int("ordinal"), (1...batch.count).contains(ordinal) else {
                    throw PostgresError(.decoding, serverMessage: "batch row without a valid ordinal")
                }
                if try row.bool("oversized") == true {
                    found[ordinal - 1] = .readOffLoop
                    continue
                }
                switch try EntryStore.decode(row, keyring: keyring, pool: nil) {
                case .entry(let entry): found[ordinal - 1] = .found(entry)
                case .offLoop: found[ordinal - 1] = .readOffLoop
                // Does not open (logged and counted): a miss, which the next write replaces.
                case .broken: found[ordinal - 1] = .absent
                }
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

