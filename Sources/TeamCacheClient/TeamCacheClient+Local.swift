import CacheKeys
import Foundation
import Locking

/// The calls a local tier answers or follows; without a tier, each is the plain request.
extension TeamCacheClient {
    /// The entry, or nil on a miss. `maxStale` accepts an entry expired up to that many seconds.
    /// With a local tier: a fresh copy answers (`fromLocal`); else the service is asked with the
    /// copy's ETag; when it cannot be reached, a copy within `maxStale` answers.
    public func get(namespace: String, key: String, maxStale: Int? = nil) async throws -> CachedEntry? {
        guard let tier = localTier else {
            if case .entry(let entry) = try await fetchEntry(namespace: namespace, key: key, maxStale: maxStale) {
                return entry
            }
            return nil
        }
        if let copy = tier.answer(namespace, key, .raw) { return Self.entry(copy, fromLocal: true) }
        let (held, since) = tier.held(namespace, key, .raw)
        let fetched: FetchedEntry
        do {
            fetched = try await fetchEntry(namespace: namespace, key: key, maxStale: maxStale, ifNoneMatch: held?.etag)
        } catch let error as TeamCacheClientError where error.isUnreachable {
            guard let copy = tier.offline(namespace, key, .raw, maxStale: maxStale) else { throw error }
            return Self.entry(copy, fromLocal: true, stale: true)
        }
        switch fetched {
        case .notModified(let ttl):
            // A 304 to a request that named no version is not an answer (and asking again in
            // the same way would loop for as long as it came).
            guard let held, held.etag != nil else { throw TeamCacheClientError.malformedResponse }
            tier.revalidated(namespace, key, ttl: ttl ?? 0, etag: held.etag)
            // Answered with the service's word on its freshness, not the copy's old expiry.
            return Self.entry(Self.renewed(held, ttl: ttl), fromLocal: false)
        case .entry(let entry):
            if let ttl = CachedEntry.ttl(entry.cacheStatus), let etag = entry.etag {
                let now = Date().timeIntervalSince1970
                tier.keep(namespace, key, LocalCopy(kind: .raw, etag: etag, body: entry.body, contentType: entry.contentType,
                                                    expiresAt: now + Double(ttl), updatedAt: now - Double(entry.age)),
                          since: since)
            }
            return entry
        case .miss:
            // The service holds nothing fresh where the copy thought it fresh: it goes.
            if let held, held.isFresh(Date().timeIntervalSince1970) { tier.forget(namespace, key) }
            return nil
        }
    }

    /// `lease`: on a miss, ask to be the one caller that fills the key, for that many seconds;
    /// `wait`: on a miss, wait up to that many seconds (0 to 60) for a fill (the request's
    /// timeout grows by as much). With a local tier, as `get`.
    public func lookup(namespace: String, _ descriptor: Descriptor, maxStale: Int? = nil, refresh: Bool = false,
                       lease: Int? = nil, wait: Double? = nil) async throws -> LookupResult {
        guard let tier = localTier, !refresh else {
            return try await fetchLookup(namespace: namespace, descriptor, maxStale: maxStale, refresh: refresh,
                                         lease: lease, wait: wait).result
        }
        let key = descriptor.key
        if let copy = tier.answer(namespace, key, .lookup) { return Self.hit(copy, key: key, fromLocal: true) }
        let (held, since) = tier.held(namespace, key, .lookup)
        let answer: LookupAnswer
        do {
            answer = try await fetchLookup(namespace: namespace, descriptor, maxStale: maxStale, refresh: false,
                                           lease: lease, wait: wait, ifNoneMatch: held?.etag)
        } catch let error as TeamCacheClientError where error.isUnreachable {
            guard let copy = tier.offline(namespace, key, .lookup, maxStale: maxStale) else { throw error }
            return Self.hit(copy, key: key, fromLocal: true, stale: true)
        }
        if answer.notModified, let held {
            tier.revalidated(namespace, key, ttl: answer.ttl ?? 0, etag: held.etag)
            return Self.hit(Self.renewed(held, ttl: answer.ttl), key: key, fromLocal: false)
        }
        switch answer.result {
        case .hit(let model, _, let age, _), .revalidate(let model, _, let age, _):
            if let ttl = answer.ttl, let etag = answer.etag {
                let now = Date().timeIntervalSince1970
                tier.keep(namespace, key, LocalCopy(kind: .lookup, etag: etag, body: Data(model.response.utf8),
                                                    contentType: "text/plain", metadata: model.metadata?.serialized,
                                                    expiresAt: now + Double(ttl), updatedAt: now - Double(age),
                                                    staleWhileRevalidate: answer.staleWhileRevalidate),
                          since: since)
            }
        case .miss, .leased, .pending:
            if let held, held.isFresh(Date().timeIntervalSince1970) { tier.forget(namespace, key) }
        }
        return answer.result
    }

