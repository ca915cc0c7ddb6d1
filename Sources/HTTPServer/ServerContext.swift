import Foundation
import Locking
import Observability

/// What every event loop of one server shares: routes, limits, workers, metrics and the
/// connection count.
final class ServerContext: Sendable {
    let configuration: HTTPServerConfiguration
    let router: Router
    let workers: WorkerPool
    let metrics: HTTPServerMetrics?
    /// Route templates by route id, for metric labels.
    let routeNames: [String]
    let logger = Logger(component: "http")
    /// Unexpected handler errors, summarised when they repeat.
    let failures = LogThrottle(Logger(component: "http"))
    /// Random per process, so generated request ids do not repeat across restarts.
    let requestIDPrefix = String(UInt32.random(in: 0...UInt32.max), radix: 16)
    private let held = Locked(Held())

    /// What the server's connections hold right now.
    private struct Held {
        var openConnections = 0
        /// Open connections per client address (an address leaves when its last one closes).
        var perClient: [String: Int] = [:]
        /// Bytes of request bodies being received right now, over every connection.
        var bodyBytes = 0
        /// Body bytes of requests with credentials not verified yet, per client address.
        var unverifiedBytes: [String: Int] = [:]
    }

    init(configuration: HTTPServerConfiguration, router: Router, metrics: MetricsRegistry?) {
        self.routeNames = router.templates
        self.configuration = configuration
        self.router = router
        self.workers = WorkerPool(threads: configuration.workerThreads, maxQueued: configuration.maxQueuedJobs)
        self.metrics = metrics.map { HTTPServerMetrics(registry: $0, prefix: configuration.metricPrefix) }
    }

    var connectionCount: Int { held.withLock { $0.openConnections } }

    /// Why a new connection was not admitted.
    enum ConnectionRefusal {
        case serverFull, clientFull
    }

    /// Counts a new connection from `peer` in, unless the server is at its connection limit
    /// or that client at its own (so one client cannot hold every slot). nil: admitted.
    func admitConnection(from peer: String) -> ConnectionRefusal? {
        let refusal: ConnectionRefusal? = held.withLock { held in
            guard held.openConnections < configuration.maxConnections else { return .serverFull }
            let fromPeer = held.perClient[peer, default: 0]
            let cap = configuration.maxConnectionsPerClient
            guard cap == 0 || fromPeer < cap else { return .clientFull }
            held.perClient[peer] = fromPeer + 1
            held.openConnections += 1
            return nil
        }
        switch refusal {
        case .serverFull: metrics?.refused.inc(["server_limit"])
        case .clientFull: metrics?.refused.inc(["client_limit"])
        case nil: break
        }
        return refusal
    }

    /// Adds `delta` to the body bytes held; false when the total is now past the budget.
    func holdBodyBytes(_ delta: Int) -> Bool {
        held.withLock { held in
            held.bodyBytes += delta
            return held.bodyBytes <= configuration.bodyBudgetBytes
        }
    }

    var bodyBytesHeld: Int { held.withLock { $0.bodyBytes } }

    /// Adds `delta` to `peer`'s unverified body bytes; false when they are now past its share.
    func holdUnverifiedBytes(_ delta: Int, from peer: String) -> Bool {
        held.withLock { held in
            let bytes = held.unverifiedBytes[peer, default: 0] + delta
            held.unverifiedBytes[peer] = bytes > 0 ? bytes : nil
            return bytes <= configuration.unverifiedShareBytes
        }
    }

    func connectionClosed(from peer: String) {
        held.withLock { held in
            held.openConnections -= 1
            let fromPeer = held.perClient[peer, default: 1] - 1
            held.perClient[peer] = fromPeer > 0 ? fromPeer : nil
        }
    }

    /// Runs a handler, turning thrown errors into problem responses. Unexpected errors
    /// become a generic 500; their text goes to the log only (it may quote data).
    func run(_ route: Route, _ request: HTTPRequest, _ body: () throws -> HTTPResponse) -> HTTPResponse {
        do {
            return try body()
        } catch let error as HTTPError {
            return error.response(requestID: request.requestID)
        } catch {
            failures.log(.error, "handler failed", kind: route.template,
                         [("request_id", .string(request.requestID)), ("route", .string(route.template)),
                          ("error", .string(String(describing: error)))])
            return HTTPError(500, "An unexpected error occurred; quote the request id when reporting it.")
                .response(requestID: request.requestID)
        }
    }
}
