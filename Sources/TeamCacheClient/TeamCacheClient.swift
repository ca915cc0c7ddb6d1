import CacheKeys
import Foundation
import Locking
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A client for app backends: raw entries, descriptor lookup/upsert, evict and stats, with
/// timeouts and retries (with backoff, honouring Retry-After) on 503, 429 and lost connections,
/// a short deadline for lookups that do not wait, and a circuit breaker shared by every caller
/// (a cache that is down or frozen costs one call the short deadline, then nothing until a
/// probe finds it answering). Builds with the Foundation APIs Apple platforms have.
public struct TeamCacheClient: Sendable {
    public struct Configuration: Sendable {
        public var baseURL: URL
        public var token: String?
        /// Per attempt.
        public var timeout: TimeInterval = 5
        /// Extra attempts after the first: on 429, and on 503 and transport errors for idempotent calls.
        public var maxRetries = 2
        /// The first backoff; doubled per attempt, with jitter, capped at 5 s (Retry-After wins).
        public var backoff: TimeInterval = 0.1
        /// The whole deadline of a lookup that does not wait (a hit takes milliseconds).
        public var lookupTimeout: TimeInterval = 0.5
        /// Shared by every copy of the client made from this configuration; nil: none.
        public var breaker: CircuitBreaker? = CircuitBreaker()

        public init(baseURL: URL, token: String?) {
            self.baseURL = baseURL
            self.token = token
        }
    }

    public let configuration: Configuration
    private let session: URLSession
    /// Answers fresh copies without a network call (see `LocalTier`); nil: none, or the tier
    /// given serves another service or token (its copies are what that token may read, and its
    /// queued writes go out with it): such a client works without one.
    public let localTier: LocalTier?

    public init(_ configuration: Configuration, session: URLSession = TeamCacheClient.sharedSession,
                localTier: LocalTier? = nil) {
        self.configuration = configuration
        self.session = session
        // The tier's own copy of this client: no breaker (its failures are its own, and must not
        // skip the caller's calls), no retries (it tries again on its own schedule).
        var background = configuration
        background.breaker = nil
        background.maxRetries = 0
        let taken = localTier?.attach(TeamCacheClient(background, session: session)) ?? false
        self.localTier = taken ? localTier : nil
    }

    /// A client at `baseURL` with `token`, through `localTier`.
    public init(baseURL: URL, token: String?, localTier: LocalTier?) {
        self.init(Configuration(baseURL: baseURL, token: token), localTier: localTier)
    }

    /// The default session: many connections per host, because lookups that wait for a fill
    /// each hold one while they wait, and the filler's upsert must not queue behind them
    /// (URLSession's usual six per host would make a burst of seven wait for nothing).
    public static let sharedSession: URLSession = {
        let configuration = URLSessionConfiguration.default
        configuration.httpMaximumConnectionsPerHost = 512
        return URLSession(configuration: configuration)
    }()

    // MARK: Raw entries

    /// A raw GET: the entry, `notModified` (`ifNoneMatch` is the stored version), or a miss.
    func fetchEntry(namespace: String, key: String, maxStale: Int?, ifNoneMatch: String? = nil) async throws
        -> FetchedEntry {
        var headers = ["Accept-Encoding": "gzip"]
        if let maxStale { headers["Cache-Control"] = "max-stale=\(maxStale)" }
        if let ifNoneMatch { headers["If-None-Match"] = ifNoneMatch }
        let (data, response) = try await send("GET", entryPath(namespace, key), headers: headers,
                                              accept: [200, 304, 404], timeout: configuration.lookupTimeout, quick: true)
        let status = response.value(forHTTPHeaderField: "Cache-Status")
        switch response.statusCode {
        case 304: return .notModified(ttl: CachedEntry.ttl(status))
        case 200:
            return .entry(CachedEntry(body: data, contentType: response.value(forHTTPHeaderField: "Content-Type") ?? "",
                                      etag: response.value(forHTTPHeaderField: "ETag"), cacheStatus: status,
                                      age: Int(response.value(forHTTPHeaderField: "Age") ?? "") ?? 0))
        default: return .miss
        }
    }

