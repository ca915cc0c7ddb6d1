import Foundation
import Locking
import Testing

/// The concurrency primitives every lock-guarded and loop-confined type is built on.
@Suite struct LockingTests {
    /// Many threads changing one `Locked` state lose no update (and TSan sees no race).
    @Test func lockedStateLosesNoUpdate() {
        let counter = Locked(0)
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            for _ in 0..<10_000 { counter.withLock { $0 += 1 } }
        }
        #expect(counter.value == 80_000)
    }

    /// A waiter on a `Monitor` wakes when another thread changes what it waits for, and a
    /// wait with a deadline says it timed out.
    @Test func monitorWakesItsWaiterAndTimesOut() {
        let ready = Monitor(false)
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.05) { ready.change { $0 = true } }
        let woken = ready.wait(until: Date().addingTimeInterval(5), while: { !$0 }) { state, timedOut in
            state && !timedOut
        }
        #expect(woken)
        let started = Date()
        let timedOut = Monitor(false).wait(until: Date().addingTimeInterval(0.05), while: { !$0 }) { $1 }
        #expect(timedOut && Date().timeIntervalSince(started) >= 0.05)
    }

    /// A `HandOff` delivers the first value put, whether it is put before or after the take.
    @Test func handOffDeliversTheFirstValue() {
        let early = HandOff<Int>()
        early.put(1)
        early.put(2)
        #expect(early.take() == 1)
        let late = HandOff<String>()
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.05) { late.put("late") }
        #expect(late.take(before: .now() + 5) == "late")
        #expect(HandOff<Int>().take(before: .now() + 0.01) == nil)
    }

    /// A value bound to a loop rides another thread's closure and is read back on its loop.
    @Test func aLoopBoundValueComesBackToItsLoop() {
        let loop = TestLoop()
        let seen = HandOff<[Int]>()
        loop.run {
            let values = NonSendableBox([1, 2, 3])
            let bound = LoopBound(values, on: loop)
            DispatchQueue.global().async {
                // Off the loop: only carried. Back on it: read.
                loop.run { seen.put(bound.value.items) }
            }
        }
        #expect(seen.take(before: .now() + 5) == [1, 2, 3])
        #expect(!loop.inLoop)
    }
}

/// Not Sendable: what a loop-confined type is.
final class NonSendableBox {
    var items: [Int]
    init(_ items: [Int]) { self.items = items }
}

/// A loop of the simplest kind: one serial thread that runs closures in order.
final class TestLoop: ConfiningLoop {
    private let queue = DispatchQueue(label: "test-loop")
    private let key = DispatchSpecificKey<Bool>()

    init() { queue.setSpecific(key: key, value: true) }

    var inLoop: Bool { DispatchQueue.getSpecific(key: key) == true }

    func run(_ work: @escaping @Sendable () -> Void) { queue.async(execute: work) }
}
