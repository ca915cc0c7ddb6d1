import CacheCore
import CacheKeys
import CacheStore
import Dispatch
import Foundation
import HTTPClient
import HTTPServer
import Locking

/// `ANY /v1/caches/{ns}/gateway/{upstream}/{path...}`: a model SDK pointed here is answered
/// from the cache, or its call is forwarded to the upstream, relayed as it arrives, and stored.
///
/// A miss makes one upstream call per burst: callers on this replica follow the call in
/// progress (`LiveFills`: they read its stream live); callers on other replicas wait on its
/// lease and are answered from the stored entry. A failed call gives its lease back, so one
/// waiter is handed it and calls in turn; a waiter whose wait runs out calls itself.
final class Gateway: Sendable {
    let api: CacheAPI
    let auth: Authenticator
    let reads: LoopReads
    let client: HTTPClient
    let upstreams: [String: Upstream]
    let settings: GatewaySettings
    let live = LiveFills()
    let metrics: GatewayMetrics?
    private static let leaseQueue = DispatchQueue(label: "teamcache.gateway.leases")

    init(api: CacheAPI, auth: Authenticator, reads: LoopReads, client: HTTPClient, upstreams: [String: Upstream],
         settings: GatewaySettings, metrics: GatewayMetrics?) {
        self.api = api
        self.auth = auth
        self.reads = reads
        self.client = client
        self.upstreams = upstreams
        self.settings = settings
        self.metrics = metrics
    }

    static let template = "/v1/caches/{ns}/gateway/{upstream}/{path...}"

    /// One route per method an SDK uses (HEAD goes to GET's).
    func routes() -> [Route] {
        let auth = self.auth
        let precheck: Route.Precheck = { request in
            try auth.precheck(request, .write, namespace: try RequestContext.namespace(of: request), source: .gateway)
        }
        return ["GET", "POST", "PUT", "PATCH", "DELETE"].map { method in
            Route(method, Self.template, precheck: precheck, mayChangeState: method != "GET") { [self] request, responder in
                start(request, responder)
            }
        }
    }

    // MARK: Arrival

    private func start(_ request: HTTPRequest, _ responder: Responder) {
        do {
            let namespace = try RequestParsing.namespace(request)
            guard let principal = try authorizedWithoutBlocking(request, namespace) else {
                // A token not seen yet: verified on a worker, then on with the loop.
                responder.offload({ [self] in try api.guarded(request) { try authorized(request, namespace) } }) {
                    [self] result in
                    switch result {
                    case .success(let principal): proceed(request, responder, namespace, principal)
                    case .failure(let error): refuse(request, responder, error)
                    }
                }
                return
            }
            proceed(request, responder, namespace, principal)
        } catch {
            refuse(request, responder, error)
        }
    }

    /// Read and write on the namespace (a cached answer is read, a fill is written); the
    /// token read from the database when it is not cached.
    private func authorized(_ request: HTTPRequest, _ namespace: Namespace) throws -> Authenticator.Principal {
        try mayRead(auth.authorize(request, .write, namespace: namespace, source: .gateway), namespace)
    }

    /// As `authorized`, without blocking: nil when the token is not cached yet.
    private func authorizedWithoutBlocking(_ request: HTTPRequest, _ namespace: Namespace) throws
        -> Authenticator.Principal? {
        try auth.authorizeWithoutBlocking(request, .write, namespace: namespace, source: .gateway)
            .map { try mayRead($0, namespace) }
    }

    private func mayRead(_ principal: Authenticator.Principal, _ namespace: Namespace) throws
        -> Authenticator.Principal {
        if let token = principal.token, !token.allows(.read, namespace: namespace) {
            throw HTTPError(403, "This token lacks the read scope for namespace \(namespace.name).")
        }
        return principal
    }

