import Foundation
@testable import Locking
import Testing

/// A wait that can sleep is counted when, and only when, it runs on a thread marked as an
/// event loop's; the mark is the thread's own. (The count is the process's: no other test
/// waits on a loop thread, which the suite holds, so it moves only with this test's waits.)
@Suite struct LoopThreadsTests {
    @Test func waitsAreCountedOnMarkedThreadsOnly() {
        let before = LoopThreads.blockingWaits
        // Unmarked (this test's thread): a hand-off's take and a monitor's wait are not counted.
        let ready = HandOff<Int>()
        ready.put(1)
        #expect(ready.take() == 1)
        Monitor(0).wait(until: Date(), while: { $0 == 0 }, then: { _, _ in })
        #expect(!LoopThreads.isCurrent)
        #expect(LoopThreads.blockingWaits == before)

        let done = DispatchSemaphore(value: 0)
        let seen = Locked<(marked: Bool, counted: Int)>((false, 0))
        Thread {
            LoopThreads.markCurrent(reportsWaits: false)
            // One wait on a monitor (its deadline already past), counted once however often
            // it wakes; one take of a value already there, counted too: a loop must do neither.
            Monitor(0).wait(until: Date().addingTimeInterval(0.05), while: { $0 == 0 }, then: { _, _ in })
            let handed = HandOff<Int>()
            handed.put(2)
            _ = handed.take()
            seen.withLock { $0 = (LoopThreads.isCurrent, LoopThreads.blockingWaits) }
            done.signal()
        }.start()
        done.wait()
        #expect(seen.value.marked)
        #expect(seen.value.counted == before + 2)
        #expect(!LoopThreads.isCurrent, "the mark stays on the thread that made it")
    }

    /// A process out of thread-specific keys gets none: nothing is marked or counted, and
    /// nothing traps.
    @Test func noKeyLeftMeansNoMarks() {
        #expect(LoopThreads.makeKey { _ in EAGAIN } == nil)
        #expect(LoopThreads.makeKey { pthread_key_create($0, nil) } != nil)
    }
}