    /// `condition`: `If-Match` / `If-None-Match` (a queued write sent over the version it was made over).
    func remotePut(namespace: String, key: String, body: Data, contentType: String, ttl: Int?, tags: [String],
                   condition: (name: String, value: String)? = nil) async throws -> WriteResult {
        var headers = ["Content-Type": contentType]
        if !tags.isEmpty { headers["Cache-Tag"] = tags.joined(separator: ", ") }
        if let condition { headers[condition.name] = condition.value }
        let query = ttl.map { "?ttl=\($0)" } ?? ""
        let (data, response) = try await send("PUT", entryPath(namespace, key) + query, headers: headers, body: body,
                                              accept: [200, 201])
        return try answered { try Self.writeResult(data, created: response.statusCode == 201) }
    }

    func remoteDelete(namespace: String, key: String) async throws -> Bool {
        try await send("DELETE", entryPath(namespace, key), accept: [204, 404]).1.statusCode == 204
    }

    // MARK: Descriptors

    /// A descriptor lookup as the service answers it, with the version details a local tier keeps.
    func fetchLookup(namespace: String, _ descriptor: Descriptor, maxStale: Int?, refresh: Bool, lease: Int?,
                     wait: Double?, ifNoneMatch: String? = nil) async throws -> LookupAnswer {
        var members = descriptor.jsonMembers
        if let ifNoneMatch { members.append(("if_none_match", .string(ifNoneMatch))) }
        if let maxStale { members.append(("max_stale", .int(maxStale))) }
        if refresh { members.append(("refresh", .bool(true))) }
        if let lease { members.append(("lease", .int(lease))) }
        if let wait { members.append(("wait", .number(String(wait)))) }
        // A lookup that may be granted a lease is not retried once it reached the server: a
        // retry would find its own lease and be told "pending".
        // A wait, and the short deadline for the answer after it; without one, the short deadline.
        let (data, _) = try await sendJSON("POST", "/v1/caches/\(namespace)/lookup", .object(members), accept: [200],
                                           timeout: (wait ?? 0) + configuration.lookupTimeout,
                                           idempotent: lease == nil, quick: wait == nil)
        return try answered {
            let json = try Self.parse(data)
            let notModified = json["not_modified"]?.boolValue == true
            return LookupAnswer(result: notModified ? .miss(key: json["key"]?.stringValue ?? "") : try Self.lookupResult(json),
                                etag: json["etag"]?.stringValue, ttl: json["ttl"]?.integerValue,
                                staleWhileRevalidate: json["stale_while_revalidate"]?.integerValue ?? 0,
                                notModified: notModified, metadata: json["metadata"])
        }
    }

    /// `parse`'s result; when the body is not TeamCache's answer (another service at the URL,
    /// a proxy), the breaker opens at once: its status was counted a success a moment ago, so a
    /// run of such answers would never add up to the threshold, and each call would pay another
    /// round trip to the wrong service.
    func answered<T>(_ parse: () throws -> T) throws -> T {
        do {
            return try parse()
        } catch TeamCacheClientError.malformedResponse {
            configuration.breaker?.failed("malformed answer", atOnce: true)
            throw TeamCacheClientError.malformedResponse
        }
    }

    static func lookupResult(_ json: JSONValue) throws -> LookupResult {
        guard let key = json["key"]?.stringValue else { throw TeamCacheClientError.malformedResponse }
        guard json["hit"]?.boolValue == true, let text = json["response"]?.stringValue else {
            if let lease = json["lease"], let id = lease["id"]?.stringValue {
                return .leased(key: key, lease: MissLease(id: id, expiresIn: lease["expires_in"]?.integerValue ?? 1))
            }
            if json["pending"]?.boolValue == true {
                return .pending(key: key, retryAfter: json["retry_after"]?.integerValue ?? 1)
            }
            return .miss(key: key)
        }
        let metadata = json["metadata"].flatMap { $0 == .null ? nil : $0 }
        let answer = ModelAnswer(response: text, metadata: metadata)
        let age = json["age"]?.integerValue ?? 0
        if let refresh = json["revalidate"], let id = refresh["lease"]?.stringValue {
            return .revalidate(answer, key: key, age: age,
                               lease: MissLease(id: id, expiresIn: refresh["expires_in"]?.integerValue ?? 1))
        }
        return .hit(answer, key: key, age: age, stale: json["stale"]?.boolValue ?? false)
    }

