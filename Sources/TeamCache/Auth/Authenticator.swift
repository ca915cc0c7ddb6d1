import CacheCore
import Cryptography
import Foundation
import HTTPServer
import Locking
import Synchronization

/// Checks `Authorization: Bearer` on every `/v1/` request.
///
/// Verified tokens (and unknown hashes) are cached in memory for `cacheTTL`, so the hot
/// path makes no extra database query; a revocation takes effect within that TTL. The cache
/// is keyed by the secret's SHA-256, never by the secret.
///
/// Unknown tokens cost a database query each, so they are limited per client address
/// before the query (`unknownPerSecond`, bursts of `unknownBurst`): past it, 429. Known
/// and unknown hashes live in separate bounded caches, so a flood of made-up tokens can
/// neither grow memory nor push the team's real tokens out of the cache.
public final class Authenticator: Sendable {
    /// Who made a request: the token (nil when auth is off).
    public struct Principal: Sendable {
        public let token: APIToken?

        /// Whether it may write `namespace` (always, with auth off).
        public func mayWrite(_ namespace: Namespace) -> Bool { token?.allows(.write, namespace: namespace) ?? true }
    }

    /// A secret's SHA-256 as a cache key, hashed in one call (an array of bytes is hashed
    /// byte by byte, 32 calls on every request).
    private struct SecretHash: Hashable {
        let digest: [UInt8]

        /// A SHA-256 is uniform, so its first eight bytes spread keys as well as all 32 (and the
        /// hasher's per-process seed still keeps buckets unpredictable), for a third of the
        /// hashing on every request; equality still compares all of it.
        func hash(into hasher: inout Hasher) {
            digest.withUnsafeBytes { bytes in
                // Always 32 bytes; the fallback only keeps a shorter one (none is made) total.
                guard bytes.count >= 8 else { return hasher.combine(bytes: bytes) }
                hasher.combine(bytes.loadUnaligned(as: UInt64.self))
            }
        }
    }

    private struct Cached {
        let token: APIToken?
        let fetched: TimeInterval
    }

    public let enabled: Bool
    private let store: any TokenDirectory
    private let cacheTTL: TimeInterval
    private let limiter: RateLimiter?
    private let clock: any Clock
    private let caches = Locked(Caches())

    /// What this replica remembers of tokens, each cache bounded.
    private struct Caches {
        var known = GenerationalCache<SecretHash, Cached>(capacity: 10_000)
        var unknown = GenerationalCache<SecretHash, TimeInterval>(capacity: 10_000)
        var misses = GenerationalCache<String, (tokens: Double, updated: TimeInterval)>(capacity: 10_000)

        /// Gives back a reserved lookup of `client`'s allowance for unknown tokens.
        mutating func refundUnknownLookup(_ client: String) {
            guard let bucket = misses.value(client) else { return }
            misses.insert(client, (tokens: min(Authenticator.unknownBurst, bucket.tokens + 1), updated: bucket.updated))
        }
    }
    static let unknownPerSecond = 5.0
    static let unknownBurst = 20.0

    init(enabled: Bool, store: any TokenDirectory, cacheTTL: TimeInterval, rateLimit: Double, clock: any Clock) {
        self.enabled = enabled
        self.store = store
        self.cacheTTL = cacheTTL
        self.clock = clock
        limiter = rateLimit > 0 ? RateLimiter(rate: rateLimit, burst: max(1, rateLimit * 2)) : nil
    }

    /// Where a request carries its TeamCache token.
    public enum TokenSource: Sendable {
        /// `Authorization: Bearer tc_…` (every route but the gateway's).
        case authorization
        /// The gateway's: `TeamCache-Authorization: Bearer tc_…`, else a TeamCache token given
        /// as the SDK's API key (`Authorization: Bearer tc_…` or `x-api-key: tc_…`), which the
        /// gateway replaces with the upstream's server-held key.
        case gateway
    }

    /// The principal allowed `scope` on `namespace` (nil namespace: a store-wide route).
    public func authorize(_ request: HTTPRequest, _ scope: Scope, namespace: Namespace?,
                          source: TokenSource = .authorization) throws -> Principal {
        try verified(request, scope, namespace: namespace, source: source)
    }

    /// Like `authorize`, but never reads the database (for event loops): nil when the token
    /// is not in the cache and the caller has to authorize on a worker.
    public func authorizeWithoutBlocking(_ request: HTTPRequest, _ scope: Scope, namespace: Namespace?,
                                         source: TokenSource = .authorization) throws -> Principal? {
        try authorize(request, scope, namespace: namespace, cachedOnly: true, source: source)
    }

