import CacheCore
import CacheStore
import Foundation
import HTTPServer
import Locking
import Observability
import Postgres

/// The helpers behind the builders: pooler checks, per-loop readers, the background services.
extension Application {
    /// Behind a transaction pooler the statement limits cannot travel as startup options:
    /// they must be set on the role or database. Says so at start when they are not.
    static func checkServerLimits(_ pool: ConnectionPool) {
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
    static func directSessions(_ configuration: Configuration, _ database: Database) -> ConnectionPool? {
        guard configuration.sessionLimits.transactionPooler else { return nil }
        var direct = ConnectionPool.Configuration(url: database.directURL, maxConnections: 2,
                                                  acquireTimeout: configuration.acquireTimeout)
        direct.limits = configuration.directSessionLimits
        return ConnectionPool(direct)
    }

    /// The near-cache's gauges and its hit counter.
    static func expose(_ near: NearCache, _ metrics: MetricsRegistry) {
        let bytes = metrics.gauge(MetricCatalogue.nearCacheBytes)
        let entries = metrics.gauge(MetricCatalogue.nearCacheEntries)
        let hits = metrics.counter(MetricCatalogue.nearCacheHitsTotal)
        let on = metrics.gauge(MetricCatalogue.nearCacheEnabled)
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
    static func readers(configuration: Configuration, url: String, metrics: MetricsRegistry, keyring: Keyring)
        -> [EntryReadBatcher] {
        guard configuration.readBatch > 0 else { return [] }
        let sizes = metrics.histogram(MetricCatalogue.dbReadBatchSize,
                                      bounds: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024])
        return (0..<max(1, configuration.http.eventLoops)).map { _ in
            EntryReadBatcher(url: url, maxBatch: configuration.readBatch, timeout: configuration.readTimeout,
                             limits: configuration.sessionLimits, batchSizes: sizes, keyring: keyring)
        }
    }

    /// One standby reader per event loop when TEAMCACHE_READ_DATABASE_URL is set (and reads
    /// are batched: the pool's reads stay on the primary).
    static func replicas(configuration: Configuration, history: WALHistory?, metrics: MetricsRegistry,
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
    static func exposeStandbyLag(_ replicas: [EntryReadBatcher], _ metrics: MetricsRegistry) {
        let lag = metrics.gauge(MetricCatalogue.readStandbyLagSeconds)
        metrics.addCollector {
            let now = WALHistory.now
            let seen = replicas.map { $0.staleness(now: now) }
            lag.set([], seen.contains(where: { $0 == nil }) ? -1 : seen.compactMap { $0 }.max() ?? -1)
        }
    }

    /// Samples the primary's WAL position ten times a second: what the standby readers'
    /// lag is judged by.
    static func positionSampler(_ store: EntryStore, _ history: WALHistory?) -> [any Service] {
        guard let history else { return [] }
        return [PeriodicService(name: "wal-position", interval: 0.1) { try? store.samplePosition(into: history) }]
    }

    static func services(configuration: Configuration, store: EntryStore, tracker: AccessTracker,
                                 eviction: EvictionJob, server: HTTPServer, metrics: MetricsRegistry,
                                 flusher trigger: FlushTrigger) -> [any Service] {
        let logger = Logger(component: "access-tracker")
        // Every tick when few entries' counts wait, fewer under load (`flushIfDue`); all at a stop.
        let flusher = PeriodicService(name: "access-flush", interval: configuration.accessFlushInterval, runOnStop: true,
                                      finalWork: {
            do { try tracker.flush() } catch { logger.warn("flush failed", [("error", .string("\(error)"))]) }
        }) {
            do { try tracker.flushIfDue() } catch { logger.warn("flush failed", [("error", .string("\(error)"))]) }
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
            // Once before the server listens: until the namespaces are known, lookups of a
            // namespace not yet asked for since the start would count under `_other` (its
            // stats and history would lose them).
            PeriodicService(name: "namespace-gauges", interval: 15, runOnStart: true) { gauges.refresh() },
            // Every replica asks four times an interval; one per interval gets the slot and runs.
            PeriodicService(name: "eviction", interval: configuration.evictionInterval / 4, jitter: 0.1) {
                eviction.runScheduledCycle(interval: configuration.evictionInterval)
            },
            HTTPService(server: server),
        ]
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
        entries = metrics.gauge(MetricCatalogue.entries)
        bytes = metrics.gauge(MetricCatalogue.storedBytes)
    }

    func refresh() {
        guard var totals = try? store.namespaceTotals() else { return }
        totals = totals.filter { $0.value.entries > 0 }
        // The namespaces that may have series of their own: they hold entries or settings
        // (not learnt when the settings cannot be read: a partial list would drop namespaces).
        if let configured = try? store.configuredNamespaces() {
            tracker.learnNamespaces(Set(totals.keys).union(configured))
        }
        // Prices a namespace was given through another replica are in force here from now.
        if let tables = try? store.namespacePrices() { tracker.setNamespacePrices(tables) }
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
