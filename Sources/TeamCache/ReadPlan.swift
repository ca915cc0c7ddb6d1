import CacheCore
import CacheStore
import Foundation
import HTTPServer
import Observability
import Postgres

/// A read route split where it waits on the database, so one piece of logic serves both
/// ways of reading: blocking through the pool on a worker, or batched from an event loop.
enum ReadPlan: Sendable {
    /// Answered without reading an entry (a bypass, say).
    case answer(HTTPResponse)
    /// Read the entry under (namespace, key); `finish` builds the answer from it (nil:
    /// absent). `mayPark`: the read may wait for the key (a loop read with time left).
    /// `standby`: a fresh hit may come from a read standby; false when what follows the read
    /// may wait or take a lease (`wait`, `lease`), which must see the primary's truth.
    case read(Namespace, EntryKey, standby: Bool, finish: @Sendable (StoredEntry?, _ mayPark: Bool) throws -> ReadAnswer)
}

/// What a read plan's `finish` gives: the answer; work that may block before it (asking
/// for a miss lease), which a loop hands to a worker; or "park until the key changes, or
/// for at most this many seconds, then read again" (only when `mayPark`).
enum ReadAnswer: Sendable {
    case response(HTTPResponse)
    case blocking(@Sendable () throws -> ReadAnswer)
    case park(seconds: TimeInterval)

    /// The answer, doing the blocking part here (on a worker, where nothing parks).
    func resolved() throws -> HTTPResponse {
        switch self {
        case .response(let response): response
        case .blocking(let work): try work().resolved()
        case .park: throw HTTPError(500, "A read that may not wait asked to.")
        }
    }
}

extension CacheAPI {
    typealias ReadPlanner = @Sendable (HTTPRequest, RequestContext) throws -> ReadPlan

    /// Carries a plan out on the calling (worker) thread, reading through the pool.
    func perform(_ plan: ReadPlan, _ request: HTTPRequest) throws -> HTTPResponse {
        switch plan {
        case .answer(let response):
            return response
        case .read(let namespace, let key, _, let finish):
            // Read from the primary, which has everything: the position is only checked.
            _ = try Self.minPosition(request)
            let entry = try guarded(request) { try store.fetch(namespace, key) }
            return try finish(entry, false).resolved()
        }
    }
}

/// Serves read routes (GET of an entry, descriptor lookup) from the event loops: the
/// request is parsed and authorized on the loop, the entry read by the loop's batcher,
/// and the answer built on the loop, with no thread hand-off on the hot path.
///
/// Anything that could block or take long goes to a worker instead: a token not yet in
/// the cache, a large request body, a large entry to inflate, a loop whose database
/// connection is down (the pool then answers, or says 503).
struct LoopReads: Sendable {
    let api: CacheAPI
    let auth: Authenticator
    /// One per event loop, by loop index; empty when batched reads are off.
    let readers: [EntryReadBatcher]
    /// Where requests with `wait` park (nil: they never wait, as with batched reads off).
    var waiters: Waiters? = nil
    /// Hot entries answered without a database read (nil: every read goes to the database).
    var near: NearCache? = nil
    /// One standby reader per event loop (empty: no `TEAMCACHE_READ_DATABASE_URL`).
    var replicas: [EntryReadBatcher] = []
    /// Standby answers at most this stale (in seconds) are used; else the primary's.
    var maxLag: TimeInterval = 1
    var replicaReads: CounterFamily? = nil

    /// Request bodies parsed on the loop at most (a lookup's JSON); larger go to a worker.
    static let inlineBodyLimit = 16 * 1024
    /// Entries answered on the loop at most (identity size); larger go to a worker (and are
    /// not worth keeping inflated either).
    static let inlineEntryLimit = 64 * 1024

    func route(_ method: String, _ template: String, _ scope: Scope, _ planner: @escaping CacheAPI.ReadPlanner)
        -> Route {
        let api = self.api
        let blocking = Application.secured(api, auth, scope) { request, context in
            try api.perform(try planner(request, context), request)
        }
        let precheck = Application.precheck(auth, scope)
        guard !readers.isEmpty else { return Route(method, template, .worker, precheck: precheck, handler: blocking) }
        return Route(method, template, precheck: precheck) { request, responder in
            serve(request, responder, scope: scope, planner: planner)
        }
    }

    private func serve(_ request: HTTPRequest, _ responder: Responder, scope: Scope,
                       planner: @escaping CacheAPI.ReadPlanner) {
        guard request.body.count <= Self.inlineBodyLimit else {
            planOnWorker(request, responder, scope: scope, planner: planner)
            return
        }
        let plan: ReadPlan
        do {
            let namespace = try RequestParsing.namespace(request)
            guard let principal = try auth.authorizeWithoutBlocking(request, scope, namespace: namespace) else {
                planOnWorker(request, responder, scope: scope, planner: planner)
                return
            }
            plan = try planner(request, try RequestContext(request, namespace: namespace, principal: principal))
        } catch {
            responder.respond { throw error }
            return
        }
        carryOut(plan, request, ReadReply(responder: responder))
    }

