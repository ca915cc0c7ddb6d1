import CacheCore
import CacheKeys
import Foundation
import HTTPServer

/// `GET /v1/caches/{ns}/changes?since&limit&wait&include=body` (read scope): a namespace's
/// committed changes after a cursor, as one JSON document, for followers that keep their own
/// copy (an app's local cache, an edge cache).
///
/// The read runs on a worker (it numbers pending changes first, a write). With `wait`, an
/// empty page parks the request on its loop, as a lookup's `wait` does, until any key of the
/// namespace changes (the key listener's notification) or its time is up, then reads again:
/// it holds no worker and no connection meanwhile.
struct ChangeFeedRoute: Sendable {
    let api: CacheAPI
    let auth: Authenticator
    /// Where an empty page waits (nil, batched reads off: it answers at once).
    var waiters: Waiters?

    static let template = "/v1/caches/{ns}/changes"

    /// What a request asks for, parsed once: the page (which followers asking the same
    /// share, `FeedPages`) and how long an empty one may wait.
    struct Ask: Sendable {
        var namespace: Namespace
        var page: FeedPages.Question
        /// Monotonic nanoseconds until which an empty page may wait (0: it may not).
        var waitUntil: UInt64
        /// `since=now`: no changes, only the cursor to follow from (the feed's head).
        var fromHead = false
    }

    func route() -> Route {
        Route("GET", Self.template, precheck: Application.precheck(auth, .read)) { request, responder in
            let ask: Ask
            do {
                ask = try Self.parse(request, now: responder.loop.nanoseconds)
            } catch {
                responder.respond { throw error }
                return
            }
            if ask.fromHead {
                head(ask, request, responder)
                return
            }
            read(ask, request, responder, mayPark: true)
        }
    }

    /// The same read on a worker, never waiting (the request fuzzer, which has no event loop).
    func blockingRoute() -> Route {
        let api = self.api
        return Route("GET", Self.template, .worker, precheck: Application.precheck(auth, .read),
                     handler: Application.secured(api, auth, .read) { request, _ in
                         let ask = try Self.parse(request, now: 0)
                         if ask.fromHead { return Self.headPage(try api.store.feedHeadNow(), request, api: api) }
                         do {
                             let page = try api.store.changes(ask.namespace, after: ask.page.cursor,
                                                              limit: ask.page.limit, bodies: ask.page.bodies)
                             return Self.response(page, request, api: api)
                         } catch let error as FeedCursorError {
                             throw Self.problem(error)
                         }
                     })
    }

    static func parse(_ request: HTTPRequest, now: UInt64) throws -> Ask {
        let namespace = try RequestParsing.namespace(request)
        let query = try RequestParsing.query(request)
        let fromHead = query["since"] == "now"
        let cursor = try query["since"].map { text -> Int64 in
            if fromHead { return 0 }
            guard let cursor = FeedCursor.parse(text) else {
                throw HTTPError(400, "`since` must be a cursor from an earlier page's `next` (or 0 for the start).")
            }
            return cursor
        } ?? 0
        let limit = try RequestParsing.integer("limit", in: query, 1...10_000) ?? 1000
        let bodies: Bool
        switch query["include"] {
        case nil: bodies = false
        case "body": bodies = true
        default: throw HTTPError(400, "`include` may only be `body`.")
        }
        let wait = try CacheAPI.waitSeconds(query["wait"], status: 400) ?? 0
        let page = FeedPages.Question(namespace: namespace.name, cursor: cursor, limit: limit, bodies: bodies,
                                      gzip: AcceptEncoding.allowsGzip(request.headers))
        return Ask(namespace: namespace, page: page, waitUntil: wait > 0 ? now + UInt64(wait * 1e9) : 0,
                   fromHead: fromHead)
    }

    /// `since=now`: an empty page whose `next` is the feed's head, at once (no wait). A
    /// follower that starts with an empty copy (a client's local tier) needs no history,
    /// only where to follow from: every change that commits after this answer is numbered
    /// past it (numbers are given in commit order), so none is missed.
    private func head(_ ask: Ask, _ request: HTTPRequest, _ responder: Responder) {
        let api = self.api, auth = self.auth
        responder.offload({
            try api.guarded(request) {
                _ = try auth.authorize(request, .read, namespace: ask.namespace)
                return Self.headPage(try api.store.feedHeadNow(), request, api: api)
            }
        })
    }

    static func headPage(_ head: Int64, _ request: HTTPRequest, api: CacheAPI) -> HTTPResponse {
        response(FeedPage(changes: [], next: head, more: false, behind: false), request, api: api)
    }

