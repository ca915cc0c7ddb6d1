import CacheCore
import Foundation
import HTTPServer
import Observability

/// Feed pages answered lately, shared by followers that ask the same question: many devices
/// long-polling one namespace are woken together by one write and ask from the same cursor
/// (a page's `next` is its last change, so caught-up followers converge on it). One of them
/// reads the database while the others wait for that read; a page is then reused while no
/// key of the namespace has changed since its read began (the waiters' wake-up count says
/// so, and only while the key listener is up: otherwise a change could go unheard), for at
/// most `reuseFor` (a trim raises floors without a notification).
///
/// Bounded: a page is counted whole (body, head, question and the table's own overhead: an
/// empty page once counted as its 38 body bytes held about 480), pages over `pageLimit`
/// bytes are not kept, at most `maxPages` are, and past `byteBudget` the table starts over.
/// Pages past their reuse window are dropped whenever a page is kept. A read-scoped client
/// chooses the question (cursor, limit, bodies, encoding), so these bounds are what keeps it
/// from filling memory. A follower waits for another's read at most `joinFor`, then reads itself.
final class FeedPages: @unchecked Sendable {
    // @unchecked: `pages`, `bytes` and `reading` are guarded by `state`.
    /// A page as a follower asks for it (`gzip`: whether its answer is compressed).
    struct Question: Hashable, Sendable {
        let namespace: String
        let cursor: Int64
        let limit: Int
        let bodies: Bool
        let gzip: Bool
    }

    struct Page {
        let since: UInt64
        let readAt: TimeInterval
        let empty: Bool
        let response: HTTPResponse
        /// What it holds in memory, as counted against `byteBudget`.
        let cost: Int
        /// How long it may be reused (shorter for a page read while numbering was behind).
        let window: TimeInterval
        /// This process's own change count noted before the read (`localNow`).
        let localSince: UInt64
    }

    static let pageLimit = 1 << 20
    static let byteBudget = 32 << 20
    static let maxPages = 4096
    /// A page's memory beside its body and head: the table's entry, the question, the
    /// response's and the page's own storage (measured at ~480 bytes for an empty page).
    static let pageOverhead = 512
    static let reuseFor: TimeInterval = 1
    static let behindReuseFor: TimeInterval = 0.1
    static let joinFor: TimeInterval = 2

    private let state = NSCondition()
    /// Changes this process made, by namespace (guarded by `state`): a page read before one
    /// is not reused, even before the change's notification comes back (which the waiters'
    /// count hears later; counting our own changes there too woke followers twice and made
    /// every follower's page look stale).
    private var local = RecentChanges(bound: 4096)
    private var pages: [Question: Page] = [:]
    private var bytes = 0
    private var reading: Set<Question> = []
    private let answered: CounterFamily?

    init(metrics: MetricsRegistry?) {
        answered = metrics?.counter("teamcache_feed_pages_total",
                                    "Change feed pages by where they came from: the database, or a read shared with followers asking the same.",
                                    labels: ["source"])
    }

    /// A page for `question`, from the table or from another follower's read of it (waited
    /// for, briefly); nil: the caller reads, and must then call `keep` or `abandon`.
    func answer(_ question: Question, waiters: Waiters?) -> (empty: Bool, response: HTTPResponse)? {
        guard let waiters, waiters.listenerUp else { return nil }
        let deadline = Date().addingTimeInterval(Self.joinFor)
        state.lock()
        defer { state.unlock() }
        while true {
            if let page = pages[question], ProcessInfo.processInfo.systemUptime - page.readAt < page.window,
               !waiters.changed(question.namespace, since: page.since),
               !local.changed(question.namespace, [], since: page.localSince) {
                answered?.inc(["shared"])
                return (page.empty, page.response)
            }
            guard reading.contains(question) else {
                reading.insert(question)
                return nil
            }
            if !state.wait(until: deadline) { return nil }
        }
    }

    /// Keeps a page read from the database (`since`: the wake-up count noted before the read)
    /// and wakes the followers waiting for it.
    /// A page read while numbering was behind (`behind`) is shared only by the followers
    /// reading together (`behindReuseFor`): asked again a moment later, it may have grown.
    func keep(_ question: Question, since: UInt64, localSince: UInt64 = 0, empty: Bool, response: HTTPResponse,
              behind: Bool = false) {
        answered?.inc(["database"])
        state.lock()
        defer {
            state.broadcast()
            state.unlock()
        }
        reading.remove(question)
        let cost = Self.cost(question, response)
        guard cost <= Self.pageLimit else { return }
        let now = ProcessInfo.processInfo.systemUptime
        // Pages no follower may reuse any more go first; then, if still over, all of them.
        if !pages.isEmpty {
            pages = pages.filter { now - $0.value.readAt < $0.value.window }
            bytes = pages.values.reduce(0) { $0 + $1.cost }
        }
        if bytes + cost > Self.byteBudget || pages.count >= Self.maxPages {
            pages = [:]
            bytes = 0
        }
        let page = Page(since: since, readAt: now, empty: empty, response: response, cost: cost,
                        window: behind ? Self.behindReuseFor : Self.reuseFor, localSince: localSince)
        if let old = pages.updateValue(page, forKey: question) { bytes -= old.cost }
        bytes += cost
    }

    /// A page's memory as counted: body, head fields, the question's namespace and the overhead.
    static func cost(_ question: Question, _ response: HTTPResponse) -> Int {
        var head = 0
        for (name, value) in response.headers { head += name.utf8.count + value.utf8.count + 32 }
        return response.body.count + head + question.namespace.utf8.count + pageOverhead
    }

    /// Pages kept, and their bytes as counted (for tests and gauges).
    var held: (pages: Int, bytes: Int) {
        state.lock()
        defer { state.unlock() }
        return (pages.count, bytes)
    }

    /// This process's own change count: note it before a read.
    var localNow: UInt64 {
        state.lock()
        defer { state.unlock() }
        return local.count
    }

    /// A change this process made to `namespace` (before its answer).
    func noteLocalChange(_ namespace: String) {
        state.lock()
        local.record(namespace, nil)
        state.unlock()
    }

    /// The read failed: the next follower reads for itself.
    func abandon(_ question: Question) {
        state.lock()
        reading.remove(question)
        state.broadcast()
        state.unlock()
    }
}
