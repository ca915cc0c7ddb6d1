import CacheCore
import HTTPServer

/// The route table: each route names the scope it needs and whether it is namespaced.
extension Application {
    typealias SecuredHandler = @Sendable (HTTPRequest, Authenticator.Principal) throws -> HTTPResponse

    /// A handler that authorizes `scope` (on the path's namespace, if any) before `handler`;
    /// blocking (the token may be read from the database), so for workers.
    static func secured(_ api: CacheAPI, _ auth: Authenticator, _ scope: Scope,
                        _ handler: @escaping SecuredHandler) -> HTTPHandler {
        { request in
            try api.guarded(request) {
                let namespace = try request.pathParameters["ns"] == nil ? nil : RequestParsing.namespace(request)
                let principal = try auth.authorize(request, scope, namespace: namespace)
                return try handler(request, principal)
            }
        }
    }

    /// The head-only check of a secured route: a request without a usable token, or with
    /// one known to lack the scope, is refused before a byte of its body is read.
    static func precheck(_ auth: Authenticator, _ scope: Scope) -> Route.Precheck {
        { request in
            let namespace = try request.pathParameters["ns"] == nil ? nil : RequestParsing.namespace(request)
            try auth.precheck(request, scope, namespace: namespace)
        }
    }

    static func routes(api: CacheAPI, operations: OperationalRoutes, auth: Authenticator, reads: LoopReads,
                       metricsNeedAuth: Bool) -> [Route] {
        func secured(_ method: String, _ template: String, _ scope: Scope,
                     _ handler: @escaping SecuredHandler) -> Route {
            Route(method, template, .worker, precheck: precheck(auth, scope), handler: Self.secured(api, auth, scope, handler))
        }
        let entry = "/v1/caches/{ns}/entries/{key}"
        var routes = [
            Route("GET", "/healthz", .inline, handler: operations.health),
            Route("GET", "/readyz", .inline, handler: operations.ready),
            Route("GET", "/openapi.yaml", .inline, handler: operations.specification),
            reads.route("GET", entry, .read, api.planGet),
            secured("PUT", entry, .write, api.putEntry),
            secured("DELETE", entry, .write, api.deleteEntry),
            reads.route("POST", "/v1/caches/{ns}/lookup", .read, api.planLookup),
            secured("POST", "/v1/caches/{ns}/upsert", .write, api.upsert),
            secured("POST", "/v1/caches/{ns}/evict", .write, api.evict),
            secured("GET", "/v1/caches/{ns}/stats", .read, api.namespaceStats),
            secured("GET", "/v1/caches/{ns}/settings", .admin, api.getSettings),
            secured("PUT", "/v1/caches/{ns}/settings", .admin, api.putSettings),
            secured("GET", "/v1/stats", .admin, api.globalStats),
        ]
        routes.append(metricsNeedAuth
            ? secured("GET", "/metrics", .admin) { request, _ in operations.prometheus(request) }
            : Route("GET", "/metrics", .worker, handler: operations.prometheus))
        return routes
    }
}