    func remoteUpsert(namespace: String, _ descriptor: Descriptor, answer: ModelAnswer, ttl: Int?, tags: [String],
                      lease: MissLease?, staleWhileRevalidate: Int?) async throws -> WriteResult {
        var members = descriptor.jsonMembers + [("response", .string(answer.response))]
        if let metadata = answer.metadata { members.append(("metadata", metadata)) }
        if let ttl { members.append(("ttl", .int(ttl))) }
        if let lease { members.append(("lease", .string(lease.id))) }
        if let staleWhileRevalidate { members.append(("stale_while_revalidate", .int(staleWhileRevalidate))) }
        if !tags.isEmpty { members.append(("tags", .array(tags.map(JSONValue.string)))) }
        let (data, response) = try await sendJSON("POST", "/v1/caches/\(namespace)/upsert", .object(members),
                                                  accept: [200, 201])
        return try answered { try Self.writeResult(data, created: response.statusCode == 201) }
    }

    /// Gives a lease back (the call to fill it failed) so the next caller can; false when it
    /// was unknown or already finished.
    @discardableResult
    public func release(namespace: String, key: String, lease: MissLease) async throws -> Bool {
        let body = JSONValue.object([("key", .string(key)), ("lease", .string(lease.id))])
        return try await sendJSON("POST", "/v1/caches/\(namespace)/release", body, accept: [204, 404]).1.statusCode == 204
    }

    // MARK: Evict and stats

    /// Evicts by predicate members (`tag`, `keys`, `model`, `all`…); returns how many went.
    public func evict(namespace: String, _ predicate: [(String, JSONValue)]) async throws -> Int {
        let (data, _) = try await sendJSON("POST", "/v1/caches/\(namespace)/evict", .object(predicate), accept: [200])
        guard let count = try Self.parse(data)["evicted"]?.integerValue else { throw TeamCacheClientError.malformedResponse }
        return count
    }

    /// The namespace's stats document.
    public func stats(namespace: String, top: Int = 20) async throws -> JSONValue {
        try Self.parse(try await send("GET", "/v1/caches/\(namespace)/stats?top=\(top)", accept: [200]).0)
    }

    // MARK: Transport

    private func entryPath(_ namespace: String, _ key: String) -> String {
        "/v1/caches/\(namespace)/entries/" + (key.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? key)
    }

    func sendJSON(_ method: String, _ path: String, _ body: JSONValue, accept: Set<Int>,
                          timeout: TimeInterval? = nil, idempotent: Bool = true, quick: Bool = false) async throws
        -> (Data, HTTPURLResponse) {
        try await send(method, path, headers: ["Content-Type": "application/json"], body: Data(body.serialized.utf8),
                       accept: accept, timeout: timeout, idempotent: idempotent, quick: quick)
    }

    /// One call with retries; a status outside `accept` becomes `.problem`. A 429 is retried
    /// always (refused before anything was done); a 503 and a transport error only when the
    /// call is `idempotent`, or for a transport error when the request never reached the
    /// server (it could not connect): a call that is not idempotent, retried, could meet its
    /// own effect (a lease it was granted, a create-only write it made).
    /// `quick`: a lookup on a caller's path (no wait): never slept on for a retry.
    func send(_ method: String, _ path: String, headers: [String: String] = [:], body: Data? = nil,
              accept: Set<Int>, timeout: TimeInterval? = nil, idempotent: Bool = true, quick: Bool = false) async throws
        -> (Data, HTTPURLResponse) {
        // A write after a paid call, on its caller's path: a short deadline and no sleeps.
        let waitedOn = Self.onCallersPath
        // A whole deadline: a large answer gets a second a megabyte more to go up.
        let timeout = waitedOn ? max(1, 2 * configuration.lookupTimeout) + Double(body?.count ?? 0) / 1_000_000 : timeout
        let quick = quick || waitedOn
        // Asked before the call's verdict is awaited: a call skipped here gives none, so it
        // must not abandon the probe another call is making (the next would probe too).
        if let breaker = configuration.breaker, !breaker.allow() {
            let health = breaker.health
            throw TeamCacheClientError.skipped(reason: health.misconfiguration ?? health.lastError ?? "")
        }
        do {
            return try await attempts(method, path, headers: headers, body: body, accept: accept, timeout: timeout,
                                      idempotent: idempotent, quick: quick)
        } catch {
            // A verdict was given unless the call was cancelled (or failed in a way that says
            // nothing of TeamCache): the next call probes.
            configuration.breaker?.abandonProbe()
            throw error
        }
    }

