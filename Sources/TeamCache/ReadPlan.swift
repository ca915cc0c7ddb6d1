import CacheCore
import HTTPServer

/// A read route split where it waits on the database, so one piece of logic serves both
/// ways of reading: blocking through the pool on a worker, or batched from an event loop.
enum ReadPlan: Sendable {
    /// Answered without reading an entry (a bypass, say).
    case answer(HTTPResponse)
    /// Read the entry under (namespace, key); `finish` builds the answer from it (nil: absent).
    case read(Namespace, EntryKey, finish: @Sendable (StoredEntry?) throws -> ReadAnswer)
}

/// What a read plan's `finish` gives: the answer, or work that may block before it (asking
/// for a miss lease), which a loop hands to a worker.
enum ReadAnswer: Sendable {
    case response(HTTPResponse)
    case blocking(@Sendable () throws -> HTTPResponse)

    /// The answer, doing the blocking part here (on a worker).
    func resolved() throws -> HTTPResponse {
        switch self {
        case .response(let response): response
        case .blocking(let work): try work()
        }
    }
}

extension CacheAPI {
    typealias ReadPlanner = @Sendable (HTTPRequest, Authenticator.Principal) throws -> ReadPlan

    /// Carries a plan out on the calling (worker) thread, reading through the pool.
    func perform(_ plan: ReadPlan, _ request: HTTPRequest) throws -> HTTPResponse {
        switch plan {
        case .answer(let response):
            return response
        case .read(let namespace, let key, let finish):
            let entry = try guarded(request) { try store.fetch(namespace, key) }
            return try finish(entry).resolved()
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

    /// Request bodies parsed on the loop at most (a lookup's JSON); larger go to a worker.
    static let inlineBodyLimit = 16 * 1024
    /// Entries answered on the loop at most (identity size); larger go to a worker (and are
    /// not worth keeping inflated either).
    static let inlineEntryLimit = 64 * 1024

    func route(_ method: String, _ template: String, _ scope: Scope, _ planner: @escaping CacheAPI.ReadPlanner)
        -> Route {
        let api = self.api
        let blocking = Application.secured(api, auth, scope) { request, principal in
            try api.perform(try planner(request, principal), request)
        }
        let precheck = Application.precheck(auth, scope)
        guard !readers.isEmpty else { return Route(method, template, .worker, precheck: precheck, handler: blocking) }
        return Route(method, template, precheck: precheck) { request, responder in
            serve(request, responder, scope: scope, planner: planner, blocking: blocking)
        }
    }

    private func serve(_ request: HTTPRequest, _ responder: Responder, scope: Scope,
                       planner: CacheAPI.ReadPlanner, blocking: @escaping HTTPHandler) {
        let api = self.api
        guard request.body.count <= Self.inlineBodyLimit else {
            responder.offload { try blocking(request) }
            return
        }
        let plan: ReadPlan
        do {
            let namespace = try RequestParsing.namespace(request)
            guard let principal = try auth.authorizeWithoutBlocking(request, scope, namespace: namespace) else {
                responder.offload { try blocking(request) }
                return
            }
            plan = try planner(request, principal)
        } catch {
            responder.respond { throw error }
            return
        }
        guard case .read(let namespace, let key, let finish) = plan else {
            responder.respond { try api.perform(plan, request) }
            return
        }
        let queued = readers[responder.loop.index].read(namespace, key) { outcome in
            switch outcome {
            case .failed(let error):
                responder.respond { try api.guarded(request) { throw error } }
            case .oversized:
                // A large body is read and answered on a worker, through the pool.
                responder.offload { try api.perform(plan, request) }
            case .found(let entry) where entry.identitySize > Self.inlineEntryLimit:
                responder.offload { try finish(entry).resolved() }
            case .found(let entry):
                Self.answer(responder) { try finish(entry) }
            case .absent:
                Self.answer(responder) { try finish(nil) }
            }
        }
        if !queued { responder.offload { try api.perform(plan, request) } }
    }

    /// Answers on the loop, or hands what may block to a worker.
    private static func answer(_ responder: Responder, _ finish: () throws -> ReadAnswer) {
        do {
            switch try finish() {
            case .response(let response): responder.respond(response)
            case .blocking(let work): responder.offload(work)
            }
        } catch {
            responder.respond { throw error }
        }
    }
}
