import CacheCore
import Foundation
import HTTPServer
import Hashing

/// Checks `Authorization: Bearer` on every `/v1/` request.
///
/// Verified tokens (and unknown hashes) are cached in memory for `cacheTTL`, so the hot
/// path makes no extra database query; a revocation takes effect within that TTL. The cache
/// is keyed by the secret's SHA-256, never by the secret.
public final class Authenticator: @unchecked Sendable {
    // @unchecked: `cache` is guarded by `lock`; the rest is immutable or thread-safe.
    /// Who made a request: the token (nil when auth is off).
    public struct Principal: Sendable {
        public let token: APIToken?
    }

    private struct Cached {
        let token: APIToken?
        let fetched: TimeInterval
    }

    public let enabled: Bool
    private let store: TokenStore
    private let cacheTTL: TimeInterval
    private let limiter: RateLimiter?
    private let clock: any Clock
    private let lock = NSLock()
    private var cache: [[UInt8]: Cached] = [:]
    private static let maxCached = 10_000

    init(enabled: Bool, store: TokenStore, cacheTTL: TimeInterval, rateLimit: Double, clock: any Clock) {
        self.enabled = enabled
        self.store = store
        self.cacheTTL = cacheTTL
        self.clock = clock
        limiter = rateLimit > 0 ? RateLimiter(rate: rateLimit, burst: max(1, rateLimit * 2)) : nil
    }

    /// The principal allowed `scope` on `namespace` (nil namespace: a store-wide route).
    public func authorize(_ request: HTTPRequest, _ scope: Scope, namespace: Namespace?) throws -> Principal {
        // Without `cachedOnly` a principal or an error always comes back.
        try authorize(request, scope, namespace: namespace, cachedOnly: false)!
    }

    /// Like `authorize`, but never reads the database (for event loops): nil when the token
    /// is not in the cache and the caller has to authorize on a worker.
    public func authorizeWithoutBlocking(_ request: HTTPRequest, _ scope: Scope, namespace: Namespace?) throws
        -> Principal? {
        try authorize(request, scope, namespace: namespace, cachedOnly: true)
    }

    /// The check made on a request's head, before its body is read: throws when the token
    /// is missing, malformed, known to be bad or lacks the scope; passes a token it has not
    /// seen yet (the handler checks it). Never blocks, never counts toward the rate limit.
    public func precheck(_ request: HTTPRequest, _ scope: Scope, namespace: Namespace?) throws {
        _ = try authorize(request, scope, namespace: namespace, cachedOnly: true, counted: false)
    }

    private func authorize(_ request: HTTPRequest, _ scope: Scope, namespace: Namespace?, cachedOnly: Bool,
                           counted: Bool = true) throws -> Principal? {
        guard enabled else { return Principal(token: nil) }
        guard let header = request.headers["Authorization"] else {
            throw Self.unauthorized("A bearer token is required.", error: nil)
        }
        // Sliced, not split: this runs on every request, and slices allocate nothing.
        guard let space = header.utf8.firstIndex(of: UInt8(ascii: " ")),
              header[..<space].lowercased() == "bearer",
              case let secret = header[header.utf8.index(after: space)...], !secret.isEmpty, secret.utf8.count <= 256
        else {
            throw Self.unauthorized("Use `Authorization: Bearer <token>`.", error: "invalid_request")
        }
        let hash = APIToken.hash(secret: secret)
        guard let found = try lookup(hash, cachedOnly: cachedOnly) else { return nil }
        guard let token = found, token.isUsable(at: clock.now()) else {
            throw Self.unauthorized("The token is unknown, expired or revoked.", error: "invalid_token")
        }
        guard token.allows(scope, namespace: namespace) else {
            let target = namespace.map { "namespace \($0.name)" } ?? "store-wide routes"
            throw HTTPError(403, "This token lacks the \(scope.rawValue) scope for \(target).")
        }
        if counted, let limiter, let wait = limiter.admit(token.id) {
            throw HTTPError(429, "This token is over its request rate; retry later.",
                            headers: HTTPHeaders([("Retry-After", String(wait))]))
        }
        return Principal(token: token)
    }

    /// The token with this secret hash (inner nil: none); outer nil when `cachedOnly` and
    /// the answer is not cached.
    private func lookup(_ hash: [UInt8], cachedOnly: Bool) throws -> APIToken?? {
        let now = ProcessInfo.processInfo.systemUptime
        if let cached = lock.withLock({ cache[hash] }), now - cached.fetched < cacheTTL { return .some(cached.token) }
        if cachedOnly { return nil }
        let token = try store.find(hash: hash)
        lock.withLock {
            if cache.count >= Self.maxCached { cache.removeAll() }
            cache[hash] = Cached(token: token, fetched: now)
        }
        return .some(token)
    }

    static func unauthorized(_ detail: String, error: String?) -> HTTPError {
        let challenge = "Bearer realm=\"teamcache\"" + (error.map { ", error=\"\($0)\"" } ?? "")
        return HTTPError(401, detail, headers: HTTPHeaders([("WWW-Authenticate", challenge)]))
    }
}
