import Foundation
import Locking
import Observability

/// A bounded pool of PostgreSQL connections shared by the request workers.
///
/// Acquiring waits at most `acquireTimeout` and then fails with `.poolBusy`, so a saturated
/// or dead database turns into a fast 503 rather than a pile of hung requests. A connection
/// found broken is dropped and a fresh one opened on demand, which is how the pool recovers
/// after PostgreSQL restarts without restarting the process.
public final class ConnectionPool: Sendable {
    public struct Configuration: Sendable {
        public var url: String
        /// libpq keywords passed beside the URL (e.g. another `dbname`), never spliced into it.
        public var overrides: [String: String] = [:]
        public var maxConnections: Int = 16
        public var acquireTimeout: TimeInterval = 2
        /// After a failed connect, further connects fail at once for this long (no connect storm).
        public var reconnectBackoff: TimeInterval = 0.2
        /// Server- and client-side waits of every pooled session.
        public var limits = SessionLimits()
        /// Each new session checks that it reached a primary (see `requirePrimary`).
        public var requirePrimary = false
        /// Put before the pool's metric names (`db_pool_connections_in_use` and the rest): the
        /// application's namespace, with its underscore (TeamCache's: `teamcache_`).
        public var metricPrefix = ""

        public init(url: String, overrides: [String: String] = [:], maxConnections: Int = 16,
                    acquireTimeout: TimeInterval = 2) {
            self.url = url
            self.overrides = overrides
            self.maxConnections = maxConnections
            self.acquireTimeout = acquireTimeout
        }
    }

    public let configuration: Configuration
    /// The pool's connections, only inside the monitor's lock.
    struct State {
        var idle: [PostgresConnection] = []
        /// Connections open or being opened, handed out or idle.
        var open = 0
        var lastConnectFailure: (Date, PostgresError)?

        /// Whether a caller can be given something now: an idle connection, or room to open one.
        func canGrant(maximum: Int) -> Bool { !idle.isEmpty || open < maximum }

        /// A healthy idle connection, else the right to open one (or the recent failure that
        /// holds new connects back). Only when `canGrant`: dropping broken idle connections
        /// makes the room to open one.
        mutating func grant(maximum: Int, backoff: TimeInterval) -> Grant {
            while let connection = idle.popLast() {
                if connection.looksHealthy() { return .idle(connection) }
                open -= 1
            }
            if let (when, error) = lastConnectFailure, Date().timeIntervalSince(when) < backoff {
                return .failedRecently(error)
            }
            open += 1
            return .connect
        }
    }

    enum Grant {
        case idle(PostgresConnection)
        case connect
        case failedRecently(PostgresError)
        case timedOut
    }

    private let pool = Monitor(State())
    private let metrics: PoolMetrics?

    public init(_ configuration: Configuration, metrics registry: MetricsRegistry? = nil) {
        self.configuration = configuration
        self.metrics = registry.map { PoolMetrics(registry: $0, prefix: configuration.metricPrefix) }
        if let registry {
            registry.addCollector { [weak self] in self?.publishGauges() }
        }
    }

    /// Connections handed out right now, and connections open but idle.
    public var counts: (inUse: Int, idle: Int) {
        pool.withLock { ($0.open - $0.idle.count, $0.idle.count) }
    }

    /// Runs `body` with a connection of its own, returning the connection afterwards.
    /// `acquireTimeout`: a shorter wait for the connection than the pool's (never longer).
    public func withConnection<T>(acquireTimeout: TimeInterval? = nil, _ body: (PostgresConnection) throws -> T)
        throws -> T {
        let connection = try acquire(timeout: min(acquireTimeout ?? configuration.acquireTimeout,
                                                  configuration.acquireTimeout))
        do {
            let value = try body(connection)
            release(connection)
            return value
        } catch {
            release(connection)
            throw error
        }
    }

    /// Runs `body` inside a transaction on a pooled connection.
    public func withTransaction<T>(_ body: (PostgresConnection) throws -> T) throws -> T {
        try withConnection { try $0.transaction(body) }
    }

    /// Closes idle connections (at shutdown); connections in use close when returned.
    public func closeIdle() {
        pool.withLock { state in
            state.open -= state.idle.count
            state.idle.removeAll()
        }
    }

    private func acquire(timeout: TimeInterval) throws -> PostgresConnection {
        let started = Date()
        let deadline = started.addingTimeInterval(timeout)
        let maximum = configuration.maxConnections, backoff = configuration.reconnectBackoff
        var waited = false
        let grant = pool.wait(until: deadline, while: { state in
            let waits = !state.canGrant(maximum: maximum)
            waited = waited || waits
            return waits
        }, then: { state, timedOut in
            timedOut ? .timedOut : state.grant(maximum: maximum, backoff: backoff)
        })
        switch grant {
        case .idle(let connection):
            recordWait(waited, since: started)
            return connection
        case .connect:
            return try connect()
        case .failedRecently(let error):
            throw error
        case .timedOut:
            metrics?.timeouts.inc()
            recordWait(true, since: started)
            throw PostgresError(.poolBusy)
        }
    }

    private func connect() throws -> PostgresConnection {
        do {
            let connection = try PostgresConnection(url: configuration.url, overrides: configuration.overrides,
                                                limits: configuration.limits)
            if configuration.requirePrimary { try connection.requirePrimary() }
            pool.withLock { $0.lastConnectFailure = nil }
            return connection
        } catch let error as PostgresError {
            // Room for one more: a waiter may open it (after the backoff) or take a returned one.
            pool.change(wakingAll: false) { state in
                state.open -= 1
                state.lastConnectFailure = (Date(), error)
            }
            throw error
        }
    }

    private func release(_ connection: PostgresConnection) {
        // Checked before the lock: the checks ask libpq, and the lock is every caller's.
        let reusable = !(connection.isBroken || connection.carriedLargeMessage || !connection.isOutsideTransaction)
        pool.change(wakingAll: false) { state in
            // A connection left inside a transaction (a body that threw before its ROLLBACK
            // could run, say) is closed rather than returned: closing rolls it back.
            if reusable { state.idle.append(connection) } else { state.open -= 1 }
        }
    }

    private func recordWait(_ waited: Bool, since started: Date) {
        guard waited, let metrics else { return }
        metrics.waits.inc()
        metrics.waitSeconds.observe([], Date().timeIntervalSince(started))
    }

    private func publishGauges() {
        guard let metrics else { return }
        let (inUse, idleCount) = counts
        metrics.inUse.set([], Double(inUse))
        metrics.idle.set([], Double(idleCount))
        metrics.max.set([], Double(configuration.maxConnections))
    }
}

/// The pool's Prometheus families.
struct PoolMetrics {
    let inUse: GaugeFamily
    let idle: GaugeFamily
    let max: GaugeFamily
    let waits: CounterFamily
    let timeouts: CounterFamily
    let waitSeconds: HistogramFamily

    init(registry: MetricsRegistry, prefix: String) {
        inUse = registry.gauge(prefix + "db_pool_connections_in_use", "Database connections handed out.")
        idle = registry.gauge(prefix + "db_pool_connections_idle", "Database connections open and idle.")
        max = registry.gauge(prefix + "db_pool_connections_max", "Configured pool size.")
        waits = registry.counter(prefix + "db_pool_waits_total", "Acquires that had to wait for a connection.")
        timeouts = registry.counter(prefix + "db_pool_timeouts_total", "Acquires that gave up at the deadline.")
        waitSeconds = registry.histogram(prefix + "db_pool_wait_seconds", "Time spent waiting for a connection.",
                                         bounds: latencyBuckets)
    }
}
