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

    /// The caller's headers as the upstream gets them, and whether the server-held key was lent
    /// (the caller sent no credential of its own).
    static func forwarded(_ headers: HTTPHeaders, upstream: Upstream) throws
        -> (headers: [(name: String, value: String)], lentKey: Bool) {
        // Fields the caller's `Connection` names are hop-by-hop too.
        let named = Set(HeaderList.elements(headers, "Connection").map(\.name))
        var out: [(name: String, value: String)] = []
        var credential = false
        for (name, value) in headers {
            let lower = name.lowercased()
            if dropped.contains(lower) || named.contains(lower) || lower.hasPrefix("teamcache-") { continue }
            // The gateway relays bytes as they come and stores identity bytes: it decodes no
            // encoding, so it asks for none (below).
            if lower == "accept-encoding" { continue }
            if containsTokenSecret(value) || namesATeamCacheToken(lower, value) {
                // A TeamCache token, wherever the caller put it (`Authorization` in any scheme,
                // `x-api-key`, Azure's `api-key`, any field): never forwarded.
                guard upstream.key != nil else {
                    throw HTTPError(401, "A TeamCache token was given in \(name), but upstream \(upstream.name) holds no "
                                    + "key of its own: send your own key, and the token in TeamCache-Authorization. "
                                    + "(The token is never forwarded.)")
                }
                continue
            }
            if ["authorization", "x-api-key", "api-key"].contains(lower) { credential = true }
            out.append((name, value))
        }
        // The server-held key stands in when the caller sent none of its own.
        let lent = !credential && upstream.key != nil
        if lent { out += upstream.credentialHeaders() }
        out.append(("Accept-Encoding", "identity"))
        return (out, lent)
    }

    /// A credential field whose value is a TeamCache token of any shape (`tc_…`, after a scheme
    /// such as `Bearer`): the gateway takes one there as its caller's token, so it is never
    /// forwarded, even one not shaped as `newSecret` makes them (a secret registered before the
    /// strength rule). No model provider's key begins with `tc_`.
    static func namesATeamCacheToken(_ lowercasedName: String, _ value: String) -> Bool {
        guard ["authorization", "x-api-key", "api-key"].contains(lowercasedName) else { return false }
        let credential = value.split(whereSeparator: { $0 == " " || $0 == "\t" }).last ?? ""
        return credential.hasPrefix(APIToken.secretPrefix)
    }

    /// Whether the request switches on a beta feature (`anthropic-beta`, `OpenAI-Beta`).
    static func namesABeta(_ headers: HTTPHeaders) -> Bool {
        headers["anthropic-beta"] != nil || headers["OpenAI-Beta"] != nil
    }

    /// Whether `text` holds a TeamCache token's secret (`tc_` and 64 hex digits).
    static func containsTokenSecret<Text: StringProtocol>(_ text: Text) -> Bool {
        let bytes = Array(text.utf8), prefix = Array(APIToken.secretPrefix.utf8)
        guard bytes.count >= prefix.count + 64 else { return false }
        var index = 0
        while index + prefix.count + 64 <= bytes.count {
            if bytes[index..<(index + prefix.count)].elementsEqual(prefix),
               bytes[(index + prefix.count)..<(index + prefix.count + 64)].allSatisfy(isHexDigit) {
                return true
            }
            index += 1
        }
        return false
    }

    private static func isHexDigit(_ byte: UInt8) -> Bool {
        (byte >= 0x30 && byte <= 0x39) || (byte >= 0x61 && byte <= 0x66) || (byte >= 0x41 && byte <= 0x46)
    }

    /// Upstream response fields passed to the caller whose call it is: not hop-by-hop or framing
    /// (the server frames its own answer), nor cookies (a shared cache never relays one caller's
    /// to another), nor the cache's own. (Followers and hits get none: they carry the first
    /// caller's account, rate limits and request ids.)
    static func relayed(_ head: [(name: String, value: String)]) -> [(name: String, value: String)] {
        head.filter {
            let lower = $0.name.lowercased()
            return !dropped.contains(lower) && !["set-cookie", "date", "server", "content-type", "alt-svc",
                                                 "cache-status", "x-teamcache", "age", "vary"].contains(lower)
        }
    }
}
