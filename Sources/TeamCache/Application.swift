import CacheCore
import CacheStore
import Foundation
import HTTPServer
import Locking
import Observability
import Postgres

/// The HTTP server's loops drive the database's non-blocking connections (the two modules
/// know nothing of each other; this is where they meet).
extension EventLoop: Reactor {}

/// The running service: database, pool, store, access tracker, eviction job and HTTP
/// server, started and stopped in order.
public final class Application: Sendable {
    public let configuration: Configuration
    public let database: Database
    public let pool: ConnectionPool
    public let store: EntryStore
    public let tracker: AccessTracker
    public let tokens: TokenStore
    public let metrics: MetricsRegistry
    public let server: HTTPServer
    public let eviction: EvictionJob
    /// The event loops' read batchers (empty when TEAMCACHE_READ_BATCH is 0).
    private let readers: [EntryReadBatcher]
    private let readiness: ReadinessProbe
    private let waiters: Waiters?
    private let listener: KeyListener?
    /// Direct sessions beside a transaction pooler (nil without one).
    private let directSessions: ConnectionPool?
    private let group: ServiceGroup
    private let logger = Logger(component: "teamcache")

    /// Opens the database (the embedded default migrates itself) and builds every part.
    public init(configuration: Configuration, clock: any Clock = SystemClock()) throws {
        self.configuration = configuration
        metrics = MetricsRegistry()
        database = try Database(configuration: configuration, requireCurrent: true)
        var poolConfiguration = ConnectionPool.Configuration(url: database.url, maxConnections: configuration.poolSize,
                                                             acquireTimeout: configuration.acquireTimeout)
        poolConfiguration.limits = configuration.sessionLimits
        poolConfiguration.requirePrimary = true
        poolConfiguration.metricPrefix = Configuration.metricPrefix
        pool = ConnectionPool(poolConfiguration, metrics: metrics)
        if configuration.sessionLimits.transactionPooler { Self.checkServerLimits(pool) }
        // A quarter of the pool commits writes; the rest stays free for reads, flushes and eviction.
        // With a standby to read from, writes learn their WAL position (read-your-writes).
        let primaryHistory = configuration.readDatabaseURL != nil && configuration.readBatch > 0 ? WALHistory() : nil
        // Every data key unwrapped before anything is served: a missing or wrong master key
        // stops the start, naming the variable, instead of serving misses (or ciphertext).
        let keyring = Keyring(master: configuration.masterKeys, metrics: metrics)
        do {
            try keyring.loadAll(pool)
        } catch let error as PostgresError where error.isUnavailable {
            // The database is not reachable yet (the service starts unready and waits for it):
            // keys are then read when first needed, and a key that does not unwrap refuses the
            // write (503) and answers its entries as misses, logged.
            logger.warn("data keys not checked at start: the database is unavailable",
                        [("error", .string(error.description))])
        }
        store = EntryStore(pool: pool, policy: configuration.cache, clock: clock,
                           concurrentWriteBatches: max(1, configuration.poolSize / 4),
                           writeBatchSizes: metrics.histogram("teamcache_db_write_batch_size",
                                                              "Entry writes per committed transaction.",
                                                              bounds: [1, 2, 4, 8, 16, 32, 64]),
                           tracksPositions: primaryHistory != nil, keyring: keyring)
        let flusher = FlushTrigger()
        tracker = AccessTracker(pool: pool, metrics: metrics, enabled: configuration.accessTracking,
                                batchSize: configuration.accessFlushBatch, batchFull: { flusher.fire() })
        tokens = TokenStore(pool: pool)
        let leases = LeaseStore(pool: pool, metrics: metrics)
        let directSessions = Self.directSessions(configuration, database)
        self.directSessions = directSessions
        eviction = EvictionJob(store: store, metrics: metrics, leases: leases, sessions: directSessions)
        let auth = Authenticator(enabled: configuration.authEnabled, store: tokens,
                                 cacheTTL: configuration.tokenCacheTTL, rateLimit: configuration.rateLimit, clock: clock)
        let inflated = InflatedBodies(budget: configuration.inflateCacheBytes, maxBodyBytes: LoopReads.inlineEntryLimit)
        let inflatedBytes = metrics.gauge("teamcache_inflate_cache_bytes",
                                          "Inflated bodies held for clients without gzip, in bytes.")
        metrics.addCollector { inflatedBytes.set([], Double(inflated.heldBytes)) }
        // Requests with `wait` park on their loop; they need the loops' batched reads.
        let waiters = configuration.readBatch > 0 ? Waiters(capacity: configuration.maxWaiters, metrics: metrics) : nil
        // The near-cache needs the loops' reads and the listener that invalidates it.
        let near = waiters == nil || configuration.nearCacheBytes == 0 ? nil
            : NearCache(budget: configuration.nearCacheBytes, maxEntryBytes: LoopReads.inlineEntryLimit + 1024)
        if let near { Application.expose(near, metrics) }
        // LISTEN needs a session of its own: never through a transaction pooler.
        let url = database.directURL, limits = configuration.directSessionLimits
        let listener = waiters.map { KeyListener(url: url, limits: limits, waiters: $0, leases: leases, near: near) }
        self.listener = listener
        self.waiters = waiters
        let api = CacheAPI(store: store, tracker: tracker, eviction: eviction, leases: leases, waiters: waiters,
                           metrics: metrics, inflated: inflated, near: near)
        guard let specURL = ResourceLocator.find("openapi.yaml"), let spec = FileManager.default.contents(atPath: specURL.path)
        else { throw ConfigurationError(variable: "openapi.yaml", value: "", allowed: "the file beside the binary") }
        let readiness = ReadinessProbe(url: database.url, migrations: database.migrations,
                                       limits: configuration.sessionLimits)
        // Probed once now, so the service is ready from its first request.
        readiness.probe()
        self.readiness = readiness
        let queueUsage = metrics.gauge("teamcache_notification_queue_usage",
                                       "PostgreSQL's notification queue in use (0-1; -1 unknown): full, every write fails.")
        metrics.addCollector { queueUsage.set([], readiness.notificationQueueUsage ?? -1) }
        let operations = OperationalRoutes(readiness: readiness, metrics: metrics, openAPI: Array(spec))
        ProcessMetrics.register(in: metrics)
        let heapInUse = metrics.gauge("teamcache_heap_in_use_bytes", "Heap bytes in use (glibc mallinfo2).")
        let heapFree = metrics.gauge("teamcache_heap_free_bytes", "Heap bytes free but still held by glibc's arenas.")
        metrics.addCollector {
            let heap = MemoryReturn.heap()
            heapInUse.set([], Double(heap.inUse))
            heapFree.set([], Double(heap.free))
        }
        let droppedLogLines = metrics.counter("teamcache_log_lines_dropped_total",
                                              "Log lines dropped because the log output did not drain.")
        metrics.addCollector { droppedLogLines.replaceAll([[]: Double(LogSink.shared.droppedLines)]) }
        metrics.gauge("teamcache_store_max_bytes", "Configured soft cap of the store in stored bytes (0: none).")
            .set([], Double(configuration.cache.storeMaxBytes))
        metrics.gauge("teamcache_store_hard_cap_bytes", "Writes past this many stored bytes get 507 (0: none).")
            .set([], Double(configuration.cache.storeHardCap))
        // The wire limit leaves room for a descriptor's JSON around a maximal response; the
        // handlers enforce the exact entry limit (413 with nothing stored).
        var http = configuration.http
        http.limits.maxBodyBytes = configuration.cache.maxBodyBytes + 64 * 1024
        let readers = Self.readers(configuration: configuration, url: database.url, metrics: metrics, keyring: keyring)
        let replicas = Self.replicas(configuration: configuration, history: primaryHistory, metrics: metrics,
                                     keyring: keyring)
        self.readers = readers + replicas
        var reads = LoopReads(api: api, auth: auth, readers: readers)
        reads.waiters = waiters
        reads.near = near
        reads.replicas = replicas
        reads.maxLag = configuration.readMaxLag
        if !replicas.isEmpty {
            reads.replicaReads = metrics.counter("teamcache_db_reads_total",
                                                 "Batched entry reads by the database that answered them.",
                                                 labels: ["database"])
            Self.exposeStandbyLag(replicas, metrics)
        }
        server = HTTPServer(configuration: http,
                            routes: Self.routes(api: api, operations: operations, auth: auth, reads: reads,
                                                metricsNeedAuth: configuration.metricsRequireAuth),
                            metrics: metrics,
                            onLoopStart: { loop in
                                if !readers.isEmpty { readers[loop.index].attach(to: loop) }
                                if !replicas.isEmpty { replicas[loop.index].attach(to: loop) }
                                waiters?.attach(to: loop)
                                if loop.index == 0 { listener?.attach(to: loop) }
                            })
        group = ServiceGroup(Self.services(configuration: configuration, store: store, tracker: tracker,
                                           eviction: eviction, server: server, metrics: metrics, flusher: flusher)
            + [PeriodicService(name: "readiness", interval: ReadinessProbe.interval) { readiness.probe() }]
            + Self.positionSampler(store, primaryHistory)
            // Last in, so stopped first: every parked request is answered before the drain.
            + (waiters.map { [WaitersService(waiters: $0)] } ?? []))
    }