    private func proceed(_ request: HTTPRequest, _ responder: Responder, _ namespace: Namespace,
                         _ principal: Authenticator.Principal) {
        do {
            let call = try parse(request, namespace, principal)
            // Upstream calls take longer than the service's own requests: the request's deadline
            // is the upstream's (a streamed answer then has the stream's own deadlines).
            responder.allowWaiting(call.upstream.deadlines.connect + call.upstream.deadlines.firstByte
                                   + settings.wait)
            guard call.plan != nil, !call.controls.noStore else {
                fill(call, responder, lease: nil, cached: false)
                return
            }
            if call.controls.noCache {
                api.tracker.record(.bypass, namespace: namespace.name, at: api.clock.now())
                fill(call, responder, lease: nil, cached: true)
                return
            }
            look(call, responder, mayFollow: true)
        } catch {
            refuse(request, responder, error)
        }
    }

    private func parse(_ request: HTTPRequest, _ namespace: Namespace, _ principal: Authenticator.Principal) throws
        -> GatewayRequest {
        let name = String(decoding: request.pathParameters["upstream"] ?? [], as: UTF8.self)
        guard let upstream = upstreams[name] else {
            throw HTTPError(404, "No upstream is named \(UpstreamsFile.isName(name) ? name : "so") here.")
        }
        let query = request.target.firstIndex(of: "?").map { request.target[request.target.index(after: $0)...] }
        let (target, path) = try GatewayPath.target(rest: request.pathParameters["path"] ?? [], query: query)
        let controls = try GatewayControls(request.headers, policy: api.policy)
        // A beta feature switched on by a header changes the answer where the key cannot see
        // it: such a call is forwarded uncached, as one with a query is.
        let plan = query == nil && !GatewayHeaders.namesABeta(request.headers)
            ? ModelRequest.plan(kind: upstream.kind, method: request.method, path: path, body: request.body) : nil
        let (headers, lentKey) = try GatewayHeaders.forwarded(request.headers, upstream: upstream)
        // The server-held key is lent for the model calls the gateway caches, not for the rest of
        // the account it opens (files, batches, stored responses: every tenant's, under one key).
        if lentKey && !upstream.lendsKey(request.method, path) {
            throw HTTPError(403, "Upstream \(upstream.name)'s own key is lent only for its model calls (POST "
                + ModelRequest.cachedPaths(upstream.kind).joined(separator: ", ")
                + ") and the calls that read no account data (models, token counts, moderations): send your own "
                + "key for \(request.method) \(path).", title: "Not with the server's key")
        }
        return GatewayRequest(request: request, upstream: upstream, namespace: namespace, target: target, plan: plan,
                              controls: controls, headers: headers, principal: principal)
    }

    func refuse(_ request: HTTPRequest, _ responder: Responder, _ error: any Error) {
        responder.respond { throw error }
    }

    // MARK: The cache

    /// Follows a call in progress here, or reads the entry (waiting on another replica's
    /// lease as a lookup does), then answers the hit or calls the upstream.
    func look(_ call: GatewayRequest, _ responder: Responder, mayFollow: Bool) {
        guard let key = call.key, let entryKey = EntryKey(Array(key.utf8)) else {
            fill(call, responder, lease: nil, cached: false)
            return
        }
        let liveName = LiveFills.name(call.namespace.name, key)
        if mayFollow, let broadcast = live.find(liveName), follow(broadcast, call, responder) { return }
        let lookup = GatewayLookup(gateway: self, call: call, key: entryKey)
        reads.carryOut(lookup.plan(), call.request, responder) { [self] make in
            let response: HTTPResponse
            do {
                response = try make()
            } catch {
                // The cache is sick: the caller is not made worse off, its call goes on uncached.
                fill(call, responder, lease: nil, cached: false)
                return
            }
            switch lookup.outcome {
            case .hit(let revalidate):
                responder.respond(response)
                metrics?.count(call.upstream.name, response.headers["X-TeamCache"]?.contains("stale") == true
                               ? "stale" : response.headers["X-TeamCache"]?.contains("collapsed") == true ? "collapsed" : "hit")
                // Served stale in its window: refreshed in the background with the lease it was given.
                if let revalidate { fill(call, nil, on: responder.loop, lease: revalidate, cached: true) }
            case .lease(let lease):
                fill(call, responder, lease: lease, cached: true, stale: lookup.staleEntry, mayFollow: mayFollow)
            case .missed: fill(call, responder, lease: nil, cached: true, stale: lookup.staleEntry, mayFollow: mayFollow)
            }
        }
    }

