import Foundation
import Locking
import Testing

/// A wait that can sleep is counted when, and only when, it runs on a thread marked as an
/// event loop's; the mark is the thread's own.
@Suite struct LoopThreadsTests {
    @Test func waitsAreCountedOnMarkedThreadsOnly() {
        let before = LoopThreads.blockingWaits
        // Unmarked (this test's thread): a hand-off's wait is not counted.
        let ready = HandOff<Int>()
        ready.put(1)
        #expect(ready.take() == 1)
        #expect(!LoopThreads.isCurrent)

        let done = DispatchSemaphore(value: 0)
        let seen = Locked<(marked: Bool, counted: Int)>((false, 0))
        Thread {
            LoopThreads.markCurrent(reportsWaits: false)
            let waited = Monitor(0)
            // Waits (once, with a deadline already past) on a monitor: a loop must never.
            waited.wait(until: Date(), while: { $0 == 0 }, then: { _, _ in })
            seen.withLock { $0 = (LoopThreads.isCurrent, LoopThreads.blockingWaits) }
            done.signal()
        }.start()
        done.wait()
        #expect(seen.value.marked)
        // Other suites run beside this one: at least this thread's wait was counted.
        #expect(seen.value.counted >= before + 1)
        #expect(!LoopThreads.isCurrent, "the mark stays on the thread that made it")
    }
}
