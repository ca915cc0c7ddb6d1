import CacheCore
import CacheStore
import Foundation
import HTTPServer
import Observability
import Postgres

/// The service's real route table and handlers over a database that cannot be reached,
/// for the request fuzzer: every parser a request meets before the store runs as in
/// production, and every store call fails fast as "unavailable" (503), so any other 5xx is
/// a finding. Auth is off (the token parser is fuzzed through its header all the same) and
/// reads go through the worker routes (no event loop here).
public enum RequestHarness {
    public static func router() -> Router {
        var configuration = Configuration()
        configuration.authEnabled = false
        configuration.readBatch = 0
        // A socket folder that does not exist: each connect fails at once, without a network.
        var pool = ConnectionPool.Configuration(url: "postgresql://postgres@%2Fnonexistent-teamcache-harness:1/none",
                                                maxConnections: 1, acquireTimeout: 0.01)
        pool.limits.connectTimeout = 2
        let connections = ConnectionPool(pool)
        let store = EntryStore(pool: connections, policy: configuration.cache)
        let tracker = AccessTracker(pool: connections, enabled: true)
        let auth = Authenticator(enabled: false, store: TokenStore(pool: connections), cacheTTL: 0, rateLimit: 0,
                                 clock: SystemClock())
        let api = CacheAPI(store: store, tracker: tracker, eviction: EvictionJob(store: store),
                           leases: LeaseStore(pool: connections), metrics: nil,
                           inflated: InflatedBodies(budget: 1 << 20, maxBodyBytes: LoopReads.inlineEntryLimit))
        let operations = OperationalRoutes(readiness: ReadinessProbe(url: "", migrations: MigrationRunner(migrations: [])),
                                           metrics: MetricsRegistry(), openAPI: [])
        return Router(Application.routes(api: api, operations: operations, auth: auth,
                                         reads: LoopReads(api: api, auth: auth, readers: []), metricsNeedAuth: false,
                                         deferWrites: false))
    }
}
