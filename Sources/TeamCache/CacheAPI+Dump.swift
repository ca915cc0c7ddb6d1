import CacheCore
import CacheKeys
import CacheStore
import Foundation
import HTTPServer

/// `GET /v1/caches/{ns}/export` and `POST /v1/caches/{ns}/import` (admin): a namespace's
/// entries out and in as dump lines (the format of `teamcache export`).
///
/// Decision: the export is paged, not one endless stream. Each page is an ordinary request
/// with the service's deadlines and at most 1,000 entries or 16 MiB of bodies, and says where
/// the next one starts (`TeamCache-Next-Cursor`): memory stays flat on both sides, and a
/// transfer cut short resumes from its last page instead of starting over.
extension CacheAPI {
    static let nextCursorHeader = "TeamCache-Next-Cursor"
    /// On an export's first page: the change feed's cursor as the export began.
    static let changesCursorHeader = "TeamCache-Changes-Cursor"
    static let exportPageBytes = 16 * 1024 * 1024
    /// Most inflated bytes of one import request (a dump split over requests goes further).
    static let importRequestBytes = 64 * 1024 * 1024

    func exportPage(_ request: HTTPRequest, _ context: RequestContext) throws -> HTTPResponse {
        let namespace = try context.namespace
        let query = try RequestParsing.query(request)
        let limit = try RequestParsing.integer("limit", in: query, 1...1000) ?? 1000
        let after = try query["after"].map(Self.cursorKey)
        let since = try query["since"].map { text -> String in
            guard DumpedEntry.parseTimestamp(text) != nil else {
                throw HTTPError(400, "`since` must be an RFC 3339 timestamp, e.g. 2026-01-31T00:00:00Z.")
            }
            return text
        }
        var body: [UInt8] = []
        // The first page says where a follower of the change feed starts, taken before it reads.
        let feedCursor = after == nil ? try guarded(request) { try store.feedHead() } : nil
        let page = try guarded(request) {
            try store.exportPage(namespace: namespace, since: since, after: after.map { (namespace.name, $0) },
                                 limit: limit, byteBudget: Self.exportPageBytes) { body += $0.line() }
        }
        var headers = HTTPHeaders([("Content-Type", "application/x-ndjson"), ("Vary", "Accept-Encoding")])
        if page.more, let last = page.last { headers.add(Self.nextCursorHeader, Self.cursor(last.key)) }
        if let feedCursor { headers.add(Self.changesCursorHeader, String(feedCursor)) }
        if AcceptEncoding.allowsGzip(request.headers) && body.count > 256,
           let packed = Gzip.compress(body, level: policy.compressionLevel) {
            body = packed
            headers.add("Content-Encoding", "gzip")
        }
        return HTTPResponse(status: 200, headers: headers, body: body)
    }

    func importLines(_ request: HTTPRequest, _ context: RequestContext) throws -> HTTPResponse {
        let namespace = try context.namespace
        let query = try RequestParsing.query(request)
        let conflict = try query["on_conflict"].map { text -> ImportConflictPolicy in
            guard let policy = ImportConflictPolicy(rawValue: text) else {
                throw HTTPError(400, "`on_conflict` must be skip, replace or newer.")
            }
            return policy
        } ?? .skip
        let body = try Self.importBody(request)
        var work = DumpImport(store: store, namespace: namespace, conflict: conflict, listed: 100)
        try guarded(request) {
            var number = 0
            for line in body.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
                number += 1
                if line.allSatisfy({ $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\r") }) { continue }
                try work.add(Array(line), number: number)
            }
            try work.commit()
        }
        var members: [(String, JSONValue)] = ImportOutcome.allCases.map { ($0.rawValue, .int(work.outcomes[$0, default: 0])) }
        members.append(("rejected", .int(work.rejected)))
        members.append(("errors", .array(work.rejections.map { rejection in
            .object([("line", .int(rejection.line)), ("reason", .string(rejection.reason))])
        })))
        var response = HTTPResponse.json(200, JSONValue.object(members).serialized)
        stampAfterCommit(&response)
        return response
    }

    /// The request's dump, inflated when sent as gzip (at most `importRequestBytes`).
    private static func importBody(_ request: HTTPRequest) throws -> [UInt8] {
        guard try bodyIsGzip(request) else { return request.body }
        do { return try Gzip.decompress(request.body, limit: importRequestBytes) } catch Gzip.Failure.tooLarge {
            throw HTTPError(413, "The dump inflates past \(importRequestBytes) bytes; send it in parts.")
        } catch {
            throw badGzip
        }
    }

    /// The opaque cursor of a page: the last key, base64url without padding.
    static func cursor(_ key: [UInt8]) -> String {
        Data(key).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    static func cursorKey(_ text: String) throws -> [UInt8] {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.utf8.count % 4) % 4)
        guard text.utf8.count <= 1024, let data = Data(base64Encoded: base64), let key = EntryKey(Array(data)) else {
            throw HTTPError(400, "`after` must be a cursor from TeamCache-Next-Cursor.")
        }
        return key.bytes
    }
}
