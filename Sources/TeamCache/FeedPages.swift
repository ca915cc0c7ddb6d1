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
/// Bounded: pages over `pageLimit` bytes are not kept, and past `byteBudget` the table starts
/// over. A follower waits for another's read at most `joinFor`, then reads itself.
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
    }

    static let pageLimit = 1 << 20
    static let byteBudget = 32 << 20
    static let reuseFor: TimeInterval = 1
    static let joinFor: TimeInterval = 2

    private let state = NSCondition()
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
            if let page = pages[question], ProcessInfo.processInfo.systemUptime - page.readAt < Self.reuseFor,
               !waiters.changed(question.namespace, since: page.since) {
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
    func keep(_ question: Question, since: UInt64, empty: Bool, response: HTTPResponse) {
        answered?.inc(["database"])
        state.lock()
        defer {
            state.broadcast()
            state.unlock()
        }
        reading.remove(question)
        guard response.body.count <= Self.pageLimit else { return }
        if bytes + response.body.count > Self.byteBudget {
            pages = [:]
            bytes = 0
        }
        let page = Page(since: since, readAt: ProcessInfo.processInfo.systemUptime, empty: empty, response: response)
        if let old = pages.updateValue(page, forKey: question) { bytes -= old.response.body.count }
        bytes += response.body.count
    }

    /// The read failed: the next follower reads for itself.
    func abandon(_ question: Question) {
        state.lock()
        reading.remove(question)
        state.broadcast()
        state.unlock()
    }
}
