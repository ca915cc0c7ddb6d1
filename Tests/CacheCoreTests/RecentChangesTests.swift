@testable import CacheCore
import CLinux
import Testing

/// The shared memory of recent changes: a change after a noted count is seen; one before
/// is not; a namespace-wide change counts for its keys; past the bound, "changed" is safe.
@Suite struct RecentChangesTests {
    @Test func answersWhetherAKeyChangedSinceANotedCount() {
        var changes = RecentChanges(bound: 3)
        changes.record("n", [1])
        let noted = changes.count
        #expect(!changes.changed("n", [1], since: noted))
        changes.record("n", [2])
        #expect(!changes.changed("n", [1], since: noted) && changes.changed("n", [2], since: noted))
        changes.record("m", nil)
        #expect(changes.changed("m", [9], since: noted) && !changes.changed("o", [9], since: noted))
        let later = changes.count
        changes.record("x", [1])  // the fourth key: the table resets
        #expect(changes.changed("n", [1], since: later), "a question from before a reset is answered safely")
        let now = changes.count
        changes.recordEverything()
        #expect(changes.changed("z", [1], since: now))
    }

    /// Keys are remembered by hash: 99,000 changes of 512-byte keys (a notification burst an
    /// idle replica once paid 46 MB for) hold a few MB, and answers stay exact for them.
    @Test func manyLongKeysCostLittleMemory() {
        let before = heapInUse()
        var changes = RecentChanges(bound: 100_000)
        let noted = changes.count
        for index in 0..<99_000 {
            var key = [UInt8](repeating: 0x61, count: 512)
            withUnsafeBytes(of: index) { key.replaceSubrange(0..<8, with: $0) }
            changes.record("ns", key)
        }
        let grown = heapInUse() - before
        #expect(grown < 8 << 20, "99,000 long keys took \(grown >> 20) MiB")
        var probe = [UInt8](repeating: 0x61, count: 512)
        withUnsafeBytes(of: 42) { probe.replaceSubrange(0..<8, with: $0) }
        #expect(changes.changed("ns", probe, since: noted))
        #expect(!changes.changed("ns", [UInt8](repeating: 0x62, count: 512), since: changes.count - 1))
        #expect(changes.remembered == 99_000)
    }
}
