import CacheCore
import CacheStore
import Foundation
import HTTPServer

/// `GET | HEAD | PUT | DELETE /v1/caches/{ns}/entries/{key}`.
extension CacheAPI {
    /// GET and HEAD: parsed here; answered once the entry is read (`hitStep`, else a miss).
    func planGet(_ request: HTTPRequest, _ context: RequestContext) throws -> ReadPlan {
        let namespace = try context.namespace
        let key = try context.key
        let control = RequestCacheControl(request.headers)
        // Only GET takes a lease (`?lease=N`): a HEAD is a question, not a promise to fill.
        let query = request.method == "GET" ? try RequestParsing.query(request) : [:]
        // A lease is the right to fill: a token that cannot write is answered as if it asked none
        // (a hit, or a miss), never handed one it could neither fill nor give back while others wait.
        let mayFill = context.principal.mayWrite(namespace)
        let asked = try RequestParsing.integer("lease", in: query, 1...Lease.maxSeconds)
        let leaseSeconds = mayFill ? asked : nil
        let budget = try Self.waitSeconds(query["wait"], status: 400).flatMap { $0 > 0 ? WaitBudget(seconds: $0) : nil }
        if control.noCache {
            tracker.record(.bypass, namespace: namespace.name, at: clock.now())
            return .answer(miss("fwd=request", detail: "Bypassed at the client's request (no-cache).", request))
        }
        let holder = context.holder
        let labelled = context.principal.mayWrite(namespace)
        // A watch: `wait` with If-None-Match holds the request while the answer would be 304.
        let watched = budget == nil ? nil : EntityTagList(request.headers, "If-None-Match")
        return .read(namespace, key, standby: leaseSeconds == nil && budget == nil) { [self] entry, mayPark in
            if let watched, let entry, mayPark, let budget, let waiters, budget.remaining > 0,
               watched.matchesWeakly(entry.etag), Freshness.of(entry, now: clock.now(), maxStale: control.maxStale) != .expired {
                budget.waited = true
                return .park(seconds: waiters.recheckDelay(untilDeadline: budget.remaining))
            }
            // A watch that saw a change is an update, not a fill it waited for.
            // A watch is not a lookup: it is not counted, however it ends (a watcher asking
            // again every `wait` seconds once read as a stream of hits that saved money).
            let question = HitQuestion(namespace: namespace, key: key, maxStale: control.maxStale,
                                       mayRefresh: request.method == "GET" && !control.onlyIfCached && mayFill,
                                       leaseSeconds: leaseSeconds, holder: holder,
                                       collapsed: budget?.waited == true && watched == nil, counted: watched == nil)
            let now = clock.now()
            if let answer = try hitStep(entry, question, now: now, rendering: EntryHit(api: self, request: request, now: now)) {
                return answer
            }
            // A caller that takes only cached answers neither fills a key nor waits for one;
            // a watched entry that went away is answered at once (404).
            guard !control.onlyIfCached else {
                if watched == nil { recordMiss(namespace, labelled: labelled) }
                return .response(miss(true, request))
            }
            if watched != nil && budget?.waited == true { return .response(miss(false, request)) }
            // Made here, not with the plan: a hit never needs them (three closures a read).
            let answers = Self.entryMissAnswers(requestID: request.requestID) { [self] in miss(false, request) }
            return missStep(namespace, key, lease: leaseSeconds, holder: holder, budget: budget, mayPark: mayPark,
                            request: request, answers: answers, labelled: labelled, countsMiss: watched == nil,
                            filledBy: .anyEntry)
        }
    }

    /// A raw GET's hit: the entry's bytes and headers, and the refresh lease's header.
    struct EntryHit: HitRendering {
        let api: CacheAPI
        let request: HTTPRequest
        let now: Date

        func render(_ entry: StoredEntry, _ freshness: Freshness, collapsed: Bool, refresh lease: Lease?) throws
            -> HTTPResponse {
            var response = try api.hit(entry, freshness: freshness, now: now, request: request, collapsed: collapsed)
            if let lease { response.headers.add("TeamCache-Lease", "\(lease.id); expires_in=\(lease.expiresIn)") }
            return response
        }
    }