    /// Authorizes (a token not cached yet: a database read) and plans on a worker, then reads
    /// from the loop as usual, so such a request can still wait for its key.
    private func planOnWorker(_ request: HTTPRequest, _ responder: Responder, scope: Scope,
                              planner: @escaping CacheAPI.ReadPlanner) {
        let api = self.api, auth = self.auth
        responder.offload({
            try api.guarded(request) {
                let namespace = try RequestParsing.namespace(request)
                let principal = try auth.authorize(request, scope, namespace: namespace)
                return try planner(request, try RequestContext(request, namespace: namespace, principal: principal))
            }
        }) { planned in
            switch planned {
            case .success(let plan): carryOut(plan, request, ReadReply(responder: responder))
            case .failure(let error): responder.respond { throw error }
            }
        }
    }

    /// Carries a plan out from the loop as a read route does, handing its answer to `take`
    /// (on the loop) rather than to the client: a caller that builds on what the read found.
    func carryOut(_ plan: ReadPlan, _ request: HTTPRequest, _ responder: Responder,
                  taking take: @escaping (_ make: () throws -> HTTPResponse) -> Void) {
        carryOut(plan, request, ReadReply(responder: responder, take: take))
    }

    private func carryOut(_ plan: ReadPlan, _ request: HTTPRequest, _ reply: ReadReply) {
        let api = self.api
        // Without the loops' batchers (TEAMCACHE_READ_BATCH=0) every read goes through the pool,
        // on a worker.
        guard !readers.isEmpty else {
            reply.offload { try api.perform(plan, request) }
            return
        }
        guard case .read(_, _, let standbyAllowed, _) = plan else {
            reply.respond { try api.perform(plan, request) }
            return
        }
        let minimum: WALPosition?
        do { minimum = try CacheAPI.minPosition(request) } catch {
            reply.respond { throw error }
            return
        }
        let standby = replicas.isEmpty || !standbyAllowed ? nil : minimum ?? WALPosition(0)
        // A client that names a position always reads a database, re-reads after a wait too:
        // this process's kept copy may predate a write another replica acknowledged, until
        // that write's notification arrives.
        read(plan, request, reply, mayPark: true, standby: standby, nearCache: minimum == nil)
    }

    /// One read of the plan's entry by the loop's batcher, and what follows from it.
    /// `standby`: the read may be served by the standby if it has replayed that far (nil:
    /// from the primary: re-reads after a wait, and every read without a standby).
    private func read(_ plan: ReadPlan, _ request: HTTPRequest, _ reply: ReadReply, mayPark: Bool,
                      standby: WALPosition? = nil, nearCache: Bool) {
        guard case .read(let namespace, let key, _, let finish) = plan else { return }
        let api = self.api
        // Noted before the read: a wake-up of the key after this point is not lost.
        let since = waiters?.now ?? 0
        // Only a fresh kept copy answers: one past its expiry is being refreshed (a
        // stale-while-revalidate window) or evicted, and the refresh may have landed on another
        // replica a moment ago, its notification still on the way; the database has it now.
        if nearCache, let near, let entry = near.entry(namespace.name, key.bytes),
           entry.expiresAt > api.store.clock.now() {
            follow(plan, request, reply, since: since, nearCache: nearCache) { try finish(entry, mayPark) }
            return
        }
        if let standby, let replica = usableReplica(reply.responder.loop, replayed: standby, namespace, key) {
            readFromStandby(replica, plan, request, reply, mayPark: mayPark, since: since, nearCache: nearCache)
            return
        }
        // Noted before the read too: what it reads is kept only if no write invalidated it since.
        let nearSince = near?.sequence ?? 0
        let queued = readers[reply.responder.loop.index].read(namespace, key) { outcome in
            switch outcome {
            case .failed(let error):
                reply.respond { try api.guarded(request) { throw error } }
            case .readOffLoop:
                // A large body, or a seal to open off the loop: read and answered on a worker, through the pool.
                reply.offload { try api.perform(plan, request) }
            case .found(let entry) where entry.identitySize > Self.inlineEntryLimit:
                reply.offload { try finish(entry, false).resolved() }
            case .found(let read):
                let entry = near == nil ? read : read.withResponseFields()
                near?.admit(entry, since: nearSince)
                follow(plan, request, reply, since: since, nearCache: nearCache) { try finish(entry, mayPark) }
            case .absent:
                follow(plan, request, reply, since: since, nearCache: nearCache) { try finish(nil, mayPark) }
            }
        }
        // The loop's connection is not up (yet): read through the pool on a worker, and go on
        // here with what it found, so the request can still wait.
        if !queued {
            reply.responder.offload({ try api.guarded(request) { try api.store.fetch(namespace, key) } }) { fetched in
                follow(plan, request, reply, since: since, nearCache: nearCache) {
                    try finish(fetched.get(), mayPark)
                }
            }
        }
    }