    /// Behind a transaction pooler the statement limits cannot travel as startup options:
    /// they must be set on the role or database. Says so at start when they are not.
    private static func checkServerLimits(_ pool: ConnectionPool) {
        let logger = Logger(component: "database")
        let settings = ["statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout"]
        guard let off = try? pool.withConnection({ connection in
            try settings.filter { setting in
                try connection.query("SELECT current_setting($1) AS value", [.text(setting)]).first?.string("value") == "0"
            }
        }), !off.isEmpty else { return }
        logger.warn("database limits off behind the transaction pooler; set them on the role "
            + "(ALTER ROLE … SET statement_timeout = '4s', and so on): only the client-side deadline bounds "
            + "statements now", [("off", .string(off.joined(separator: ",")))])
    }

    /// A small pool of direct sessions when the main pool goes through a transaction
    /// pooler (nil otherwise: the main pool's sessions are direct already).
    private static func directSessions(_ configuration: Configuration, _ database: Database) -> ConnectionPool? {
        guard configuration.sessionLimits.transactionPooler else { return nil }
        var direct = ConnectionPool.Configuration(url: database.directURL, maxConnections: 2,
                                                  acquireTimeout: configuration.acquireTimeout)
        direct.limits = configuration.directSessionLimits
        return ConnectionPool(direct)
    }

