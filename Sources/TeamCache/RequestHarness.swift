import CacheCore
import CacheStore
import Foundation
import HTTPServer
import Observability
import Postgres

/// The service's real route table and handlers over the in-memory store, for the request
/// fuzzer: every parser a request meets runs as in production, and so does what follows a
/// store call (writes land and are read back, leases are granted, feeds and exports are
/// paged), so any 500 is a finding. Auth is off (the token parser is fuzzed through its
/// header all the same) and reads go through the worker routes (no event loop here).
public enum RequestHarness {
    /// Bytes the harness's store holds at most (writes past it are 507, as at a hard cap):
    /// a long fuzzing run's memory stays flat.
    static let storeBytes: Int64 = 64 * 1024 * 1024

    public static func router() -> Router {
        var configuration = Configuration()
        configuration.authEnabled = false
        // No server is made here: the service's problem types are named as a server would.
        ProblemTypes.use(base: configuration.http.problemTypeBase)
        configuration.readBatch = 0
        var policy = configuration.cache
        policy.storeMaxBytes = storeBytes
        policy.hardCapRatio = 1
        let store = MemoryStore(policy: policy, feedCapacity: 10_000)
        let tracker = AccessTracker(pool: nil, enabled: true)
        let auth = Authenticator(enabled: false, store: NoTokens(), cacheTTL: 0, rateLimit: 0, clock: SystemClock())
        let api = CacheAPI(store: store, tracker: tracker, eviction: nil, leases: MemoryLeases(), metrics: nil,
                           inflated: InflatedBodies(budget: 1 << 20, maxBodyBytes: LoopReads.inlineEntryLimit))
        let operations = OperationalRoutes(readiness: ReadinessProbe(url: "", migrations: MigrationRunner(migrations: [])),
                                           metrics: MetricsRegistry(), openAPI: [])
        return Router(Application.routes(api: api, operations: operations, auth: auth,
                                         reads: LoopReads(api: api, auth: auth, readers: []), metricsNeedAuth: false,
                                         deferWrites: false))
    }
}

/// A token directory that knows no token (auth is off where it is used).
struct NoTokens: TokenDirectory {
    func find(hash: [UInt8]) throws -> APIToken? { nil }
}
