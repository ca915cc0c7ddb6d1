import CacheCore
import CacheStore
import Foundation
import HTTPClient
import HTTPServer
import Locking
import Observability
import Postgres

/// The builders `Application.init` composes, one part each, lowest first.
extension Application {
    /// The parts that live on the event loops: where `wait` requests park, the near-cache, and
    /// the listener that wakes the one and invalidates the other.
    struct LoopParts {
        let waiters: Waiters?
        let near: NearCache?
        let listener: KeyListener?
    }

    static func pool(_ configuration: Configuration, _ database: Database, _ metrics: MetricsRegistry) -> ConnectionPool {
        var settings = ConnectionPool.Configuration(url: database.url, maxConnections: configuration.poolSize,
                                                    acquireTimeout: configuration.acquireTimeout)
        settings.limits = configuration.sessionLimits
        settings.requirePrimary = true
        settings.metricPrefix = Configuration.metricPrefix
        let pool = ConnectionPool(settings, metrics: metrics)
        if configuration.sessionLimits.transactionPooler { checkServerLimits(pool) }
        return pool
    }

    /// Every data key unwrapped before anything is served: a missing or wrong master key
    /// stops the start, naming the variable, instead of serving misses (or ciphertext).
    static func keyring(_ configuration: Configuration, _ pool: ConnectionPool, _ metrics: StoreMetrics) throws
        -> Keyring {
        let keyring = Keyring(master: configuration.masterKeys, metrics: metrics)
        do {
            try keyring.loadAll(pool)
        } catch let error as PostgresError where error.isUnavailable {
            // The database is not reachable yet (the service starts unready and waits for it):
            // keys are then read when first needed, and a key that does not unwrap refuses the
            // write (503) and answers its entries as misses, logged.
            Logger(component: "teamcache").warn("data keys not checked at start: the database is unavailable",
                                                [("error", .string(error.description))])
        }
        return keyring
    }

    static func store(_ configuration: Configuration, _ pool: ConnectionPool, _ metrics: MetricsRegistry,
                      clock: any Clock, history: WALHistory?, keyring: Keyring) -> EntryStore {
        EntryStore(pool: pool, policy: configuration.cache, clock: clock,
                   concurrentWriteBatches: configuration.writeBatches,
                   writeGroupMetrics: writeGroupMetrics(metrics),
                   tracksPositions: history != nil, keyring: keyring)
    }