    /// The near-cache's gauges and its hit counter.
    static func expose(_ near: NearCache, _ metrics: MetricsRegistry) {
        let bytes = metrics.gauge("teamcache_near_cache_bytes", "Memory held by hot entries kept in this process.")
        let entries = metrics.gauge("teamcache_near_cache_entries", "Hot entries kept in this process.")
        let hits = metrics.counter("teamcache_near_cache_hits_total", "Reads answered from the near-cache.")
        let on = metrics.gauge("teamcache_near_cache_enabled", "1 while the near-cache answers (its listener is up).")
        metrics.addCollector {
            bytes.set([], Double(near.heldBytes))
            entries.set([], Double(near.count))
            hits.replaceAll([[]: Double(near.counters.hits)])
            on.set([], near.enabled ? 1 : 0)
        }
    }

    /// How often counter deltas are folded into the totals: the most the hard caps (which
    /// read only folded totals) lag behind the writes.
    static let counterFoldInterval: TimeInterval = 1
    /// How often the change feed's background sequencer looks for changes to number.
    static let feedSequencerInterval: TimeInterval = 0.1

    /// One read batcher per event loop, each with its own database connection (beside the pool).
    private static func readers(configuration: Configuration, url: String, metrics: MetricsRegistry, keyring: Keyring)
        -> [EntryReadBatcher] {
        guard configuration.readBatch > 0 else { return [] }
        let sizes = metrics.histogram("teamcache_db_read_batch_size", "Entry reads per batched statement.",
                                      bounds: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024])
        return (0..<max(1, configuration.http.eventLoops)).map { _ in
            EntryReadBatcher(url: url, maxBatch: configuration.readBatch, timeout: configuration.readTimeout,
                             limits: configuration.sessionLimits, batchSizes: sizes, keyring: keyring)
        }
    }

    /// One standby reader per event loop when TEAMCACHE_READ_DATABASE_URL is set (and reads
    /// are batched: the pool's reads stay on the primary).
    private static func replicas(configuration: Configuration, history: WALHistory?, metrics: MetricsRegistry,
                                 keyring: Keyring) -> [EntryReadBatcher] {
        guard let url = configuration.readDatabaseURL, let history else { return [] }
        return (0..<max(1, configuration.http.eventLoops)).map { _ in
            EntryReadBatcher(url: url, maxBatch: configuration.readBatch, timeout: configuration.readTimeout,
                             limits: configuration.directSessionLimits, batchSizes: nil, replicaOf: history,
                             keyring: keyring)
        }
    }

    /// The read standby's lag as its loops last saw it: the largest over the loops, -1 while
    /// any loop knows nothing (the standby is down, not a standby, or not current at all).
    private static func exposeStandbyLag(_ replicas: [EntryReadBatcher], _ metrics: MetricsRegistry) {
        let lag = metrics.gauge("teamcache_read_standby_lag_seconds",
                                "How far behind the primary the read standby may be (-1: unknown, not read from).")
        metrics.addCollector {
            let now = WALHistory.now
            let seen = replicas.map { $0.staleness(now: now) }
            lag.set([], seen.contains(where: { $0 == nil }) ? -1 : seen.compactMap { $0 }.max() ?? -1)
        }
    }

    /// Samples the primary's WAL position ten times a second: what the standby readers'
    /// lag is judged by.
    private static func positionSampler(_ store: EntryStore, _ history: WALHistory?) -> [any Service] {
        guard let history else { return [] }
        return [PeriodicService(name: "wal-position", interval: 0.1) { try? store.samplePosition(into: history) }]
    }

    private static func services(configuration: Configuration, store: EntryStore, tracker: AccessTracker,
                                 eviction: EvictionJob, server: HTTPServer, metrics: MetricsRegistry,
                                 flusher trigger: FlushTrigger) -> [any Service] {
        let logger = Logger(component: "access-tracker")
        let flusher = PeriodicService(name: "access-flush", interval: configuration.accessFlushInterval,
                                      runOnStop: true) {
            do { try tracker.flush() } catch { logger.warn("flush failed", [("error", .string("\(error)"))]) }
        }
        trigger.connect(flusher)
        let gauges = NamespaceGauges(store: store, tracker: tracker, metrics: metrics)
        let folds = LogThrottle(Logger(component: "counters"), interval: 60)
        // The only writer of the totals; every replica offers, one at a time folds.
        let folder = PeriodicService(name: "counter-fold", interval: Self.counterFoldInterval, runOnStop: true) {
            do { try store.foldCounters() } catch {
                _ = folds.log(.warn, "counter fold failed", kind: "\(error)", [("error", .string("\(error)"))])
            }
        }
        // The change feed's numbering, off every request path: one pass at a time per process
        // (a backlog is numbered 10,000 rows a run, for at most a second a pass).
        let sequencing = LogThrottle(Logger(component: "change-feed"), interval: 60)
        let sequencer = PeriodicService(name: "feed-sequencer", interval: Self.feedSequencerInterval) {
            do { try store.sequenceChanges() } catch {
                _ = sequencing.log(.warn, "feed numbering failed", kind: "\(error)", [("error", .string("\(error)"))])
            }
        }
        // Stopped in reverse order: the flusher's last flush comes before the last fold.
        return [
            folder,
            sequencer,
            flusher,
            PeriodicService(name: "namespace-gauges", interval: 15) { gauges.refresh() },
            // Every replica asks four times an interval; one per interval gets the slot and runs.
            PeriodicService(name: "eviction", interval: configuration.evictionInterval / 4, jitter: 0.1) {
                eviction.runScheduledCycle(interval: configuration.evictionInterval)
            },
            HTTPService(server: server),
        ]
    }

    /// Starts the background services and the listener; returns once it accepts connections.
    public func start() throws {
        try group.start()
        let address = "http://\(configuration.http.host):\(server.port)"
        logger.info("listening", [("address", .string(address)), ("auth", .bool(configuration.authEnabled))])
    }

    /// Serves until SIGTERM or SIGINT, then stops in order.
    public func runUntilSignalled() {
        group.runUntilSignalled()
        finish()
    }

    /// Stops serving (in-flight requests finish), flushes counts, closes the database.
    public func stop() {
        group.stopAll()
        finish()
    }

    private func finish() {
        // The loops have stopped: their batchers' connections can close from here.
        for reader in readers { reader.close() }
        listener?.close()
        readiness.close()
        pool.closeIdle()
        directSessions?.closeIdle()
        database.close()
        LogSink.shared.flush()
    }
}

