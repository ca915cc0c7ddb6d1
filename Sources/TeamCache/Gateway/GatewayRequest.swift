import CacheCore
import CacheKeys
import HTTPServer

/// A gateway request as parsed on arrival: where it goes, whether and how it is cached, and
/// the headers the upstream is sent.
struct GatewayRequest: Sendable {
    let request: HTTPRequest
    let upstream: Upstream
    let namespace: Namespace
    /// The target under the upstream's base URL (`/chat/completions?x=1`).
    let target: String
    /// The cache plan; nil: forwarded uncached (another endpoint, not JSON, or `no-store`).
    let plan: ModelRequest?
    let controls: GatewayControls
    let headers: [(name: String, value: String)]
    let principal: Authenticator.Principal

    var holder: Int64? { principal.token?.id }
    var body: [UInt8] { plan?.upstreamBody ?? request.body }

    /// The entry key and its name in the live-fills registry.
    var key: String? { plan?.descriptor.key }
}

/// The request controls of a gateway call: `Cache-Control` (`no-cache`, `no-store`,
/// `max-stale=N`, `stale-while-revalidate=N`) and `TeamCache-TTL: N`.
struct GatewayControls: Sendable {
    var noCache = false
    var noStore = false
    /// Serve an entry up to this stale when the upstream fails (nil: never).
    var maxStale: Int?
    var ttl: Int?
    var staleWhileRevalidate = 0

    init(_ headers: HTTPHeaders, policy: CachePolicy) throws {
        let cacheControl = RequestCacheControl(headers)
        noCache = cacheControl.noCache
        maxStale = cacheControl.maxStale
        noStore = HeaderList.elements(headers, "Cache-Control").contains { $0.name == "no-store" }
        if let text = headers["TeamCache-TTL"] {
            guard let seconds = Int(text), (1...policy.maxTTL).contains(seconds) else {
                throw HTTPError(400, "TeamCache-TTL must be a whole number of seconds from 1 to \(policy.maxTTL).")
            }
            ttl = seconds
        }
        staleWhileRevalidate = try CacheAPI.staleWhileRevalidate(headers, max: CacheAPI.maxWindow(policy))
    }
}

/// The headers sent upstream: the caller's, without hop-by-hop ones, TeamCache's own, `Host`
/// and framing; a TeamCache token given as the SDK's API key replaced by the upstream's
/// server-held key (and never forwarded: without such a key the call is refused).
enum GatewayHeaders {
    /// Hop-by-hop (RFC 9110 §7.6.1) and framing fields, and those meant for TeamCache.
    static let dropped: Set<String> = [
        "connection", "keep-alive", "proxy-connection", "proxy-authorization", "proxy-authenticate", "te", "trailer",
        "transfer-encoding", "upgrade", "host", "content-length", "expect", "teamcache-authorization", "teamcache-ttl",
        "cache-control", "pragma", "x-request-id",
    ]

    static func forwarded(_ headers: HTTPHeaders, upstream: Upstream, cached: Bool) throws -> [(name: String, value: String)] {
        // Fields the caller's `Connection` names are hop-by-hop too.
        let named = Set(HeaderList.elements(headers, "Connection").map(\.name))
        var out: [(name: String, value: String)] = []
        var credential = false
        for (name, value) in headers {
            let lower = name.lowercased()
            if dropped.contains(lower) || named.contains(lower) || lower.hasPrefix("teamcache-") { continue }
            if cached && lower == "accept-encoding" { continue }
            if lower == "authorization" || lower == "x-api-key" {
                if carriesTeamCacheToken(lower, value) {
                    guard upstream.key != nil else {
                        throw HTTPError(401, "A TeamCache token was given as the upstream's API key, but upstream "
                                        + "\(upstream.name) holds no key of its own: send your own key, and the token "
                                        + "in TeamCache-Authorization. (The token is never forwarded.)")
                    }
                    continue
                }
                credential = true
            }
            out.append((name, value))
        }
        // The server-held key stands in when the caller sent none of its own.
        if !credential { out += upstream.credentialHeaders() }
        // Cached answers are stored and replayed as identity bytes (TeamCache compresses them).
        if cached { out.append(("Accept-Encoding", "identity")) }
        return out
    }

    static func carriesTeamCacheToken(_ lowerName: String, _ value: String) -> Bool {
        let trimmed = value.drop { $0 == " " }
        if lowerName == "x-api-key" { return trimmed.hasPrefix(APIToken.secretPrefix) }
        guard trimmed.lowercased().hasPrefix("bearer ") else { return false }
        return trimmed.dropFirst(7).drop { $0 == " " }.hasPrefix(APIToken.secretPrefix)
    }

    /// Upstream response fields passed to the caller: not hop-by-hop or framing (the server
    /// frames its own answer), nor cookies (a shared cache never relays one caller's to another).
    static func relayed(_ head: [(name: String, value: String)]) -> [(name: String, value: String)] {
        head.filter {
            let lower = $0.name.lowercased()
            return !dropped.contains(lower) && !["content-encoding", "set-cookie", "date", "server", "content-type",
                                                 "alt-svc"].contains(lower)
        }
    }
}
