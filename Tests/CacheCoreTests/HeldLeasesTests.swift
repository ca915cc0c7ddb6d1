@testable import CacheCore
import Testing

/// The memo of held leases: never says "held" past a lease's end or after a forget, and
/// stays within its capacity.
@Suite struct HeldLeasesTests {
    @Test func heldUntilItRunsOutOrIsForgotten() throws {
        let held = HeldLeases(capacity: 4)
        held.note("a", [1], seconds: 30)
        held.note("a", [2], seconds: 0)
        #expect(held.isHeld("a", [1]))
        #expect(!held.isHeld("a", [2]), "a lease of 0 s has run out")
        #expect(!held.isHeld("b", [1]))
        held.forget("a", [1])
        #expect(!held.isHeld("a", [1]))
        held.note("a", [1], seconds: 30)
        held.note("a", [3], seconds: 30)
        held.note("b", [1], seconds: 30)
        held.forget("a", nil)
        #expect(!held.isHeld("a", [1]) && !held.isHeld("a", [3]) && held.isHeld("b", [1]))
        held.forgetAll()
        #expect(held.count == 0 && !held.isHeld("b", [1]))
    }

    @Test func staysWithinItsCapacity() throws {
        let held = HeldLeases(capacity: 3)
        for byte in UInt8(0)..<10 { held.note("n", [byte], seconds: 30) }
        #expect(held.count == 3)
        #expect(held.isHeld("n", [0]) && !held.isHeld("n", [9]))
        // A key already noted may be renewed when full.
        held.note("n", [0], seconds: 60)
        #expect(held.count == 3 && held.isHeld("n", [0]))
        // Expired keys make room (pruned on the next note when full).
        let short = HeldLeases(capacity: 2)
        short.note("n", [1], seconds: 0)
        short.note("n", [2], seconds: 0)
        short.note("n", [3], seconds: 30)
        #expect(short.isHeld("n", [3]))
    }
}