/// Parked requests as a service: stopping answers every one of them at once (`pending`, or
/// a miss), so a drain is never held up by requests waiting for a fill.
final class WaitersService: Service, Sendable {
    let name = "waiters"
    let waiters: Waiters

    init(waiters: Waiters) { self.waiters = waiters }
    func start() throws {}
    func stop() { waiters.wakeAll(final: true) }
}

/// The HTTP server as a service.
final class HTTPService: Service, Sendable {
    let name = "http"
    let server: HTTPServer

    init(server: HTTPServer) { self.server = server }
    func start() throws { try server.start() }
    func stop() { server.shutdown() }
}

/// Per-namespace entries and bytes for /metrics, refreshed in the background so rendering
/// never touches the database.
struct NamespaceGauges: Sendable {
    let store: EntryStore
    let tracker: AccessTracker
    let entries: GaugeFamily
    let bytes: GaugeFamily

    init(store: EntryStore, tracker: AccessTracker, metrics: MetricsRegistry) {
        self.store = store
        self.tracker = tracker
        entries = metrics.gauge("teamcache_entries", "Entries stored, by namespace.", labels: ["namespace"])
        bytes = metrics.gauge("teamcache_stored_bytes", "Bytes stored, by namespace and encoding basis.",
                              labels: ["namespace", "kind"])
    }

