import CacheCore
import CacheKeys
import CacheStore
import Foundation
import HTTPServer

/// `POST /v1/caches/{ns}/hits` (read scope): hits a client's local tier answered without
/// asking, reported in batches, so `/stats`, the history and the dashboard count them as the
/// hits (and the tokens and money saved) they were, marked `local`.
///
/// `{"hits": [{"key": "…", "etag": "…", "count": N}, …]}` → `{"counted": C, "priced": P}`.
/// Every reported hit counts as a hit (the hit ratio stays true); it is priced (tokens and
/// cost saved, the entry's hit count) only when the namespace still holds the version the
/// client answered from (`etag`; any version when it is left out). A hit on a version since
/// replaced, evicted or deleted saved what that version cost, which is no longer known: it
/// adds no tokens rather than another version's. A reader could always have made the same
/// hits by asking, so the scope is `read`; the bounds keep one report cheap.
///
/// A tier numbers its reports (`reporter`, its own random id, and `seq`, rising by one per
/// report) and sends a report whose answer it did not get again as it was: one counted
/// already (its number not above the last counted) answers `"replayed": true` and counts
/// nothing, so a lost answer never counts hits twice.
extension CacheAPI {
    static let maxReportedKeys = 1000
    static let maxReportedHits = 1_000_000

    func reportLocalHits(_ request: HTTPRequest, _ context: RequestContext) throws -> HTTPResponse {
        let namespace = try context.namespace
        let json = try RequestParsing.jsonObject(request)
        let reports = try Self.reportedHits(json)
        let numbered = try Self.reportNumber(json)
        if numbered != nil && reports.isEmpty {
            throw HTTPError(422, "A numbered report holds at least one hit.")
        }
        var stored: [EntryKey: StoredEntry] = [:]
        for entry in try store.hitSubjects(namespace, reports.map(\.key)) {
            if let key = EntryKey(entry.key) { stored[key] = entry }
        }
        // Claimed last: nothing after it can fail (the counts below are the tracker's, in
        // memory), so a claimed number is always a counted one.
        if let numbered, try !store.claimHitReport(namespace, reporter: numbered.reporter, seq: numbered.seq) {
            return .json(200, JSONValue.object([("counted", .int(0)), ("priced", .int(0)),
                                                ("replayed", .bool(true))]).serialized)
        }
        let now = clock.now()
        var priced = 0
        for report in reports {
            let entry = stored[report.key].flatMap { report.etag == nil || report.etag == $0.etag ? $0 : nil }
            tracker.recordLocal(namespace: namespace.name, entry: entry, count: report.count, at: now)
            if entry != nil { priced += report.count }
        }
        let counted = reports.reduce(0) { $0 + $1.count }
        return .json(200, JSONValue.object([("counted", .int(counted)), ("priced", .int(priced))]).serialized)
    }

    static let maxReporterBytes = 64

    /// The report's number (`reporter` and `seq`, both or neither), so a retry is counted once.
    static func reportNumber(_ json: JSONValue) throws -> (reporter: String, seq: Int)? {
        let reporter = json["reporter"], seq = json["seq"]
        if reporter == nil && seq == nil { return nil }
        guard let name = reporter?.stringValue, (1...maxReporterBytes).contains(name.utf8.count),
              name.utf8.allSatisfy({ $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") || ($0 < 128 && isalnum(Int32($0)) != 0) })
        else {
            throw HTTPError(422, "`reporter` must be 1 to \(maxReporterBytes) letters, digits, `-` or `_`, sent with `seq`.")
        }
        guard let number = seq?.integerValue, number >= 1 else {
            throw HTTPError(422, "`seq` must be a positive integer, sent with `reporter`.")
        }
        return (name, number)
    }

    /// One reported key: how many hits, on which version (nil: whichever is stored).
    struct ReportedHits {
        let key: EntryKey
        let etag: String?
        let count: Int
    }

    /// The report's counts by key, or a `422` naming what is wrong.
    static func reportedHits(_ json: JSONValue) throws -> [ReportedHits] {
        try RequestParsing.rejectUnknownMembers(json, allowed: ["hits", "reporter", "seq"])
        guard case .array(let items)? = json["hits"] else {
            throw HTTPError(422, "`hits` must be an array of {\"key\", \"count\"} objects.")
        }
        guard items.count <= maxReportedKeys else {
            throw HTTPError(422, "A report holds at most \(maxReportedKeys) keys; send more in several.")
        }
        var reports: [ReportedHits] = []
        var total = 0
        for (index, item) in items.enumerated() {
            guard case .object = item else { throw HTTPError(422, "`hits[\(index)]` must be an object.") }
            try RequestParsing.rejectUnknownMembers(item, allowed: ["key", "etag", "count"])
            guard let text = item["key"]?.stringValue, let key = EntryKey(Array(text.utf8)) else {
                throw HTTPError(422, "`hits[\(index)].key` must be a key of 1 to \(EntryKey.maxBytes) bytes without NUL.")
            }
            guard let count = item["count"]?.integerValue, (1...maxReportedHits).contains(count) else {
                throw HTTPError(422, "`hits[\(index)].count` must be an integer from 1 to \(maxReportedHits).")
            }
            total += count
            guard total <= maxReportedHits else {
                throw HTTPError(422, "A report counts at most \(maxReportedHits) hits; send more in several.")
            }
            let etag = try optionalString(item["etag"], name: "hits[\(index)].etag")
            reports.append(ReportedHits(key: key, etag: etag, count: count))
        }
        return reports
    }
}
