import CacheCore
import Foundation
import HTTPServer
import Locking

/// The route table: each route names the scope it needs and whether it is namespaced.
extension Application {
    typealias SecuredHandler = @Sendable (HTTPRequest, RequestContext) throws -> HTTPResponse

    /// A handler that authorizes `scope` (on the path's namespace, if any) before `handler`;
    /// blocking (the token may be read from the database), so for workers.
    static func secured(_ api: CacheAPI, _ auth: Authenticator, _ scope: Scope,
                        _ handler: @escaping SecuredHandler) -> HTTPHandler {
        { request in
            try api.guarded(request) {
                let namespace = try RequestContext.namespace(of: request)
                let principal = try auth.authorize(request, scope, namespace: namespace)
                return try handler(request, try RequestContext(request, namespace: namespace, principal: principal))
            }
        }
    }

    typealias DeferredHandler = @Sendable (HTTPRequest, RequestContext, @escaping Responder.Answer) throws
        -> HTTPResponse?

    /// As `secured`, for a handler that may answer later through `answer` (returning nil):
    /// nothing waits for the commit. It starts on the request's loop when nothing before the
    /// commit can block there: a token in the cache and a small identity body (deflating a
    /// 2 KB PUT is ~15 µs of the loop; a hop to a worker cost more, its wake-up and switch,
    /// bench/results/2026-12-06-writes-4.md). Otherwise it starts on a worker, which may read
    /// the token and inflate a large or gzip body.
    static func securedDeferred(_ api: CacheAPI, _ auth: Authenticator, _ scope: Scope,
                                _ handler: @escaping DeferredHandler) -> AsyncHTTPHandler {
        { request, responder in
            // A full worker queue: the worker path refuses it at once (503, nothing stored),
            // where a write started here would be queued with no worker to commit it.
            guard request.body.count <= inlineWriteBodyLimit, !request.headers.contains("Content-Encoding"),
                  !responder.loop.workersAreFull else {
                return startOnWorker(api, auth, scope, handler, request, responder)
            }
            var context: RequestContext
            do {
                let namespace = try RequestContext.namespace(of: request)
                guard let principal = try auth.authorizeWithoutBlocking(request, scope, namespace: namespace) else {
                    return startOnWorker(api, auth, scope, handler, request, responder)
                }
                context = try RequestContext(request, namespace: namespace, principal: principal)
            } catch {
                responder.respond { throw error }
                return
            }
            context.offLoop = responder.loop.handOff
            responder.start(deferring: { [context] answer in
                try api.guarded(request) { try handler(request, context, answer) }
            })
        }
    }

    /// Write bodies deflated on a loop at most (identity bytes); larger go to a worker.
    static let inlineWriteBodyLimit = 16 * 1024

    private static func startOnWorker(_ api: CacheAPI, _ auth: Authenticator, _ scope: Scope,
                                      _ handler: @escaping DeferredHandler, _ request: HTTPRequest,
                                      _ responder: Responder) {
        responder.offload(deferring: { answer in
            try api.guarded(request) {
                let namespace = try RequestContext.namespace(of: request)
                let principal = try auth.authorize(request, scope, namespace: namespace)
                return try handler(request, try RequestContext(request, namespace: namespace, principal: principal),
                                   answer)
            }
        })
    }

    /// A deferred handler run to its answer on the calling thread.
    static func waiting(_ handler: @escaping DeferredHandler) -> SecuredHandler {
        { request, context in
            let answered = HandOff<Result<HTTPResponse, any Error>>()
            if let immediate = try handler(request, context, { make in answered.put(Result { try make() }) }) {
                return immediate
            }
            return try answered.take().get()
        }
    }

    /// The head-only check of a secured route: a request without a usable token, or with
    /// one known to lack the scope, is refused before a byte of its body is read.
    static func precheck(_ auth: Authenticator, _ scope: Scope) -> Route.Precheck {
        { request in
            try auth.precheck(request, scope, namespace: try RequestContext.namespace(of: request))
        }
    }

    /// `deferWrites` false (the request fuzzer, which has no event loop): writes run on a
    /// worker that waits for their commit, through the same handlers.
    static func routes(api: CacheAPI, operations: OperationalRoutes, auth: Authenticator, reads: LoopReads,
                       metricsNeedAuth: Bool, deferWrites: Bool = true) -> [Route] {
        func secured(_ method: String, _ template: String, _ scope: Scope,
                     _ handler: @escaping SecuredHandler) -> Route {
            // Everything but GET may write: past its deadline it is answered "outcome unknown" (504).
            Route(method, template, .worker, precheck: precheck(auth, scope), mayChangeState: method != "GET",
                  handler: Self.secured(api, auth, scope, handler))
        }
        func deferred(_ method: String, _ template: String, _ scope: Scope,
                      _ handler: @escaping DeferredHandler) -> Route {
            guard deferWrites else { return secured(method, template, scope, Self.waiting(handler)) }
            return Route(method, template, precheck: precheck(auth, scope), mayChangeState: true,
                         responder: Self.securedDeferred(api, auth, scope, handler))
        }
        let entry = "/v1/caches/{ns}/entries/{key}"
        var routes = [
            Route("GET", "/healthz", .inline, handler: operations.health),
            Route("GET", "/readyz", .inline, handler: operations.ready),
            Route("GET", "/openapi.yaml", .inline, handler: operations.specification),
            reads.route("GET", entry, .read, api.planGet),
            deferred("PUT", entry, .write, api.putEntry),
            secured("DELETE", entry, .write, api.deleteEntry),
            reads.route("POST", "/v1/caches/{ns}/lookup", .read, api.planLookup),
            deferred("POST", "/v1/caches/{ns}/upsert", .write, api.upsert),
            secured("POST", "/v1/caches/{ns}/release", .write, api.release),
            secured("POST", "/v1/caches/{ns}/hits", .read, api.reportLocalHits),
            secured("POST", "/v1/caches/{ns}/evict", .write, api.evict),
            secured("GET", "/v1/caches/{ns}/stats", .read, api.namespaceStats),
            secured("GET", "/v1/caches/{ns}/stats/history", .read, api.statsHistory),
            secured("GET", "/v1/caches/{ns}/entries", .read, api.listEntries),
            secured("GET", "/v1/caches/{ns}/inspect/{key}", .read, api.inspectEntry),
            secured("GET", "/v1/caches/{ns}/settings", .admin, api.getSettings),
            secured("PUT", "/v1/caches/{ns}/settings", .admin, api.putSettings),
            secured("GET", "/v1/caches/{ns}/export", .admin, api.exportPage),
            secured("POST", "/v1/caches/{ns}/import", .admin, api.importLines),
            secured("GET", "/v1/stats", .admin, api.globalStats),
            // Any valid token; each sees the namespaces its scopes reach.
            Route("GET", "/v1/caches", .worker) { request in
                try api.guarded(request) { try api.listCaches(request, try auth.identify(request)) }
            },
        ]
        routes += operations.dashboard.routes()
        let feed = ChangeFeedRoute(api: api, auth: auth, waiters: reads.waiters)
        routes.append(deferWrites ? feed.route() : feed.blockingRoute())
        routes.append(metricsNeedAuth
            ? secured("GET", "/metrics", .metrics) { request, _ in operations.prometheus(request) }
            : Route("GET", "/metrics", .worker, handler: operations.prometheus))
        return routes
    }
}