    func miss(_ onlyIfCached: Bool, _ request: HTTPRequest) -> HTTPResponse {
        onlyIfCached
            ? miss("fwd=miss", status: 504, detail: "Not in the cache, and the request allows only cached answers.",
                   request)
            : miss("fwd=miss", detail: "No fresh entry under this key.", request)
    }

    func miss(_ forward: String, status: Int = 404, detail: String, _ request: HTTPRequest) -> HTTPResponse {
        var response = HTTPError(status, detail).response(requestID: request.requestID)
        response.headers.add("Cache-Status", "teamcache; \(forward)")
        return response
    }

    fileprivate func hit(_ entry: StoredEntry, freshness: Freshness, now: Date, request: HTTPRequest,
                     collapsed: Bool) throws -> HTTPResponse {
        // A near-cache copy's own fields were rendered when it was kept; the rest vary, and
        // are static fields (no strings, no header array: an identity hit on a near-cache
        // copy allocates nothing for its head here).
        var headers = entry.responseFields == nil ? HTTPHeaders(capacity: 8) : HTTPHeaders()
        if entry.responseFields == nil { entry.addOwnFields(to: &headers) }
        let age = StaticField("Age: ", Freshness.wholeSeconds(now.timeIntervalSince(entry.updatedAt), up: false))
        let status: StaticField? = switch freshness {
        case .fresh(let ttl): StaticField("Cache-Status: teamcache; hit; ttl=", ttl, collapsed ? "; collapsed" : "")
        case .stale(let overdue), .revalidate(let overdue):
            StaticField("Cache-Status: teamcache; hit; ttl=-", overdue, collapsed ? "; collapsed" : "")
        case .expired: nil
        }
        var response: HTTPResponse
        if let condition = EntityTagList(request.headers, "If-None-Match"), condition.matchesWeakly(entry.etag) {
            response = HTTPResponse(status: 304, headers: headers)
        } else if entry.encoding == .gzip && AcceptEncoding.allowsGzip(request.headers) {
            response = HTTPResponse(status: 200, headers: headers, body: entry.body)
            response.addStatic(StaticField("Content-Encoding: gzip"))
        } else {
            response = HTTPResponse(status: 200, headers: headers, body: try identityBody(entry))
        }
        response.addStatic(age)
        if let status { response.addStatic(status) }
        if let fields = entry.responseFields { response.renderedFields = fields }
        return response
    }

    /// The identity bytes of an entry (inflating a gzip one).
    func identityBody(_ entry: StoredEntry) throws -> [UInt8] {
        guard entry.encoding == .gzip else { return entry.body }
        if let body = entry.inflatedBody { return body }
        do {
            // Only a near-cache copy has its fields rendered: another read has no node to keep
            // them. Bytes the copy takes are not kept here too (counted in both budgets).
            guard entry.responseFields != nil, let near else { return try inflated.identity(of: entry) }
            let body = try inflated.identity(of: entry, keep: false)
            if !near.attach(inflated: body, to: entry) { inflated.keep(body, of: entry) }
            return body
        } catch {
            logger.error("stored gzip body failed to inflate", [("namespace", .string(entry.namespace))])
            throw HTTPError(500, "A stored body is corrupt.")
        }
    }

    /// Answered once the write is committed, without holding a worker meanwhile (see `commit`).
    func putEntry(_ request: HTTPRequest, _ context: RequestContext,
                  _ answer: @escaping Responder.Answer) throws -> HTTPResponse? {
        let namespace = try context.namespace
        let key = try context.key
        let query = try RequestParsing.query(request)
        let ttl = try RequestParsing.integer("ttl", in: query, 1...policy.maxTTL)
        let contentType = try Self.contentType(request.headers["Content-Type"])
        let body = try storedBody(request, contentType: contentType)
        var write = EntryWrite(namespace: namespace, key: key, body: body, contentType: contentType)
        write.ttlSeconds = ttl
        write.staleWhileRevalidate = try Self.staleWhileRevalidate(request.headers, max: Self.maxWindow(policy))
        write.tags = try RequestParsing.tags(HeaderList.split(request.headers, "Cache-Tag").map(HeaderList.unquote))
        write.condition = try Self.condition(request.headers)
        write.writerTokenID = context.holder
        let lease = try Self.leaseID(request.headers["TeamCache-Lease"], "TeamCache-Lease")
        commit(write, location: "/v1/caches/\(namespace.name)/entries/\(PercentDecoding.encode(key.bytes))",
               lease: lease, request: request, offLoop: context.offLoop, answer: answer)
        return nil
    }

