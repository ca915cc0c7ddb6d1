import Foundation

/// One value handed from the thread that produces it to the one thread that waits for it:
/// a blocking worker waiting for an answer computed on an event loop, a caller waiting for
/// its write's group to commit. The value is set once; `take` blocks until it is (or until
/// the deadline passes).
public final class HandOff<Value: Sendable>: Sendable {
    private let slot = Locked<Value?>(nil)
    // A semaphore, not a condition: the producer may put before the consumer waits.
    private let ready = DispatchSemaphore(value: 0)

    public init() {}

    /// Sets the value and wakes the waiter. Only the first put counts.
    public func put(_ value: Value) {
        let first = slot.withLock { stored in
            guard stored == nil else { return false }
            stored = value
            return true
        }
        if first { ready.signal() }
    }

    /// Waits for the value.
    public func take() -> Value {
        // Noted whether or not the value is there yet: a take on a loop is wrong either way.
        LoopThreads.noteWait("HandOff<\(Value.self)>.take")
        ready.wait()
        ready.signal()  // a second take (there is none today) must not block forever
        return slot.withLock { $0! }
    }

    /// Waits for the value until `deadline`; nil when it passed first.
    public func take(before deadline: DispatchTime) -> Value? {
        LoopThreads.noteWait("HandOff<\(Value.self)>.take(before:)")
        guard ready.wait(timeout: deadline) == .success else { return nil }
        ready.signal()
        return slot.withLock { $0 }
    }
}