    /// Joins the broadcast as a follower (collapsed); false when it cannot be followed from
    /// its start.
    private func follow(_ broadcast: Broadcast, _ call: GatewayRequest, _ responder: Responder) -> Bool {
        let reader = GatewayReader(gateway: self, call: call, responder: responder, role: .follower,
                                   streamed: broadcast.streamed, broadcast: broadcast)
        return broadcast.join(reader.follower())
    }

    // MARK: Calls

    /// Calls the upstream for `call`; its client reads the answer as it comes. `cached`: the
    /// answer is stored when complete (and followed by callers here meanwhile); `lease`: the
    /// lease it fills (given back if the call fails); `stale`: what `max-stale` may answer
    /// with if the upstream fails.
    /// `mayFollow` false: this caller left a call here that did not answer it (an error to
    /// share with no one); it makes its own, beside that one, rather than join it again.
    func fill(_ call: GatewayRequest, _ responder: Responder?, on loop: EventLoop? = nil, lease: Lease?, cached: Bool,
              stale: StoredEntry? = nil, mayFollow: Bool = true) {
        guard let loop = loop ?? responder?.loop else { return }
        let bypass = !cached || call.controls.noCache
        let streamed = call.plan.map(\.stream) ?? true
        let broadcast = Broadcast(streamed: !cached || streamed, maxTranscript: cached ? api.policy.maxBodyBytes : 0)
        var liveName: String?
        if cached, let key = call.key {
            let name = LiveFills.name(call.namespace.name, key)
            if let existing = live.register(name, broadcast) {
                // Another caller here started the same call a moment ago: follow it (a
                // background refresh has no one to tell), and let the lease go to whoever
                // needs it.
                if mayFollow && (responder == nil || follow(existing, call, responder!)) {
                    if let lease { giveBack(lease, call) }
                    return
                }
            } else {
                liveName = name
            }
        }
        var owner: GatewayReader?
        if let responder {
            // Counted here, not before a call to follow was looked for: a follower is counted
            // as collapsed alone. A cached call's owner is counted by its reader when its answer
            // is settled (a miss, or stale when a stale entry answers the upstream's failure).
            if bypass { metrics?.count(call.upstream.name, "bypass") }
            let reader = GatewayReader(gateway: self, call: call, responder: responder,
                                       role: .owner(stale: stale, cached: cached), streamed: broadcast.streamed)
            _ = broadcast.join(reader.follower())
            owner = reader
        }
        let exchange = GatewayExchange(gateway: self, call: call, broadcast: broadcast, lease: lease, liveName: liveName,
                                       cached: cached, owner: owner, loop: loop)
        // Only a cached call asks for what the caller did not (a stream's usage): the recorder
        // that takes it out again exists for cached calls alone.
        let request = ClientRequest(method: call.request.method, path: call.target, headers: call.headers,
                                    body: cached ? call.body : call.request.body, deadlines: call.upstream.deadlines,
                                    maxResponseBytes: settings.maxResponseBytes)
        let handle = client.call(request, to: call.upstream.origin, tls: call.upstream.tls, on: loop, delegate: exchange)
        exchange.attach(handle)
    }

    /// Gives a lease back (its call failed or was not needed): one waiter is handed it.
    func giveBack(_ lease: Lease, _ call: GatewayRequest) {
        guard let key = call.key, let entryKey = EntryKey(Array(key.utf8)) else { return }
        let leases = api.leases, namespace = call.namespace, holder = call.holder
        Self.leaseQueue.async { _ = try? leases.release(namespace, entryKey, id: lease.id, holder: holder) }
    }
}
