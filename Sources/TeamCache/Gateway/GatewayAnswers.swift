import CacheCore
import CacheKeys
import Foundation
import HTTPClient
import HTTPServer

/// What the gateway answers with: a stored answer replayed, and the problems of a call
/// that failed.
enum GatewayAnswers {
    /// A stored answer: its status, content type and bytes (gzip when the client takes it),
    /// marked `Cache-Status: teamcache; hit; ttl=N` and `X-TeamCache: hit` (with `collapsed`
    /// or `stale` as they apply).
    static func hit(_ entry: StoredEntry, freshness: Freshness, collapsed: Bool, now: Date, request: HTTPRequest,
                    api: CacheAPI) throws -> HTTPResponse {
        var headers = HTTPHeaders(capacity: 8)
        let metadata = entry.metadata.flatMap { try? JSONParser.parse($0) }
        // Checked again here: rows written before the descriptor route checked it (`MediaType`).
        let recorded = metadata?["content_type"]?.stringValue.flatMap { MediaType.isStorable($0) ? $0 : nil }
        headers.add("Content-Type", recorded ?? entry.contentType)
        headers.add("Age", String(max(0, Freshness.wholeSeconds(now.timeIntervalSince(entry.updatedAt), up: false))))
        var marks = ""
        let ttl: Int
        switch freshness {
        case .fresh(let left): ttl = left
        case .stale(let overdue), .revalidate(let overdue):
            ttl = -overdue
            marks += "; stale"
        case .expired: ttl = 0
        }
        if collapsed { marks = "; collapsed" + marks }
        headers.add("Cache-Status", "teamcache; hit; ttl=\(ttl)\(marks)")
        headers.add("X-TeamCache", "hit\(marks)")
        headers.add("Vary", "Accept-Encoding")
        let status = metadata?["status"]?.integerValue.flatMap { (200..<300).contains($0) ? $0 : nil } ?? 200
        if entry.encoding == .gzip && AcceptEncoding.allowsGzip(request.headers) {
            headers.add("Content-Encoding", "gzip")
            return HTTPResponse(status: status, headers: headers, body: entry.body)
        }
        return HTTPResponse(status: status, headers: headers, body: try api.identityBody(entry))
    }

    /// The problem of a call that could not be made or did not finish: 504 for a deadline,
    /// 502 for anything else, naming the upstream and what went wrong (never a credential:
    /// the client's errors carry names, addresses and reasons only).
    static func failure(_ error: HTTPClientError?, upstream: Upstream) -> HTTPError {
        let status = error?.isTimeout == true ? 504 : 502
        let what = error.map { "\($0.detail) (\($0.code.rawValue))" } ?? "its answer was cut short"
        var problem = HTTPError(status, "Upstream \(upstream.name) did not answer: \(what).",
                                title: status == 504 ? "Upstream timed out" : "Upstream failed",
                                type: ProblemTypes.uri(status == 504 ? "upstream-timeout" : "upstream-failed"))
        problem.members = [("upstream", "\"\(upstream.name)\""),  // names are [a-z0-9_-]: no escapes
                           ("reason", "\"\(error?.code.rawValue ?? "closed")\"")]
        problem.headers.add("X-TeamCache", "miss")
        return problem
    }
}
