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
    /// Answered by the client's local tier, without asking the service.
    public internal(set) var fromLocal = false

    /// `ttl=N` of `Cache-Status: teamcache; hit; ttl=N`.
    static func ttl(_ status: String?) -> Int? {
        for part in (status ?? "").split(separator: ";") {
            let pair = part.trimmingCharacters(in: .whitespaces).split(separator: "=", maxSplits: 1)
            if pair.count == 2, pair[0] == "ttl" { return Int(pair[1]) }
        }
        return nil
    }
}

/// A raw GET as the service answered it.
enum FetchedEntry {
    case entry(CachedEntry)
    /// The `If-None-Match` version is the stored one (`ttl`: its freshness left).
    case notModified(ttl: Int?)
    case miss
}

/// A lookup as the service answered it, with what a local tier keeps of the version.
struct LookupAnswer {
    var result: LookupResult
    var etag: String?
    var ttl: Int?
    var staleWhileRevalidate: Int
    /// `if_none_match` named the stored version: `result` says nothing (the caller holds the answer).
    var notModified: Bool
    var metadata: JSONValue?
}

/// What a write stored.
public struct WriteResult: Sendable, Equatable {
    public let created: Bool
    public let key: String
    public let etag: String
    public let size: Int
    public let storedSize: Int
    public let encoding: String
    /// RFC 3339 (nil from a server that does not say).
    public var expiresAt: String? = nil
    /// The service could not be reached: the write waits in the local tier's outbox and is
    /// sent when it answers again (not committed yet).
    public var queued = false

    static func queued(key: String) -> WriteResult {
        WriteResult(created: false, key: key, etag: "", size: 0, storedSize: 0, encoding: "", queued: true)
    }
}

/// A model answer: the text and what to remember about it (tokens, finish reason…).
public struct ModelAnswer: Sendable, Equatable {
    public var response: String
    public var metadata: JSONValue?
    /// Answered by the client's local tier, without asking the service (not compared by `==`:
    /// the same answer from either place is the same answer).
    public internal(set) var fromLocal = false

    public static func == (lhs: ModelAnswer, rhs: ModelAnswer) -> Bool {
        lhs.response == rhs.response && lhs.metadata == rhs.metadata
    }

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

    /// Answered by the client's local tier, without asking the service.
    public var fromLocal: Bool {
        if case .hit(let answer, _, _, _) = self { answer.fromLocal } else { false }
    }
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