    /// The check made on a request's head, before its body is read: throws when the token
    /// is missing, malformed, known to be bad or lacks the scope; a token it has not seen yet
    /// is `.unverified`, with the lookup that verifies it (blocking: the server runs it on a
    /// worker before it reads a large body, charged to the client's allowance for unknown
    /// tokens; a small body's handler verifies it). Never blocks, never counts toward the
    /// rate limit.
    public func precheck(_ request: HTTPRequest, _ scope: Scope, namespace: Namespace?,
                         source: TokenSource = .authorization) throws -> PrecheckVerdict {
        // A token verified before whose cache entry lapsed counts as known here (the handler
        // reads it again): a real client's bodies never draw on the unverified share.
        if try authorize(request, scope, namespace: namespace, cachedOnly: true, counted: false, lapsedIsKnown: true,
                         source: source) != nil {
            return .admitted
        }
        return .unverified { [self] in
            _ = try authorize(request, scope, namespace: namespace, cachedOnly: false, counted: false, source: source)
        }
    }

    /// The principal of a valid token, whatever its scopes (for a route that shows each token
    /// only what they reach: `GET /v1/caches`).
    public func identify(_ request: HTTPRequest) throws -> Principal {
        try verified(request, nil, namespace: nil, source: .authorization)
    }

    /// Reads the token from the database when it is not cached: a principal or an error.
    private func verified(_ request: HTTPRequest, _ scope: Scope?, namespace: Namespace?, source: TokenSource) throws
        -> Principal {
        guard let principal = try authorize(request, scope, namespace: namespace, cachedOnly: false, source: source)
        else {
            // Only a cache-only lookup answers nothing; should one here, the client retries.
            throw HTTPError(503, "The token could not be verified; retry shortly.",
                            headers: HTTPHeaders([("Retry-After", "1")]))
        }
        return principal
    }

    private func authorize(_ request: HTTPRequest, _ scope: Scope?, namespace: Namespace?, cachedOnly: Bool,
                           counted: Bool = true, lapsedIsKnown: Bool = false,
                           source: TokenSource = .authorization) throws -> Principal? {
        guard enabled else { return Principal(token: nil) }
        let secret = try source == .gateway ? Self.gatewaySecret(request) : Self.bearerSecret(request, "Authorization")
        // The connection's last verified credential again (the usual case): its digest without
        // a SHA-256. The digest still goes through the token cache below, TTL and all.
        let remembered = request.connectionCredential?.digest(for: secret)
        let hash = remembered ?? digest(secret)
        // Remembered whatever it names: the digest is a function of the secret alone and still
        // goes through the token cache each time, and the check before a body (which finds an
        // unseen token uncached) and the verification after it then hash once between them.
        if remembered == nil { request.connectionCredential?.remember(secret, digest: hash) }
        guard let found = try lookup(hash, cachedOnly: cachedOnly, client: request.remoteAddress,
                                     lapsedIsKnown: lapsedIsKnown) else { return nil }
        guard let token = found, token.isUsable(at: clock.now()) else {
            throw Self.unauthorized("The token is unknown, expired or revoked.", error: "invalid_token")
        }
        if let scope, !token.allows(scope, namespace: namespace) {
            let target = namespace.map { "namespace \($0.name)" } ?? "store-wide routes"
            throw HTTPError(403, "This token lacks the \(scope.rawValue) scope for \(target).")
        }
        if counted, let limiter, let wait = limiter.admit(token.id) {
            throw HTTPError(429, "This token is over its request rate; retry later.",
                            headers: HTTPHeaders([("Retry-After", String(wait))]))
        }
        return Principal(token: token)
    }

    /// SHA-256s this authenticator computed of presented secrets (what a connection's memory
    /// spares; read by tests).
    let digestsComputed = Atomic<Int>(0)

    private func digest(_ secret: Substring) -> [UInt8] {
        digestsComputed.add(1, ordering: .relaxed)
        return APIToken.hash(secret: secret)
    }

