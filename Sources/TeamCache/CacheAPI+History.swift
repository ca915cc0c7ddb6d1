import CacheCore
import CacheKeys
import Foundation
import HTTPServer

/// `GET /v1/caches/{ns}/stats/history?since=T&until=T&step=60|3600|86400` (read): the
/// namespace's points from the rollups (see migration 0015 and `HistoryRange`).
extension CacheAPI {
    func statsHistory(_ request: HTTPRequest, _ context: RequestContext) throws -> HTTPResponse {
        let namespace = try context.namespace
        let query = try RequestParsing.query(request)
        if let unknown = query.keys.first(where: { !["since", "until", "step"].contains($0) }) {
            throw HTTPError(400, "Unknown query parameter \"\(unknown)\" (known: since, until, step).")
        }
        let range: HistoryRange
        do {
            range = try HistoryRange(since: try Self.time("since", query), until: try Self.time("until", query),
                                     step: try RequestParsing.integer("step", in: query, 1...86400), now: clock.now(),
                                     policy: policy)
        } catch let refusal as HistoryRange.Refusal {
            throw HTTPError(400, refusal.message)
        }
        return try guarded(request) {
            let points = try store.history(namespace, range)
            return .json(200, JSONValue.object([
                ("namespace", .string(namespace.name)), ("step", .int(range.step)),
                ("since", .string(Self.instant(range.since))), ("until", .string(Self.instant(range.until))),
                ("currency", .string(currency)), ("points", .array(points.map(Self.json))),
            ]).serialized)
        }
    }

    /// RFC 3339 or seconds since the epoch; nil when absent.
    static func time(_ name: String, _ query: [String: String]) throws -> Date? {
        guard let text = query[name] else { return nil }
        if let seconds = Int(text), (0...253_402_300_799).contains(seconds) {
            return Date(timeIntervalSince1970: Double(seconds))
        }
        guard let date = RFC3339.parse(text) else {
            throw HTTPError(400, "\(name) must be an RFC 3339 time (2026-12-04T10:00:00Z) or seconds since the epoch.")
        }
        return date
    }

    static func instant(_ seconds: Int) -> String { RFC3339.format(Date(timeIntervalSince1970: Double(seconds))) }

    static func json(_ point: StatsPoint) -> JSONValue {
        .object([
            ("t", .string(instant(point.t))), ("hits", .int(point.hits)), ("misses", .int(point.misses)),
            ("stale", .int(point.stale)), ("collapsed", .int(point.collapsed)), ("local", .int(point.localHits)),
            ("bypass", .int(point.bypass)),
            ("writes", .int(point.writes)), ("evictions", .int(point.evictions)),
            ("evictions_by_reason", .object([("expired", .int(point.evictedExpired)), ("idle", .int(point.evictedIdle)),
                                             ("size", .int(point.evictedSize)), ("manual", .int(point.evictedManual))])),
            ("tokens_saved", .object([("input", .int(point.inputTokensSaved)), ("output", .int(point.outputTokensSaved))])),
            ("cost_saved", .double(money(point.costSavedNanos))),
            ("bytes", .int(point.storedBytes)), ("entries", .int(point.entries)),
        ])
    }
}
