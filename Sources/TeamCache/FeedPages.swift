import CacheCore
import Foundation
import HTTPServer
import Locking
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
///
/// What a page was read after (the wake-up count, this process's own change count) is noted
/// when its read begins, under the lock, not when its follower was woken: a follower woken by a
/// write's notification before the writer here noted that change (the writer's thread is still
/// on its way back from the commit) reads a page that looks stale the moment the note lands;
/// the follower that reads again then notes a count that includes it, and the rest share that
/// page (noted at wake-up, every follower's page looked stale and 40 followers read 40 times).
final class FeedPages: Sendable {
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
        /// This process's own change count noted before the read.
        let localSince: UInt64
        /// Read while numbering was behind: a follower it answers empty asks again soon,
        /// rather than waiting for a notification that has come already.
        let behind: Bool
    }

    /// What a follower does: answer with a page another read, or read (and then `keep` or
    /// `abandon`), its page valid as of `since` and `localSince` (noted as the read begins).
    enum Answer {
        case shared(empty: Bool, behind: Bool, response: HTTPResponse)
        case read(since: UInt64, localSince: UInt64)
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

    private struct State {
        /// Changes this process made, by namespace: a page read before one is not reused, even
        /// before the change's notification comes back (which the waiters' count hears later;
        /// counting our own changes there too woke followers twice and made every follower's
        /// page look stale).
        var local = RecentChanges(bound: 4096)
        var pages: [Question: Page] = [:]
        var bytes = 0
        var reading: Set<Question> = []

        func reusable(_ question: Question, waiters: Waiters) -> Page? {
            guard let page = pages[question], ProcessInfo.processInfo.systemUptime - page.readAt < page.window,
                  !waiters.changed(question.namespace, since: page.since),
                  !local.changed(question.namespace, [], since: page.localSince) else { return nil }
            return page
        }
    }

    private let state = Monitor(State())
    private let answered: CounterFamily?

    init(metrics: MetricsRegistry?) {
        answered = metrics?.counter(MetricCatalogue.feedPagesTotal)
    }

    /// A page for `question`, from the table or from another follower's read of it (waited
    /// for, briefly); otherwise the caller reads, and must then call `keep` or `abandon`.
    /// `since`: the wake-up count the caller noted when it was woken (the later of it and the
    /// count now is what the page is valid as of). Without the key listener nothing is shared.
    func answer(_ question: Question, waiters: Waiters?, since: UInt64) -> Answer {
        guard let waiters, waiters.listenerUp else {
            return .read(since: since, localSince: state.withLock { $0.local.count })
        }
        let deadline = Date().addingTimeInterval(Self.joinFor)
        return state.wait(until: deadline, while: { state in
            state.reusable(question, waiters: waiters) == nil && state.reading.contains(question)
        }, then: { state, _ in
            if let page = state.reusable(question, waiters: waiters) {
                answered?.inc(["shared"])
                return .shared(empty: page.empty, behind: page.behind, response: page.response)
            }
            // Nobody reading it (or the wait for another's read ran out): this follower reads.
            state.reading.insert(question)
            return .read(since: max(since, waiters.now), localSince: state.local.count)
        })
    }

    /// Keeps a page read from the database (`since`, `localSince`: from `answer`) and wakes the
    /// followers waiting for it.
    /// A page read while numbering was behind (`behind`) is shared only by the followers
    /// reading together (`behindReuseFor`): asked again a moment later, it may have grown.
    func keep(_ question: Question, since: UInt64, localSince: UInt64 = 0, empty: Bool, response: HTTPResponse,
              behind: Bool = false) {
        answered?.inc(["database"])
        let cost = Self.cost(question, response)
        let now = ProcessInfo.processInfo.systemUptime
        state.change { state in
            state.reading.remove(question)
            guard cost <= Self.pageLimit else { return }
            // Pages no follower may reuse any more go first; then, if still over, all of them.
            if !state.pages.isEmpty {
                state.pages = state.pages.filter { now - $0.value.readAt < $0.value.window }
                state.bytes = state.pages.values.reduce(0) { $0 + $1.cost }
            }
            if state.bytes + cost > Self.byteBudget || state.pages.count >= Self.maxPages {
                state.pages = [:]
                state.bytes = 0
            }
            let page = Page(since: since, readAt: now, empty: empty, response: response, cost: cost,
                            window: behind ? Self.behindReuseFor : Self.reuseFor, localSince: localSince,
                            behind: behind)
            if let old = state.pages.updateValue(page, forKey: question) { state.bytes -= old.cost }
            state.bytes += cost
        }
    }

    /// A page's memory as counted: body, head fields, the question's namespace and the overhead.
    static func cost(_ question: Question, _ response: HTTPResponse) -> Int {
        var head = response.renderedFields.count
        for (name, value) in response.headers { head += name.utf8.count + value.utf8.count + 32 }
        return response.body.count + head + question.namespace.utf8.count + pageOverhead
    }

    /// Pages kept, and their bytes as counted (for tests and gauges).
    var held: (pages: Int, bytes: Int) { state.withLock { ($0.pages.count, $0.bytes) } }

    /// A change this process made to `namespace` (before its answer).
    func noteLocalChange(_ namespace: String) {
        state.withLock { $0.local.record(namespace, nil) }
    }

    /// The read failed: the next follower reads for itself.
    func abandon(_ question: Question) {
        state.change { _ = $0.reading.remove(question) }
    }
}