    @discardableResult
    public func put(namespace: String, key: String, body: Data, contentType: String = "application/octet-stream",
                    ttl: Int? = nil, tags: [String] = []) async throws -> WriteResult {
        let result: WriteResult
        do {
            result = try await remotePut(namespace: namespace, key: key, body: body, contentType: contentType, ttl: ttl,
                                         tags: tags)
        } catch let error as TeamCacheClientError where error.neverReached {
            // Offline: the write waits in the tier's outbox (`WriteResult.queued`).
            let now = Date().timeIntervalSince1970
            guard let tier = localTier,
                  tier.queue(namespace, key, .put(body: body, contentType: contentType, ttl: ttl, tags: tags),
                             copy: LocalCopy(kind: .raw, etag: nil, body: body, contentType: contentType,
                                             expiresAt: now + Double(ttl ?? 3600), updatedAt: now)) else { throw error }
            return .queued(key: key)
        }
        if let tier = localTier, let expires = result.expiresAt.flatMap(Self.instant) {
            tier.wrote(namespace, key, LocalCopy(kind: .raw, etag: result.etag, body: body, contentType: contentType,
                                                 expiresAt: expires, updatedAt: Date().timeIntervalSince1970))
        }
        return result
    }

    /// `lease`: the miss or refresh lease this answer fills. `staleWhileRevalidate`: seconds
    /// past expiry for which the answer is still served while one caller refreshes it.
    @discardableResult
    public func upsert(namespace: String, _ descriptor: Descriptor, answer: ModelAnswer, ttl: Int? = nil,
                       tags: [String] = [], lease: MissLease? = nil, staleWhileRevalidate: Int? = nil)
        async throws -> WriteResult {
        let result: WriteResult
        do {
            result = try await remoteUpsert(namespace: namespace, descriptor, answer: answer, ttl: ttl, tags: tags,
                                            lease: lease, staleWhileRevalidate: staleWhileRevalidate)
        } catch let error as TeamCacheClientError where error.neverReached {
            let now = Date().timeIntervalSince1970
            guard let tier = localTier,
                  tier.queue(namespace, descriptor.key, .upsert(descriptor, answer, ttl: ttl, tags: tags,
                                                                 staleWhileRevalidate: staleWhileRevalidate),
                             copy: LocalCopy(kind: .lookup, etag: nil, body: Data(answer.response.utf8),
                                             contentType: "text/plain", metadata: answer.metadata?.serialized,
                                             expiresAt: now + Double(ttl ?? 3600), updatedAt: now,
                                             staleWhileRevalidate: max(0, staleWhileRevalidate ?? 0))) else {
                throw error
            }
            return .queued(key: descriptor.key)
        }
        if let tier = localTier, let expires = result.expiresAt.flatMap(Self.instant) {
            // Under the key this client derived, not the one the answer names: a mixed-up answer
            // must not plant this response as another key's fresh copy.
            let copy = LocalCopy(kind: .lookup, etag: result.etag, body: Data(answer.response.utf8),
                                 contentType: "text/plain", metadata: answer.metadata?.serialized, expiresAt: expires,
                                 updatedAt: Date().timeIntervalSince1970,
                                 staleWhileRevalidate: max(0, staleWhileRevalidate ?? 0))
            tier.wrote(namespace, descriptor.key, copy)
        }
        return result
    }

    /// False when there was nothing to delete (the tier's copy goes either way).
    @discardableResult
    public func delete(namespace: String, key: String) async throws -> Bool {
        let deleted = try await remoteDelete(namespace: namespace, key: key)
        localTier?.forget(namespace, key)
        return deleted
    }

    /// Reports hits a local tier answered, by (key, the ETag of the version it answered from).
    /// `{"counted", "priced"}`, or `"replayed"` for a numbered report counted already.
    @discardableResult
    func reportHits(namespace: String, _ hits: [(key: String, etag: String?, count: Int)],
                    reporter: String? = nil, seq: Int? = nil) async throws -> JSONValue {
        let items = hits.map { hit in
            JSONValue.object([("key", .string(hit.key)), ("count", .int(hit.count))]
                             + (hit.etag.map { [("etag", JSONValue.string($0))] } ?? []))
        }
        var members: [(String, JSONValue)] = [("hits", .array(items))]
        if let reporter, let seq { members += [("reporter", .string(reporter)), ("seq", .int(seq))] }
        let (data, _) = try await sendJSON("POST", "/v1/caches/\(namespace)/hits", .object(members), accept: [200])
        return (try? JSONParser.parse(Array(data))) ?? .null
    }

