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

/// glibc's heap in use (the program's bytes, small and mapped), as `/metrics` reports it.
func heapInUse() -> Int {
    let info = mallinfo2()
    return Int(info.uordblks) + Int(info.hblkhd)
}