    /// The token with this secret hash (inner nil: none); outer nil when `cachedOnly` and
    /// the answer is not cached.
    private func lookup(_ hash: [UInt8], cachedOnly: Bool, client: String, lapsedIsKnown: Bool = false) throws
        -> APIToken?? {
        // Coarse: the cache's TTL and the unknown-token allowance count seconds (`Uptime`).
        let now = Uptime.coarse
        // `wasKnown`: a token this replica has verified before (its entry may have expired):
        // refreshing it is never limited, so a neighbour behind the same address sending
        // made-up tokens cannot lock the team's real ones out.
        let cacheKey = SecretHash(digest: hash)
        let (cached, wasKnown): (APIToken??, Bool) = caches.withLock { caches in
            let hit = caches.known.value(cacheKey)
            if let hit, now - hit.fetched < cacheTTL || lapsedIsKnown { return (.some(hit.token), true) }
            if let seen = caches.unknown.value(cacheKey), now - seen < cacheTTL { return (.some(nil), false) }
            return (nil, hit != nil)
        }
        if let cached { return cached }
        if cachedOnly { return nil }
        // The lookup is paid for before it runs (concurrent ones cannot all slip through
        // one remaining allowance) and refunded if the token turns out to be real.
        if !wasKnown, let wait = reserveUnknownLookup(client, now: now) {
            throw HTTPError(429, "Too many unknown tokens from this client; retry later.",
                            headers: HTTPHeaders([("Retry-After", String(wait))]))
        }
        let token = try store.find(hash: hash)
        caches.withLock { caches in
            if let token {
                caches.known.insert(cacheKey, Cached(token: token, fetched: now))
                caches.unknown.remove(cacheKey)
                if !wasKnown { caches.refundUnknownLookup(client) }
            } else {
                caches.unknown.insert(cacheKey, now)
                caches.known.remove(cacheKey)
            }
        }
        return .some(token)
    }

    /// Takes one lookup from `client`'s allowance for unknown tokens; when it is spent,
    /// the seconds until the next one and nothing taken.
    private func reserveUnknownLookup(_ client: String, now: TimeInterval) -> Int? {
        caches.withLock { caches in
            let bucket = caches.misses.value(client) ?? (tokens: Self.unknownBurst, updated: now)
            let tokens = min(Self.unknownBurst, bucket.tokens + (now - bucket.updated) * Self.unknownPerSecond)
            guard tokens >= 1 else {
                caches.misses.insert(client, (tokens: tokens, updated: now))
                return Int(((1 - tokens) / Self.unknownPerSecond).rounded(.up))
            }
            caches.misses.insert(client, (tokens: tokens - 1, updated: now))
            return nil
        }
    }

    /// The token of `Authorization: Bearer <token>` (or another header of that form).
    static func bearerSecret(_ request: HTTPRequest, _ name: String) throws -> Substring {
        guard var header = request.headers[name] else {
            throw Self.unauthorized("A bearer token is required.", error: nil)
        }
        // One pass over the value's bytes in place, and a slice of its UTF-8 view (no index
        // checks for characters): through the string's own views this was ~900 instructions
        // a request. The secret starts after an ASCII space, so at a scalar boundary.
        guard let start = header.withUTF8(Self.bearerSecretStart) else {
            throw Self.unauthorized("Use `\(name): Bearer <token>`.", error: "invalid_request")
        }
        let utf8 = header.utf8
        return Substring(utf8[utf8.index(utf8.startIndex, offsetBy: start)...])
    }

    /// Where the secret of `Bearer <secret>` starts in `value`; nil unless the scheme is
    /// `Bearer` (any case) and a secret of 1-256 bytes follows its space.
    static func bearerSecretStart(_ value: UnsafeBufferPointer<UInt8>) -> Int? {
        guard let space = value.firstIndex(of: UInt8(ascii: " ")),
              isBearer(UnsafeBufferPointer(rebasing: value[..<space])),
              case let length = value.count - space - 1, length >= 1, length <= 256 else { return nil }
        return space + 1
    }

    /// The gateway's token (see `TokenSource.gateway`).
    static func gatewaySecret(_ request: HTTPRequest) throws -> Substring {
        if request.headers["TeamCache-Authorization"] != nil {
            return try bearerSecret(request, "TeamCache-Authorization")
        }
        if let secret = try? bearerSecret(request, "Authorization"), secret.hasPrefix(APIToken.secretPrefix) {
            return secret
        }
        if let key = request.headers["x-api-key"], key.hasPrefix(APIToken.secretPrefix), key.utf8.count <= 256 {
            return Substring(key)
        }
        throw Self.unauthorized("Send the TeamCache token as `TeamCache-Authorization: Bearer <token>` (or as the "
                                + "SDK's API key when the upstream holds its own).", error: nil)
    }

    /// The scheme name `Bearer` in any case (RFC 9110 §11.1), compared without allocating.
    static func isBearer(_ scheme: UnsafeBufferPointer<UInt8>) -> Bool {
        let bearer: StaticString = "bearer"
        guard scheme.count == bearer.utf8CodeUnitCount else { return false }
        for index in 0..<scheme.count where scheme[index] | 0x20 != bearer.utf8Start[index] { return false }
        return true
    }

    static func unauthorized(_ detail: String, error: String?) -> HTTPError {
        let challenge = "Bearer realm=\"teamcache\"" + (error.map { ", error=\"\($0)\"" } ?? "")
        return HTTPError(401, detail, headers: HTTPHeaders([("WWW-Authenticate", challenge)]))
    }
}
