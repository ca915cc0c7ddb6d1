import CacheKeys
import Foundation
import HTTPClient

/// How gateway calls wait for one another and what they may relay.
public struct GatewaySettings: Sendable {
    /// How long a caller waits for another's call before calling itself (seconds).
    public var wait: Double = 60
    /// The lease a filler takes: longest it may hold the key before others call (seconds).
    public var lease = 120
    /// The longest upstream answer relayed (bytes); a longer one fails the call.
    public var maxResponseBytes = 64 << 20

    public init() {}
}

/// A model API the gateway forwards to: its base URL, its shape, and what the service holds
/// for it (a credential, a CA file, deadlines). Read once at start.
public struct Upstream: Sendable {
    public let name: String
    public let origin: Origin
    public let kind: ModelRequest.Kind
    /// The server-held credential (from `key_file`), sent in place of a TeamCache token that
    /// a caller gives as its SDK's API key. Never logged.
    let key: String?
    /// TLS for an https base URL: the system store, or the CA file's.
    let tls: TLSContext?
    public let deadlines: ClientDeadlines

    /// The defaults: each SDK's own base URL, so its paths are forwarded as they are.
    public static func defaults() throws -> [String: Upstream] {
        try defaults(tls: TLSContext(caFile: nil))
    }

    /// The defaults, trusting the system store through `tls` (shared with a file's upstreams).
    static func defaults(tls: TLSContext) throws -> [String: Upstream] {
        [
            "openai": Upstream(name: "openai", origin: try Origin(parsing: "https://api.openai.com/v1"), kind: .openai,
                               key: nil, tls: tls, deadlines: ClientDeadlines()),
            "anthropic": Upstream(name: "anthropic", origin: try Origin(parsing: "https://api.anthropic.com"),
                                  kind: .anthropic, key: nil, tls: tls, deadlines: ClientDeadlines()),
        ]
    }

    /// The headers that carry a server-held credential for this kind of API.
    /// Whether the server-held key goes with `method` `path` (relative, no leading slash): the
    /// cached model calls, and the calls that read nothing stored under the account (the model
    /// list an SDK asks at start, token counts, moderations). Not files, batches, stored
    /// responses or deletes: behind one key they are every tenant's.
    func lendsKey(_ method: String, _ path: String) -> Bool {
        if method == "POST" && ModelRequest.cachedPaths(kind).contains(path) { return true }
        let segments = path.split(separator: "/", omittingEmptySubsequences: false)
        let models = kind == .openai ? ["models"] : ["v1", "models"]
        if method == "GET", segments.count >= models.count, segments.count <= models.count + 1,
           segments.prefix(models.count).elementsEqual(models.map { Substring($0) }),
           segments.dropFirst(models.count).allSatisfy({ !$0.isEmpty }) {
            return true
        }
        let stateless: Set<String> = kind == .openai ? ["moderations"] : ["v1/messages/count_tokens"]
        return method == "POST" && stateless.contains(path)
    }

    func credentialHeaders() -> [(name: String, value: String)] {
        guard let key else { return [] }
        switch kind {
        case .openai: return [("Authorization", "Bearer \(key)")]
        case .anthropic: return [("x-api-key", key)]
        }
    }
}
