import Foundation
import HTTPServer
import Testing
@testable import TeamCache

/// The shared feed pages stay within their bounds however a read-scoped client shapes its
/// questions: every page counted whole, a cap on their number, and none kept past reuse.
@Suite struct FeedPagesTests {
    static func emptyPage() -> HTTPResponse {
        var response = HTTPResponse.json(200, "{\"changes\":[],\"next\":\"0\",\"more\":false}")
        response.headers.add("Cache-Control", "no-store")
        return response
    }

    @Test func pagesAreCountedWholeCappedAndDroppedPastReuse() throws {
        let pages = FeedPages(metrics: nil)
        for cursor in 0..<10_000 {
            let question = FeedPages.Question(namespace: "n", cursor: Int64(cursor), limit: cursor % 7 + 1,
                                              bodies: false, gzip: false)
            pages.keep(question, since: 0, empty: true, response: Self.emptyPage())
        }
        let held = pages.held
        #expect(held.pages <= FeedPages.maxPages && held.pages > 0)
        // An empty page holds ~480 bytes of memory, not its 38 body bytes.
        #expect(held.bytes >= held.pages * FeedPages.pageOverhead, "\(held)")
        Thread.sleep(forTimeInterval: FeedPages.reuseFor + 0.1)
        pages.keep(FeedPages.Question(namespace: "n", cursor: -1, limit: 1, bodies: false, gzip: false), since: 0,
                   empty: true, response: Self.emptyPage())
        #expect(pages.held.pages == 1, "pages past their reuse window were kept")
    }

    /// A follower woken by a write's notification before the writer here noted its change
    /// (the writer's thread still on its way back from the commit) reads a page that looks
    /// stale once the note lands. The next follower reads again, noting the change count as
    /// its read begins, and the rest share that page: 2 reads, not one per follower (CI under
    /// load once: 40 reads for 40 followers, every page noted as of the wake-up).
    @Test func aPageReadAfterTheWritersNoteIsShared() throws {
        let pages = FeedPages(metrics: nil)
        let waiters = Waiters(capacity: 10, metrics: nil)
        waiters.setListener(up: true)
        let question = FeedPages.Question(namespace: "n", cursor: 5, limit: 10, bodies: false, gzip: false)
        let woken = waiters.now
        // The first follower reads; meanwhile the writer notes its change.
        guard case .read(let since, let local) = pages.answer(question, waiters: waiters, since: woken) else {
            Issue.record("the first follower found a page to share")
            return
        }
        pages.noteLocalChange("n")
        pages.keep(question, since: since, localSince: local, empty: false, response: Self.emptyPage())
        // Its page predates the note: the second follower reads again...
        guard case .read(let since2, let local2) = pages.answer(question, waiters: waiters, since: woken) else {
            Issue.record("a page read before a local change was shared")
            return
        }
        #expect(local2 > local)
        pages.keep(question, since: since2, localSince: local2, empty: false, response: Self.emptyPage())
        // ...and every follower after it shares that read, woken as early as they were.
        for _ in 0..<38 {
            guard case .shared = pages.answer(question, waiters: waiters, since: woken) else {
                Issue.record("a follower read again after a read that saw the change")
                return
            }
        }
    }

    /// A page read while numbering was behind says so to every follower it is shared with:
    /// each asks again soon. (Told "not behind", the followers woken by one write waited for a
    /// notification that had come already: CI once answered 1 of 40 in 15 s.)
    @Test func aSharedPageReadWhileNumberingWasBehindSaysSo() throws {
        let pages = FeedPages(metrics: nil)
        let waiters = Waiters(capacity: 10, metrics: nil)
        waiters.setListener(up: true)
        let question = FeedPages.Question(namespace: "n", cursor: 5, limit: 10, bodies: false, gzip: false)
        guard case .read(let since, let local) = pages.answer(question, waiters: waiters, since: waiters.now) else {
            Issue.record("the first follower found a page to share")
            return
        }
        pages.keep(question, since: since, localSince: local, empty: true, response: Self.emptyPage(), behind: true)
        guard case .shared(let empty, let behind, _) = pages.answer(question, waiters: waiters, since: waiters.now) else {
            Issue.record("the page read while behind was not shared with the followers reading together")
            return
        }
        #expect(empty && behind)
    }
}
