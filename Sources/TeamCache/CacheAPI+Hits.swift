import CacheCore
import CacheStore
import Foundation
import HTTPServer

/// The one hit decision of the two read routes (a raw GET and a descriptor lookup): whether
/// what was read answers, how it is counted, and whether a refresh lease goes with it. Each
/// route only renders its own answer (headers and bytes, or JSON).
extension CacheAPI {
    /// What a read route knows when its entry has been read.
    struct HitQuestion: Sendable {
        let namespace: Namespace
        let key: EntryKey
        /// How stale an answer the caller accepts (nil: none; `Int.max`: any).
        let maxStale: Int?
        /// A refresh lease may go with an answer in its stale-while-revalidate window (not to a
        /// HEAD, nor to a caller that takes only cached answers: neither will refresh anything).
        let mayRefresh: Bool
        /// The refresh lease's length the request asked for (nil: the default).
        let leaseSeconds: Int?
        let holder: Int64?
        /// The answer comes from waiting for another caller's fill.
        let collapsed: Bool
        /// Counted in the stats (false for a watch: its 304s and updates spare no model call).
        var counted = true
    }

    /// Renders a route's hit: the entry, its freshness now, whether it was collapsed, and the
    /// refresh lease handed out with it (nil: none).
    typealias HitRenderer = @Sendable (StoredEntry, Freshness, _ collapsed: Bool, _ refresh: Lease?) throws -> HTTPResponse

    /// A route's renderer as a value: a hit answered now renders without a closure context on
    /// the heap (one allocation a hit); only a refresh, answered later, captures it.
    protocol HitRendering: Sendable {
        func render(_ entry: StoredEntry, _ freshness: Freshness, collapsed: Bool, refresh: Lease?) throws -> HTTPResponse
    }

    /// A closure as a renderer (the routes whose hits allocate anyway).
    struct RenderingClosure: HitRendering {
        let closure: HitRenderer
        func render(_ entry: StoredEntry, _ freshness: Freshness, collapsed: Bool, refresh: Lease?) throws -> HTTPResponse {
            try closure(entry, freshness, collapsed, refresh)
        }
    }

    /// The read's answer when `entry` answers it: fresh, stale within `maxStale`, or in its
    /// revalidate window (then with a refresh lease for one caller, which may block, so it is
    /// a `.blocking` step). nil when it does not (absent, or expired past what is accepted):
    /// the route then answers a miss and counts it. A hit is counted once, as it is answered.
    func hitStep(_ entry: StoredEntry?, _ question: HitQuestion, now: Date, render: @escaping HitRenderer) throws
        -> ReadAnswer? {
        try hitStep(entry, question, now: now, rendering: RenderingClosure(closure: render))
    }

    func hitStep(_ entry: StoredEntry?, _ question: HitQuestion, now: Date, rendering: some HitRendering) throws
        -> ReadAnswer? {
        guard let entry else { return nil }
        let freshness = Freshness.of(entry, now: now, maxStale: question.maxStale)
        switch freshness {
        case .expired:
            return nil
        case .revalidate where question.mayRefresh:
            return try revalidateStep(question.namespace, question.key, lease: question.leaseSeconds,
                                      holder: question.holder) { [self] lease in
                countHit(entry, freshness, question, now: now)
                return try rendering.render(entry, freshness, collapsed: question.collapsed, refresh: lease)
            }
        case .fresh, .stale, .revalidate:
            countHit(entry, freshness, question, now: now)
            let response = try rendering.render(entry, freshness, collapsed: question.collapsed, refresh: nil)
            if question.collapsed { waiters?.count("filled") }
            return .response(response)
        }
    }

    /// A stale answer (past expiry, in a window or within `max-stale`) is counted stale; a
    /// fresh one a hit, or a collapsed hit when it waited for the fill.
    private func countHit(_ entry: StoredEntry, _ freshness: Freshness, _ question: HitQuestion, now: Date) {
        guard question.counted else {
            tracker.touch(entry, at: now)
            return
        }
        let lookup: AccessTracker.Lookup = switch freshness {
        case .stale, .revalidate: .stale
        case .fresh, .expired: question.collapsed ? .collapsed : .hit
        }
        tracker.record(lookup, namespace: question.namespace.name, entry: entry, at: now)
    }
}