    func refresh() {
        guard var totals = try? store.namespaceTotals() else { return }
        totals = totals.filter { $0.value.entries > 0 }
        // The namespaces that may have series of their own: they hold entries or settings.
        tracker.learnNamespaces(Set(totals.keys).union((try? store.configuredNamespaces()) ?? []))
        // The gauges follow the same cap: the largest namespaces by bytes, the rest summed.
        totals = Self.capped(totals, NamespaceLabels.defaultCapacity)
        entries.replaceAll(Dictionary(uniqueKeysWithValues: totals.map { ([$0.key], Double($0.value.entries)) }))
        var byKind: [[String]: Double] = [:]
        for (namespace, total) in totals {
            byKind[[namespace, "identity"]] = Double(total.identityBytes)
            byKind[[namespace, "stored"]] = Double(total.storedBytes)
        }
        bytes.replaceAll(byKind)
    }
}

extension NamespaceGauges {
    typealias Totals = [String: (entries: Int, identityBytes: Int, storedBytes: Int)]

    /// At most `limit` namespaces by name (the largest by stored bytes), the rest summed
    /// under `_other`.
    static func capped(_ totals: Totals, _ limit: Int) -> Totals {
        guard totals.count > limit else { return totals }
        let ranked = totals.sorted { $0.value.storedBytes > $1.value.storedBytes }
        var kept = Totals(uniqueKeysWithValues: ranked.prefix(limit - 1).map { ($0.key, $0.value) })
        var rest = (entries: 0, identityBytes: 0, storedBytes: 0)
        for (_, total) in ranked.dropFirst(limit - 1) {
            rest = (rest.entries &+ total.entries, rest.identityBytes &+ total.identityBytes,
                    rest.storedBytes &+ total.storedBytes)
        }
        kept[NamespaceLabels.other] = rest
        return kept
    }
}

/// Lets the access tracker wake the flusher early; connected once the flusher exists.
final class FlushTrigger: Sendable {
    private let service = Locked<PeriodicService?>(nil)

    func connect(_ service: PeriodicService) { self.service.withLock { $0 = service } }
    func fire() { service.value?.trigger() }
}
