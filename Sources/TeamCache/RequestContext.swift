import CacheCore
import HTTPServer

/// A secured request as its handler sees it, built once where the request is authorized:
/// who made it, and the namespace and key its path names, each parsed and checked there (the
/// namespace before authorizing, since the token's scope is checked against it; the key after,
/// so a caller without a usable token learns nothing about its key from a 400).
struct RequestContext: Sendable {
    let principal: Authenticator.Principal
    private let path: (namespace: Namespace?, key: EntryKey?)
    /// Set when the handler runs on an event loop, which must not block: where work that
    /// may (a commit, reading a key) goes. nil: the handler's thread may block.
    var offLoop: BlockingWork? = nil

    /// The path's namespace, for authorizing against (nil on a store-wide route; a bad one: 400).
    static func namespace(of request: HTTPRequest) throws -> Namespace? {
        request.pathParameters["ns"] == nil ? nil : try RequestParsing.namespace(request)
    }

    /// The context of an authorized request: its key parsed now (a bad one: 400).
    init(_ request: HTTPRequest, namespace: Namespace?, principal: Authenticator.Principal) throws {
        self.principal = principal
        path = (namespace, request.pathParameters["key"] == nil ? nil : try RequestParsing.key(request))
    }

    /// The route's namespace: every namespaced route has one (a handler routed without is a 500).
    var namespace: Namespace {
        get throws {
            guard let namespace = path.namespace else { throw HTTPError(500, "A namespaced handler was routed without one.") }
            return namespace
        }
    }

    /// The route's key (an entry route's handlers only).
    var key: EntryKey {
        get throws {
            guard let key = path.key else { throw HTTPError(500, "An entry handler was routed without a key.") }
            return key
        }
    }

    /// The token's id, as leases and writes record their holder (nil with auth off).
    var holder: Int64? { principal.token?.id }
}
