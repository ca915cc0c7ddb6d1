import CacheKeys
import Foundation

/// A raw entry as read back.
public struct CachedEntry: Sendable {
    public let body: Data
    public let contentType: String
    public let etag: String?
    /// `Cache-Status`, e.g. `teamcache; hit; ttl=42`.
    public let cacheStatus: String?
    public let age: Int
}

/// What a write stored.
public struct WriteResult: Sendable, Equatable {
    public let created: Bool
    public let key: String
    public let etag: String
    public let size: Int
    public let storedSize: Int
    public let encoding: String
}

/// A model answer: the text and what to remember about it (tokens, finish reason…).
public struct ModelAnswer: Sendable, Equatable {
    public var response: String
    public var metadata: JSONValue?

    public init(response: String, metadata: JSONValue? = nil) {
        self.response = response
        self.metadata = metadata
    }

    /// Metadata with the token counts the cache turns into "tokens saved".
    public static func metadata(inputTokens: Int, outputTokens: Int, finishReason: String? = nil) -> JSONValue {
        var members: [(String, JSONValue)] = [("input_tokens", .int(inputTokens)), ("output_tokens", .int(outputTokens))]
        if let finishReason { members.append(("finish_reason", .string(finishReason))) }
        return .object(members)
    }
}

/// The result of a descriptor lookup.
public enum LookupResult: Sendable, Equatable {
    /// `stale`: expired, served within `max_stale` or the entry's stale-while-revalidate window.
    case hit(ModelAnswer, key: String, age: Int, stale: Bool)
    case miss(key: String)
    /// A miss, and this caller holds the key's miss lease: fill it (upsert with the lease) or
    /// give it back (`release`).
    case leased(key: String, lease: MissLease)
    /// A miss while another caller holds the key's lease and the wait ran out.
    case pending(key: String, retryAfter: Int)
    /// A stale-while-revalidate answer with the refresh lease: serve it, and refresh.
    case revalidate(ModelAnswer, key: String, age: Int, lease: MissLease)
}

/// A miss (or refresh) lease: the right to be the one caller that fills a key, for a while.
public struct MissLease: Sendable, Equatable {
    /// The holder's secret: never log it.
    public let id: String
    public let expiresIn: Int
}

/// A failed call: the server's problem, or a transport failure after the retries.
public enum TeamCacheClientError: Error, Sendable, Equatable {
    /// An RFC 9457 problem from the server.
    case problem(status: Int, title: String, detail: String)
    case transport(String)
    /// No answer within the deadline (a lookup's short one, or `timeout`): not retried.
    case timedOut
    /// Not sent: the client's circuit breaker is open after recent failures (`reason`: the last).
    case skipped(reason: String)
    case malformedResponse

    /// A refused token (401) or a missing scope (403): the configuration, not the cache's health.
    public var isMisconfiguration: Bool {
        if case .problem(let status, _, _) = self { return status == 401 || status == 403 }
        return false
    }
}
