@testable import CacheCore
import CLinux
import Testing

/// The memo of held leases: never says "held" past a lease's end or after a forget, and
/// stays within its capacity.
@Suite struct HeldLeasesTests {
    @Test func heldUntilItRunsOutOrIsForgotten() throws {
        let held = HeldLeases(capacity: 4)
        held.note("a", [1], seconds: 30, since: held.generation)
        held.note("a", [2], seconds: 0, since: held.generation)
        #expect(held.isHeld("a", [1]))
        #expect(!held.isHeld("a", [2]), "a lease of 0 s has run out")
        #expect(!held.isHeld("b", [1]))
        held.forget("a", [1])
        #expect(!held.isHeld("a", [1]))
        held.note("a", [1], seconds: 30, since: held.generation)
        held.note("a", [3], seconds: 30, since: held.generation)
        held.note("b", [1], seconds: 30, since: held.generation)
        held.forget("a", nil)
        #expect(!held.isHeld("a", [1]) && !held.isHeld("a", [3]) && held.isHeld("b", [1]))
        held.forgetAll()
        #expect(held.count == 0 && !held.isHeld("b", [1]))
    }

    @Test func staysWithinItsCapacity() throws {
        let held = HeldLeases(capacity: 3)
        for byte in UInt8(0)..<10 { held.note("n", [byte], seconds: 30, since: held.generation) }
        #expect(held.count == 3)
        #expect(held.isHeld("n", [0]) && !held.isHeld("n", [9]))
        // A key already noted may be renewed when full.
        held.note("n", [0], seconds: 60, since: held.generation)
        #expect(held.count == 3 && held.isHeld("n", [0]))
        // Expired keys make room (pruned on the next note when full).
        let short = HeldLeases(capacity: 2)
        short.note("n", [1], seconds: 0, since: short.generation)
        short.note("n", [2], seconds: 0, since: short.generation)
        short.note("n", [3], seconds: 30, since: short.generation)
        #expect(short.isHeld("n", [3]))
    }

    /// A forget between asking the database and noting its answer wins: the answer is dropped.
    @Test func aForgetWhileTheDatabaseAnswersWins() {
        let held = HeldLeases()
        let before = held.generation
        held.forget("n", [1])  // the release notification arrives first
        held.note("n", [1], seconds: 30, since: before)
        #expect(!held.isHeld("n", [1]))
        held.note("n", [1], seconds: 30, since: held.generation)
        #expect(held.isHeld("n", [1]))
        // A forget of another key does not drop this key's note; of its namespace it does.
        let again = held.generation
        held.forget("n", [2])
        held.note("n", [3], seconds: 30, since: again)
        #expect(held.isHeld("n", [3]))
        let third = held.generation
        held.forget("n", nil)
        held.note("n", [4], seconds: 30, since: third)
        #expect(!held.isHeld("n", [4]))
    }
}

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

/// glibc's heap in use (the program's bytes, small and mapped), as `/metrics` reports it.
private func heapInUse() -> Int {
    let info = mallinfo2()
    return Int(info.uordblks) + Int(info.hblkhd)
}