    /// Bounds from a fast group (half a millisecond) to a commit stuck for seconds.
    static func writeGroupMetrics(_ metrics: MetricsRegistry) -> WriteGroupMetrics {
        let seconds: [Double] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5]
        return WriteGroupMetrics(sizes: metrics.histogram(MetricCatalogue.dbWriteBatchSize, bounds: [1, 2, 4, 8, 16, 32, 64]),
                                 groupSeconds: metrics.histogram(MetricCatalogue.dbWriteGroupSeconds, bounds: seconds),
                                 waitSeconds: metrics.histogram(MetricCatalogue.dbWriteWaitSeconds, bounds: seconds))
    }

    static func loopParts(_ configuration: Configuration, _ database: Database, _ metrics: MetricsRegistry,
                          _ leases: LeaseStore) -> LoopParts {
        // Requests with `wait` park on their loop; they need the loops' batched reads.
        let waiters = configuration.readBatch > 0 ? Waiters(capacity: configuration.maxWaiters, metrics: metrics) : nil
        // The near-cache needs the loops' reads and the listener that invalidates it.
        let near = waiters == nil || configuration.nearCacheBytes == 0 ? nil
            : NearCache(budget: configuration.nearCacheBytes, maxEntryBytes: LoopReads.inlineEntryLimit + 1024)
        if let near { expose(near, metrics) }
        // LISTEN needs a session of its own: never through a transaction pooler.
        let url = database.directURL, limits = configuration.directSessionLimits
        let listener = waiters.map { KeyListener(url: url, limits: limits, waiters: $0, leases: leases, near: near) }
        return LoopParts(waiters: waiters, near: near, listener: listener)
    }

    static func inflatedBodies(_ configuration: Configuration, _ metrics: MetricsRegistry) -> InflatedBodies {
        let inflated = InflatedBodies(budget: configuration.inflateCacheBytes, maxBodyBytes: LoopReads.inlineEntryLimit)
        let bytes = metrics.gauge(MetricCatalogue.inflateCacheBytes)
        metrics.addCollector { bytes.set([], Double(inflated.heldBytes)) }
        return inflated
    }

    /// Health, readiness, the spec and /metrics, with the process-wide gauges behind them.
    static func operations(_ configuration: Configuration, _ metrics: MetricsRegistry, _ readiness: ReadinessProbe)
        throws -> OperationalRoutes {
        guard let specURL = ResourceLocator.find("openapi.yaml"), let spec = FileManager.default.contents(atPath: specURL.path)
        else { throw ConfigurationError(variable: "openapi.yaml", value: "", allowed: "the file beside the binary") }
        let queueUsage = metrics.gauge(MetricCatalogue.notificationQueueUsage)
        metrics.addCollector { queueUsage.set([], readiness.notificationQueueUsage ?? -1) }
        exposeProcess(metrics)
        metrics.gauge(MetricCatalogue.storeMaxBytes)
            .set([], Double(configuration.cache.storeMaxBytes))
        metrics.gauge(MetricCatalogue.storeHardCapBytes)
            .set([], Double(configuration.cache.storeHardCap))
        return OperationalRoutes(readiness: readiness, metrics: metrics, openAPI: Array(spec),
                                 dashboard: Dashboard.load(ResourceLocator.find("ui")))
    }

    /// The process's own gauges: CPU and memory, the heap, dropped log lines, waits on loops.
    static func exposeProcess(_ metrics: MetricsRegistry) {
        ProcessMetrics.register(in: metrics)
        let heapInUse = metrics.gauge(MetricCatalogue.heapInUseBytes)
        let heapFree = metrics.gauge(MetricCatalogue.heapFreeBytes)
        metrics.addCollector {
            let heap = MemoryReturn.heap()
            heapInUse.set([], Double(heap.inUse))
            heapFree.set([], Double(heap.free))
        }
        let droppedLogLines = metrics.counter(MetricCatalogue.logLinesDroppedTotal)
        metrics.addCollector { droppedLogLines.replaceAll([[]: Double(LogSink.shared.droppedLines)]) }
        let loopWaits = metrics.counter(MetricCatalogue.loopBlockingWaitsTotal)
        metrics.addCollector { loopWaits.replaceAll([[]: Double(LoopThreads.blockingWaits)]) }
    }

    /// Read routes served from the loops: one read batcher per loop, and one standby reader
    /// per loop when a standby is configured.
    static func loopReads(_ configuration: Configuration, _ database: Database, _ metrics: MetricsRegistry,
                          api: CacheAPI, auth: Authenticator, loops: LoopParts, keyring: Keyring,
                          history: WALHistory?) -> LoopReads {
        let readers = readers(configuration: configuration, url: database.url, metrics: metrics, keyring: keyring)
        var reads = LoopReads(api: api, auth: auth, readers: readers)
        reads.waiters = loops.waiters
        reads.near = loops.near
        reads.replicas = replicas(configuration: configuration, history: history, metrics: metrics, keyring: keyring)
        reads.maxLag = configuration.readMaxLag
        if !reads.replicas.isEmpty {
            reads.replicaReads = metrics.counter(MetricCatalogue.dbReadsTotal)
            exposeStandbyLag(reads.replicas, metrics)
        }
        return reads
    }

    /// The gateway to model APIs, its outgoing calls made on the server's loops.
    static func gateway(_ configuration: Configuration, _ metrics: MetricsRegistry, api: CacheAPI,
                        auth: Authenticator, reads: LoopReads) throws -> Gateway {
        Gateway(api: api, auth: auth, reads: reads, client: HTTPClient(),
                upstreams: try configuration.upstreams ?? Upstream.defaults(), settings: configuration.gateway,
                metrics: GatewayMetrics(metrics))
    }

    /// The HTTP server, each loop attaching its batchers, its waiters and (loop 0) the listener.
    static func server(_ configuration: Configuration, _ metrics: MetricsRegistry, reads: LoopReads,
                       listener: KeyListener?, routes: [Route]) -> HTTPServer {
        // The wire limit leaves room for a descriptor's JSON around a maximal response; the
        // handlers enforce the exact entry limit (413 with nothing stored).
        var http = configuration.http
        http.limits.maxBodyBytes = configuration.cache.maxBodyBytes + 64 * 1024
        let readers = reads.readers, replicas = reads.replicas, waiters = reads.waiters
        return HTTPServer(configuration: http, routes: routes, metrics: metrics, onLoopStart: { loop in
            if !readers.isEmpty { readers[loop.index].attach(to: loop) }
            if !replicas.isEmpty { replicas[loop.index].attach(to: loop) }
            waiters?.attach(to: loop)
            if loop.index == 0 { listener?.attach(to: loop) }
        })
    }
}
