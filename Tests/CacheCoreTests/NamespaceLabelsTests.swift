@testable import CacheCore
import CLinux
import Testing

/// Namespace labels stay within their caps however provisional ones come to hold entries.
@Suite struct NamespaceLabelsTests {
    @Test func promotionNeverPassesTheCap() {
        var labels = NamespaceLabels(capacity: 3, provisionalCapacity: 2)
        for name in ["a", "b", "c"] { labels.admit(name) }
        labels.admitProvisionally("p1")
        labels.admitProvisionally("p2")
        labels.admitProvisionally("p3")  // past the provisional cap
        #expect(labels.holds("p1") && labels.holds("p2") && !labels.holds("p3"))
        // The real labels are full: a provisional one that comes to hold entries stays provisional.
        labels.admit("p1")
        labels.admitProvisionally("p4")
        #expect(!labels.holds("p4"), "a promoted label freed a provisional place past the cap")
        labels.learn(["x", "y", "z"])
        #expect(!labels.holds("x") && labels.known.count <= labels.totalCapacity)
    }
}