    private func attempts(_ method: String, _ path: String, headers: [String: String], body: Data?,
                          accept: Set<Int>, timeout: TimeInterval?, idempotent: Bool, quick: Bool) async throws
        -> (Data, HTTPURLResponse) {
        guard let url = URL(string: configuration.baseURL.absoluteString + path) else {
            throw TeamCacheClientError.transport("bad URL for \(path)")
        }
        var request = URLRequest(url: url, timeoutInterval: timeout ?? configuration.timeout)
        request.httpMethod = method
        request.httpBody = body
        headers.forEach { request.setValue($0.value, forHTTPHeaderField: $0.key) }
        // A token read from a file often ends in a newline; no token holds whitespace.
        let token = configuration.token?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
        // One a header cannot carry is never sent (FoundationNetworking drops such a header on its
        // own; not relied on), and a 401 then says why instead of "refused".
        let unsendable = Self.unsendable(token)
        if !token.isEmpty, unsendable == nil {
            request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        }
        let refusal = unsendable
            ?? (token.isEmpty ? "the token is missing" : "the token is refused (unknown, expired or revoked)")
        let breaker = configuration.breaker
        var attempt = 0
        // A try that may have reached the service (its connection lost after sending): what a
        // later try that never left says must not hide it (a write would be queued and sent twice).
        var maybeSent: URLError.Code?
        while true {
            do {
                let sending = request
                let (data, response) = try await Self.within(sending.timeoutInterval) { [session] in
                    try await session.data(for: sending)
                }
                guard let http = response as? HTTPURLResponse else { throw TeamCacheClientError.malformedResponse }
                if accept.contains(http.statusCode) {
                    breaker?.succeeded()
                    return (data, http)
                }
                let problem = Self.problem(data, status: http.statusCode)
                Self.judge(http.statusCode, problem, breaker: breaker, refusal: refusal)
                if !quick, Self.retries(status: http.statusCode, idempotent: idempotent),
                   attempt < configuration.maxRetries, breaker?.health.state ?? .closed == .closed {
                    attempt += 1
                    try await pause(attempt: attempt, retryAfter: http.value(forHTTPHeaderField: "Retry-After"))
                    continue
                }
                throw problem
            } catch let error as URLError {
                // A caller that went away says nothing of TeamCache.
                if error.code == .cancelled || Task.isCancelled { throw CancellationError() }
                // A timeout opens the breaker at once and is never retried: each try would cost
                // the caller the whole deadline again.
                breaker?.failed("\(error.code)", atOnce: error.code == .timedOut)
                if !Self.neverSent(error) { maybeSent = error.code }
                guard error.code != .timedOut, attempt < configuration.maxRetries, idempotent || Self.neverSent(error),
                      breaker?.health.state ?? .closed == .closed else {
                    if error.code == .timedOut { throw TeamCacheClientError.timedOut }
                    throw TeamCacheClientError.transport("\(maybeSent ?? error.code)")
                }
                attempt += 1
                // A lookup on a caller's path is never slept on: it tries again at once (a
                // connection the service closed meanwhile), or the caller calls the upstream.
                if !quick { try await pause(attempt: attempt, retryAfter: nil) }
            }
        }
    }

    /// Set while a write is made on a caller's path, after the model call it stores (`cached`):
    /// the caller waits for an answer it already has. Such a write gets a short deadline (twice
    /// `lookupTimeout`, 1 s at least) and is never slept on (no Retry-After, no backoff), so a
    /// cache that is slow to write (its primary stalled while lookups still answer) costs the
    /// caller that at most, not `timeout` and the retries. A background refresh is not on it.
    @TaskLocal static var onCallersPath = false

    /// Why `token` cannot go in a header (nil: it can): a character outside printable ASCII.
    /// Says where, never what.
    static func unsendable(_ token: String) -> String? {
        for (index, scalar) in token.unicodeScalars.enumerated() where !(0x21...0x7E).contains(scalar.value) {
            return "the token holds a character a header cannot carry (character \(index + 1)): it is not sent"
        }
        return nil
    }