    /// Authorizes and reads on a worker; answers on the loop, or parks an empty page.
    private func read(_ ask: Ask, _ request: HTTPRequest, _ responder: Responder, mayPark: Bool) {
        let api = self.api, auth = self.auth
        // Noted before the read: a change landing between the read and the parking is not lost.
        let since = waiters?.now ?? 0
        let question = ask.page
        let waiters = self.waiters
        responder.offload({
            try api.guarded(request) {
                _ = try auth.authorize(request, .read, namespace: ask.namespace)
                // Followers woken together by one write mostly ask the same: one reads.
                let (readSince, localSince): (UInt64, UInt64)
                switch api.feedPages.answer(question, waiters: waiters, since: since) {
                // A shared page read while numbering was behind is behind for every follower it
                // answers: each asks again soon (a follower told otherwise waited for a
                // notification that had come already, and 39 of 40 woken followers timed out).
                case .shared(let empty, let behind, let response):
                    return (empty: empty, behind: behind, response: response)
                case .read(let since, let local): (readSince, localSince) = (since, local)
                }
                let page: FeedPage
                do {
                    page = try api.store.changes(ask.namespace, after: question.cursor, limit: question.limit,
                                                 bodies: question.bodies)
                } catch let error as FeedCursorError {
                    api.feedPages.abandon(question)
                    throw Self.problem(error)
                } catch {
                    api.feedPages.abandon(question)
                    throw error
                }
                // Built here, not on the loop: a page of bodies is megabytes to serialize and gzip.
                let response = Self.response(page, request, api: api)
                // A page read while numbering is behind is shared only by the followers reading
                // together: asked again a moment later, it may have grown.
                api.feedPages.keep(question, since: readSince, localSince: localSince, empty: page.changes.isEmpty,
                                   response: response, behind: page.behind)
                return (empty: page.changes.isEmpty, behind: page.behind, response: response)
            }
        }) { result in
            switch result {
            case .failure(let error):
                responder.respond { throw error }
            case .success(let answer):
                let now = responder.loop.nanoseconds
                guard answer.empty, mayPark, ask.waitUntil > now, let waiters, !responder.clientLeft else {
                    responder.respond(answer.response)
                    return
                }
                park(ask, request, responder, empty: answer.response, since: since, waiters: waiters, now: now,
                     behind: answer.behind)
            }
        }
    }

    /// How soon an empty page read while numbering was behind is read again (the background
    /// sequencer numbers 10,000 changes a run).
    static let behindRecheck: TimeInterval = 0.2

    private func park(_ ask: Ask, _ request: HTTPRequest, _ responder: Responder, empty: HTTPResponse, since: UInt64,
                      waiters: Waiters, now: UInt64, behind: Bool) {
        let remaining = Double(ask.waitUntil - now) / 1e9
        let delay = waiters.recheckDelay(untilDeadline: remaining)
        let seconds = behind ? min(delay, Self.behindRecheck) : delay
        responder.allowWaiting(seconds)
        // Reads again from the cursor it was asked with: an empty page moved nothing but `next`.
        let parking = waiters.park(namespace: ask.namespace.name, key: Waiters.anyKey, since: since,
                                   loop: responder.loop, at: now + UInt64(seconds * 1e9)) { final in
            read(ask, request, responder, mayPark: !final)
        }
        switch parking {
        case .parked(let waiter): responder.whenClientLeaves { waiters.cancel(waiter) }
        case .wokenMeanwhile: read(ask, request, responder, mayPark: true)
        case .full: responder.respond(empty)
        }
    }

    static func problem(_ error: FeedCursorError) -> HTTPError {
        switch error {
        case .gone(let floor):
            HTTPError(410, "Changes after this cursor are no longer kept (older than the feed's retention, or the "
                      + "store was wiped); resync from an export and follow from its cursor. Cursors from \(floor) on "
                      + "can be followed.", title: "Cursor too old")
        case .lost:
            HTTPError(410, "This cursor comes from a history the database no longer has (a failover to a standby that "
                      + "had not replayed it, or a restore); changes after it may be lost. Resync from an export.",
                      title: "Cursor lost in a failover")
        case .ahead(let head):
            HTTPError(410, "This cursor is ahead of the feed (whose head is \(head)): it comes from another store, "
                      + "or this one was restored from a backup. Resync from an export.", title: "Cursor unknown")
        }
    }

    static func response(_ page: FeedPage, _ request: HTTPRequest, api: CacheAPI) -> HTTPResponse {
        let document = JSONValue.object([
            ("changes", .array(page.changes.map(\.json))), ("next", .string(String(page.next))), ("more", .bool(page.more)),
        ])
        var body = Array(document.serialized.utf8)
        var headers = HTTPHeaders([("Content-Type", "application/json"), ("Vary", "Accept-Encoding"),
                                   ("Cache-Control", "no-store")])
        if AcceptEncoding.allowsGzip(request.headers) && body.count > 1024,
           let packed = Gzip.compress(body, level: api.policy.compressionLevel) {
            body = packed
            headers.add("Content-Encoding", "gzip")
        }
        return HTTPResponse(status: 200, headers: headers, body: body)
    }
}
