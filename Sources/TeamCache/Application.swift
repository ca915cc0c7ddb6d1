import CacheCore
import CacheStore
import Foundation
import HTTPServer
import Locking
import Observability
import Postgres

/// The running service: database, pool, store, access tracker, eviction job and HTTP
/// server, started and stopped in order. The composition root: `init` calls one small
/// builder per part (Application+Builders.swift), in the order the parts depend on each other.
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
    /// The requests' token checks (tests read what it computed).
    let authenticator: Authenticator
    /// The event loops' read batchers (empty when TEAMCACHE_READ_BATCH is 0).
    private let readers: [EntryReadBatcher]
    private let readiness: ReadinessProbe
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
        pool = Self.pool(configuration, database, metrics)
        // With a standby to read from, writes learn their WAL position (read-your-writes).
        let history = configuration.readDatabaseURL != nil && configuration.readBatch > 0 ? WALHistory() : nil
        let storeMetrics = MetricCatalogue.store(in: metrics)
        let keyring = try Self.keyring(configuration, pool, storeMetrics)
        store = Self.store(configuration, pool, metrics, clock: clock, history: history, keyring: keyring)
        let flusher = FlushTrigger()
        tracker = AccessTracker(pool: pool, metrics: storeMetrics, enabled: configuration.accessTracking,
                                batchSize: configuration.accessFlushBatch, batchFull: { flusher.fire() })
        tracker.setServerPrices(configuration.prices)
        // Namespaces' own prices now; the namespace refresh keeps them current after.
        if let tables = try? store.namespacePrices() { tracker.setNamespacePrices(tables) }
        tokens = TokenStore(pool: pool)
        let leases = LeaseStore(pool: pool, metrics: storeMetrics, clock: clock)
        directSessions = Self.directSessions(configuration, database)
        eviction = EvictionJob(store: store, metrics: storeMetrics, leases: leases, sessions: directSessions)
        let auth = Authenticator(enabled: configuration.authEnabled, store: tokens,
                                 cacheTTL: configuration.tokenCacheTTL, rateLimit: configuration.rateLimit, clock: clock)
        authenticator = auth
        let loops = Self.loopParts(configuration, database, metrics, leases)
        listener = loops.listener
        let api = CacheAPI(store: store, tracker: tracker, eviction: eviction, leases: leases, waiters: loops.waiters,
                           metrics: metrics, inflated: Self.inflatedBodies(configuration, metrics), near: loops.near,
                           currency: configuration.currency)
        readiness = ReadinessProbe(url: database.url, migrations: database.migrations, limits: configuration.sessionLimits)
        // Probed once now, so the service is ready from its first request.
        readiness.probe()
        let operations = try Self.operations(configuration, metrics, readiness)
        let reads = Self.loopReads(configuration, database, metrics, api: api, auth: auth, loops: loops,
                                   keyring: keyring, history: history)
        readers = reads.readers + reads.replicas
        let gateway = try Self.gateway(configuration, metrics, api: api, auth: auth, reads: reads)
        server = Self.server(configuration, metrics, reads: reads, listener: loops.listener,
                             routes: Self.routes(api: api, operations: operations, auth: auth, reads: reads,
                                                 metricsNeedAuth: configuration.metricsRequireAuth)
                                 + gateway.routes())
        group = ServiceGroup(Self.services(configuration: configuration, store: store, tracker: tracker,
                                           eviction: eviction, server: server, metrics: metrics, flusher: flusher)
            + [PeriodicService(name: "readiness", interval: ReadinessProbe.interval) { [readiness] in readiness.probe() }]
            + Self.positionSampler(store, history)
            // Last in, so stopped first: every parked request is answered before the drain.
            + (loops.waiters.map { [WaitersService(waiters: $0)] } ?? []))
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
