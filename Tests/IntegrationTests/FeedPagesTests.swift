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
}