    /// Whole seconds of `interval` (rounded down), within a century either way: a copy's times
    /// come from the service's numbers (`Age`, `ttl`) and from a file another client wrote, and
    /// `Int(_:)` of a `Double` past `Int`'s range traps, which would take the app down.
    static func wholeSeconds(_ interval: Double) -> Int {
        let century = 100.0 * 365 * 86_400
        guard interval.isFinite else { return interval > 0 ? Int(century) : interval < 0 ? -Int(century) : 0 }
        return Int(min(max(interval, -century), century).rounded(.down))
    }

    /// A copy the service has just said is current: fresh for its `ttl` from now (an answer
    /// without one leaves the copy's own expiry).
    static func renewed(_ copy: LocalCopy, ttl: Int?) -> LocalCopy {
        guard let ttl else { return copy }
        var renewed = copy
        renewed.expiresAt = Date().timeIntervalSince1970 + Double(ttl)
        return renewed
    }

    /// `stale`: answered while the service could not be reached (it cannot say the copy was not replaced).
    static func entry(_ copy: LocalCopy, fromLocal: Bool, stale: Bool = false) -> CachedEntry {
        let now = Date().timeIntervalSince1970
        let ttl = wholeSeconds(copy.expiresAt - now)
        var entry = CachedEntry(body: copy.body, contentType: copy.contentType, etag: copy.etag,
                                cacheStatus: "teamcache; hit; ttl=\(ttl)" + (fromLocal ? "; local" : "")
                                    + (stale ? "; stale" : ""),
                                age: max(0, wholeSeconds(now - copy.updatedAt)))
        entry.fromLocal = fromLocal
        return entry
    }

    static func hit(_ copy: LocalCopy, key: String, fromLocal: Bool, stale: Bool = false) -> LookupResult {
        let now = Date().timeIntervalSince1970
        var answer = ModelAnswer(response: String(decoding: copy.body, as: UTF8.self),
                                 metadata: copy.metadata.flatMap { try? JSONParser.parse(Array($0.utf8)) })
        answer.fromLocal = fromLocal
        return .hit(answer, key: key, age: max(0, wholeSeconds(now - copy.updatedAt)),
                    stale: stale || !copy.isFresh(now))
    }

    /// Seconds since 1970 of an RFC 3339 instant (as the service writes `expires_at`), with or
    /// without fractional seconds. The formatters are made once (a formatter costs more to make
    /// than a write) and used under a lock.
    static func instant(_ text: String) -> Double? {
        instantFormatters.withLock { formatters in
            (formatters.fractional.date(from: text) ?? formatters.plain.date(from: text))?.timeIntervalSince1970
        }
    }

    private static let instantFormatters: Locked<(fractional: ISO8601DateFormatter, plain: ISO8601DateFormatter)> = {
        let fractional = ISO8601DateFormatter()
        fractional.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        let plain = ISO8601DateFormatter()
        plain.formatOptions = [.withInternetDateTime]
        return Locked((fractional, plain))
    }()
}

extension TeamCacheClientError {
    /// Whether a failed write certainly did not reach the service: refused, not connected, or
    /// not asked (the breaker open). One that timed out, or whose connection was lost after it
    /// was sent, is not queued: its outcome is unknown (the service may have applied it, or may
    /// when it resumes, and the queued copy would then meet it as another's write).
    var neverReached: Bool {
        switch self {
        case .transport(let cause): TeamCacheClient.neverSentCauses.contains(cause)
        case .skipped: true
        case .timedOut, .problem, .malformedResponse: false
        }
    }

    /// The service refused what a write carried (400, 413, 422) or had no room for it (507):
    /// nothing was stored, and its lease is given back.
    var refusedWrite: Bool {
        if case .problem(let status, _, _) = self { return [400, 413, 422, 507].contains(status) }
        return false
    }

    /// The service could not be reached (or was not asked: the breaker is open).
    var isUnreachable: Bool {
        switch self {
        case .transport, .timedOut, .skipped: true
        case .problem, .malformedResponse: false
        }
    }
}
