import Foundation
import Locking

/// A fixed set of threads running blocking jobs (database calls, compression) off the event
/// loops. The queue is bounded: when it is full `submit` refuses, and the caller answers
/// 503 rather than letting work pile up without limit.
public final class WorkerPool: Sendable {
    public typealias Job = @Sendable () -> Void

    /// The jobs waiting (from `head` on), and the threads' lifecycle.
    private struct Queue {
        var jobs: [Job?] = []
        var head = 0
        var stopping = false
        var running = 0

        var waiting: Int { jobs.count - head }

        /// Whether a job may be queued now: the pool runs and its queue has room.
        func accepts(maxQueued: Int) -> Bool { !stopping && waiting < maxQueued }

        mutating func next() -> Job? {
            guard head < jobs.count else { return nil }
            let job = jobs[head]
            jobs[head] = nil
            head += 1
            // Compact occasionally so the array does not grow without bound.
            if head > 1024 && head * 2 > jobs.count {
                jobs.removeFirst(head)
                head = 0
            }
            return job
        }
    }

    private let queue = Monitor(Queue())
    private let maxQueued: Int

    public init(threads: Int, maxQueued: Int, name: String = "worker") {
        self.maxQueued = maxQueued
        for index in 0..<threads {
            let thread = Thread { [self] in work() }
            thread.name = "\(name)-\(index)"
            thread.stackSize = 1 << 20
            queue.withLock { $0.running += 1 }
            thread.start()
        }
    }

    /// Jobs waiting for a thread.
    public var queued: Int { queue.withLock { $0.waiting } }

    /// Whether a job submitted now would be refused (the queue full, or the pool stopping).
    public var isFull: Bool { queue.withLock { [maxQueued] in !$0.accepts(maxQueued: maxQueued) } }

    /// Queues `job`; false when the queue is full or the pool is stopping.
    public func submit(_ job: @escaping Job) -> Bool {
        // One waiter woken: the workers are the only ones waiting while the pool runs.
        queue.change(wakingAll: false) { queue in
            guard queue.accepts(maxQueued: maxQueued) else { return false }
            queue.jobs.append(job)
            return true
        }
    }

    /// Runs what is queued, then stops the threads; returns once they have exited.
    public func shutdown() {
        queue.change { $0.stopping = true }
        queue.wait(while: { $0.running > 0 }, then: { _, _ in })
    }

    private func work() {
        while let job = take() { job() }
        queue.change { $0.running -= 1 }
    }

    private func take() -> Job? {
        queue.wait(while: { $0.waiting == 0 && !$0.stopping }) { queue, _ in queue.next() }
    }
}