    func deleteEntry(_ request: HTTPRequest, _ context: RequestContext) throws -> HTTPResponse {
        let namespace = try context.namespace
        let key = try context.key
        return try guarded(request) {
            guard try store.delete(namespace, key) else { throw HTTPError(404, "No entry under this key.") }
            var response = HTTPResponse(status: 204)
            stampAfterCommit(&response)
            return response
        }
    }

    private func storedBody(_ request: HTTPRequest, contentType: String) throws -> StoredBody {
        guard try Self.bodyIsGzip(request) else {
            guard request.body.count <= policy.maxBodyBytes else { throw tooLarge() }
            return StoredBody.fromIdentity(request.body, contentType: contentType, policy: policy)
        }
        do {
            return try StoredBody.fromGzip(request.body, policy: policy)
        } catch .tooLarge {
            throw tooLarge()
        } catch {
            throw Self.badGzip
        }
    }

    /// Whether the request body is gzip (else identity): `Content-Encoding` may name gzip or
    /// nothing; any other coding is a 415.
    static func bodyIsGzip(_ request: HTTPRequest) throws -> Bool {
        let coding = HeaderList.split(request.headers, "Content-Encoding").map { $0.lowercased() }
            .filter { $0 != "identity" }
        switch coding {
        case []: return false
        case ["gzip"], ["x-gzip"]: return true
        default:
            throw HTTPError(415, "Only gzip request bodies (or none) are accepted as Content-Encoding.",
                            headers: HTTPHeaders([("Accept-Encoding", "gzip")]))
        }
    }

    static var badGzip: HTTPError {
        HTTPError(400, "The body is declared gzip but is not a valid gzip stream.", title: "Bad gzip")
    }

    private func tooLarge() -> HTTPError {
        HTTPError(413, "The body is larger than \(policy.maxBodyBytes) bytes (after inflating); nothing was stored.")
    }

    static func contentType(_ header: String?) throws -> String {
        guard let header, !header.isEmpty else { return "application/octet-stream" }
        // Bytes, as an import checks it (a `/` followed by a combining mark is not a Character `/`).
        guard MediaType.isStorable(header) else {
            throw HTTPError(400, "Content-Type must be a media type of at most 256 bytes without control characters.")
        }
        return header
    }

    /// `Cache-Control: stale-while-revalidate=N` on a PUT (RFC 5861 §3): how long past expiry
    /// the entry is still served while it is refreshed. A PUT states what to store, so a bad
    /// value is refused (400) rather than ignored as a read's directives are; other
    /// directives are ignored.
    static func staleWhileRevalidate(_ headers: HTTPHeaders, max: Int) throws -> Int {
        guard headers.contains("Cache-Control") else { return 0 }
        var seconds = 0
        for directive in HeaderList.elements(headers, "Cache-Control") where directive.name == "stale-while-revalidate" {
            guard let text = directive.value, let value = HeaderList.deltaSeconds(text), value <= max else {
                throw HTTPError(400, "`stale-while-revalidate` must be a number of seconds from 0 to \(max).")
            }
            seconds = value
        }
        return seconds
    }

    static func condition(_ headers: HTTPHeaders) throws -> WriteCondition {
        if let noneMatch = EntityTagList(headers, "If-None-Match") {
            guard noneMatch == .any else { throw HTTPError(400, "On a write only `If-None-Match: *` is supported.") }
            return .absent
        }
        if let match = EntityTagList(headers, "If-Match") {
            // An empty list (or only weak or malformed tags) matches nothing: the write answers 412.
            return .match(match == .any ? ["*"] : match.strongTags)
        }
        return .none
    }
}