    /// The loop's standby reader, if it is up, current within `maxLag`, has replayed past
    /// `replayed`, and the read is not one the near-cache would keep (those need the primary).
    private func usableReplica(_ loop: EventLoop, replayed: WALPosition, _ namespace: Namespace, _ key: EntryKey)
        -> EntryReadBatcher? {
        let replica = replicas[loop.index]
        guard let staleness = replica.staleness(now: loop.nanoseconds), staleness <= maxLag,
              replica.hasReplayed(replayed) else {
            replicaReads?.inc(["primary"])
            return nil
        }
        if let near, near.wouldKeep(namespace.name, key.bytes) { return nil }
        return replica
    }

    /// A read from the standby. Only a fresh hit is answered from it: a miss, a stale or
    /// expired entry, an oversized body or a failure is read again from the primary, since
    /// what follows a miss (a lease, a wait, a refresh) must see the primary's truth; a
    /// lagging standby would otherwise hand out leases for keys already filled. Nothing
    /// read from the standby is kept in the near-cache: the cache's fill guard knows only
    /// the invalidations this process has seen, and a standby's answer may predate them.
    private func readFromStandby(_ replica: EntryReadBatcher, _ plan: ReadPlan, _ request: HTTPRequest,
                                 _ reply: ReadReply, mayPark: Bool, since: UInt64, nearCache: Bool) {
        guard case .read(let namespace, let key, _, let finish) = plan else { return }
        let now = api.store.clock.now()
        let fromPrimary = { read(plan, request, reply, mayPark: mayPark, nearCache: nearCache) }
        let queued = replica.read(namespace, key) { outcome in
            guard case .found(let entry) = outcome, entry.expiresAt > now,
                  entry.identitySize <= Self.inlineEntryLimit else {
                replicaReads?.inc(["primary"])
                fromPrimary()
                return
            }
            replicaReads?.inc(["standby"])
            near?.noteRead(namespace.name, key.bytes)
            follow(plan, request, reply, since: since, nearCache: nearCache) { try finish(entry, mayPark) }
        }
        if !queued { fromPrimary() }
    }

    /// Answers on the loop, hands what may block to a worker (and goes on with its result
    /// here), or parks the request until its key changes or its time is up.
    private func follow(_ plan: ReadPlan, _ request: HTTPRequest, _ reply: ReadReply, since: UInt64,
                        nearCache: Bool, _ step: () throws -> ReadAnswer) {
        do {
            switch try step() {
            case .response(let response):
                reply.respond(response)
            case .blocking(let work):
                reply.responder.offload(work) { result in
                    follow(plan, request, reply, since: since, nearCache: nearCache) { try result.get() }
                }
            case .park(let seconds):
                guard case .read(let namespace, let key, _, _) = plan, let waiters else {
                    read(plan, request, reply, mayPark: false, nearCache: nearCache)
                    return
                }
                // Its client left while it was being read again: nobody to wait for.
                if reply.responder.clientLeft { return }
                let at = reply.responder.loop.nanoseconds + UInt64(max(0, seconds) * 1e9)
                reply.responder.allowWaiting(seconds)
                let parking = waiters.park(namespace: namespace.name, key: key.bytes, since: since,
                                           loop: reply.responder.loop, at: at) { final in
                    read(plan, request, reply, mayPark: !final, nearCache: nearCache)
                }
                switch parking {
                case .parked(let waiter):
                    // A client that hangs up stops waiting at once: no waiter kept to its deadline.
                    reply.responder.whenClientLeaves { waiters.cancel(waiter) }
                case .wokenMeanwhile: read(plan, request, reply, mayPark: true, nearCache: nearCache)
                case .full: read(plan, request, reply, mayPark: false, nearCache: nearCache)
                }
            }
        } catch {
            reply.respond { throw error }
        }
    }
}

/// Where a loop read's answer goes: to its client, or first to `take`, a caller that builds
/// on it (the gateway reads an entry this way, and calls its upstream on a miss).
/// Loop-confined, like the responder it carries.
struct ReadReply {
    let responder: Responder
    var take: ((_ make: () throws -> HTTPResponse) -> Void)? = nil

    func respond(_ response: HTTPResponse) {
        if let take { take { response } } else { responder.respond(response) }
    }

    func respond(_ make: () throws -> HTTPResponse) {
        if let take { take(make) } else { responder.respond(make) }
    }

    /// Builds the answer on a worker (it may block), then answers as `respond` does.
    func offload(_ work: @escaping @Sendable () throws -> HTTPResponse) {
        guard let take else { return responder.offload(work) }
        responder.offload(work) { result in take { try result.get() } }
    }
}
