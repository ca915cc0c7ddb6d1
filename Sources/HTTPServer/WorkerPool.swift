import Foundation

/// A fixed set of threads running blocking jobs (database calls, compression) off the event
/// loops. The queue is bounded: when it is full `submit` refuses, and the caller answers
/// 503 rather than letting work pile up without limit.
public final class WorkerPool: @unchecked Sendable {
    // @unchecked: `jobs`, `head` and `stopping` are guarded by `condition`.
    public typealias Job = @Sendable () -> Void

    private let condition = NSCondition()
    private var jobs: [Job?] = []
    private var head = 0
    private var stopping = false
    private var running = 0
    private let maxQueued: Int

    public init(threads: Int, maxQueued: Int, name: String = "worker") {
        self.maxQueued = maxQueued
        for index in 0..<threads {
            let thread = Thread { [self] in work() }
            thread.name = "\(name)-\(index)"
            thread.stackSize = 1 << 20
            condition.withLock { running += 1 }
            thread.start()
        }
    }

    /// Jobs waiting for a thread.
    public var queued: Int { condition.withLock { jobs.count - head } }

    /// Queues `job`; false when the queue is full or the pool is stopping.
    public func submit(_ job: @escaping Job) -> Bool {
        condition.withLock {
            guard !stopping, jobs.count - head < maxQueued else { return false }
            jobs.append(job)
            condition.signal()
            return true
        }
    }

    /// Runs what is queued, then stops the threads; returns once they have exited.
    public func shutdown() {
        condition.withLock {
            stopping = true
            condition.broadcast()
        }
        condition.withLock {
            while running > 0 { condition.wait() }
        }
    }

    private func work() {
        while let job = take() { job() }
        condition.withLock {
            running -= 1
            condition.broadcast()
        }
    }

    private func take() -> Job? {
        condition.withLock {
            while head == jobs.count && !stopping { condition.wait() }
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
}