    /// What an answer that is not accepted says of TeamCache: a refused token or scope is a
    /// misconfiguration (a 401 stops using the cache for the breaker's longer cool-down; `refusal`
    /// says why the token was refused), a 5xx a failure, anything else a working server.
    static func judge(_ status: Int, _ problem: TeamCacheClientError, breaker: CircuitBreaker?, refusal: String) {
        guard let breaker else { return }
        switch status {
        case 401:
            breaker.misconfigured(refusal, stop: true)
        case 403:
            if case .problem(_, _, let detail) = problem { breaker.misconfigured("the token lacks a scope: \(detail)", stop: false) }
        case 429: breaker.failed("answered 429 (rate limited)")
        case 500...: breaker.failed("answered \(status)")
        default: breaker.succeeded()
        }
    }

    /// `work`, or `URLError(.timedOut)` once `seconds` have passed (the work is cancelled).
    /// URLRequest's own timeout is an idle timeout, and on Linux a server that accepts the
    /// connection and never answers was waited for a minute: this is the whole deadline.
    ///
    /// The caller is answered the moment the deadline passes, not when the cancelled work
    /// has wound down: a task group waits for its children, and FoundationNetworking took
    /// over a second to give up a cancelled request under load (CI: a 0.3 s deadline cost
    /// 1.5 s). The work is left to finish on its own, cancelled, its result dropped.
    static func within<T: Sendable>(_ seconds: TimeInterval, _ work: @escaping @Sendable () async throws -> T)
        async throws -> T {
        let race = DeadlineRace<T>()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                race.start(continuation, seconds: seconds, work)
            }
        } onCancel: {
            race.finish(.failure(CancellationError()))
        }
    }

    static func retries(status: Int, idempotent: Bool) -> Bool {
        status == 429 || (status == 503 && idempotent)
    }

    /// Errors that mean the request never left: nothing happened on the server.
    static let neverSentCodes: [URLError.Code] = [.cannotConnectToHost, .cannotFindHost, .dnsLookupFailed,
                                                  .notConnectedToInternet]
    /// The same as `TeamCacheClientError.transport` carries them: the error holds only the code's
    /// text (its public shape is a string), so both sides build it by the same interpolation.
    static let neverSentCauses = Set(neverSentCodes.map { "\($0)" })

    static func neverSent(_ error: URLError) -> Bool { neverSentCodes.contains(error.code) }

    private func pause(attempt: Int, retryAfter: String?) async throws {
        let exponential = configuration.backoff * pow(2, Double(attempt - 1)) * Double.random(in: 0.5...1.5)
        try await Task.sleep(nanoseconds: Self.pauseNanoseconds(retryAfter: retryAfter, otherwise: exponential))
    }

    /// `Retry-After` in seconds when it is a sane number, else `otherwise`; within 0 to 5 s
    /// either way (a negative, NaN or infinite value once trapped converting to nanoseconds).
    static func pauseNanoseconds(retryAfter: String?, otherwise: Double) -> UInt64 {
        let asked = retryAfter.flatMap { Double($0.trimmingCharacters(in: .whitespaces)) }.flatMap { $0.isFinite ? $0 : nil }
        let seconds = min(5, max(0, asked ?? (otherwise.isFinite ? otherwise : 0)))
        return UInt64(seconds * 1e9)
    }

    static func parse(_ data: Data) throws -> JSONValue {
        do { return try JSONParser.parse(Array(data)) } catch { throw TeamCacheClientError.malformedResponse }
    }

    static func problem(_ data: Data, status: Int) -> TeamCacheClientError {
        let json = try? JSONParser.parse(Array(data))
        return .problem(status: status, title: json?["title"]?.stringValue ?? "HTTP \(status)",
                        detail: json?["detail"]?.stringValue ?? "")
    }

    static func writeResult(_ data: Data, created: Bool) throws -> WriteResult {
        let json = try parse(data)
        guard let key = json["key"]?.stringValue, let etag = json["etag"]?.stringValue,
              let size = json["size"]?.integerValue, let stored = json["stored_size"]?.integerValue,
              let encoding = json["encoding"]?.stringValue else { throw TeamCacheClientError.malformedResponse }
        return WriteResult(created: created, key: key, etag: etag, size: size, storedSize: stored, encoding: encoding,
                           expiresAt: json["expires_at"]?.stringValue)
    }
}
