import Foundation
import Observability

/// A long-running part of the process (listener, access-tracker flusher, eviction job).
public protocol Service: AnyObject, Sendable {
    var name: String { get }
    func start() throws
    /// Returns once the service has stopped (a flusher flushes one last time).
    func stop()
}

/// Starts services in order and stops them in reverse order, on SIGTERM/SIGINT or `stop()`.
public final class ServiceGroup: @unchecked Sendable {
    // @unchecked: `started` is guarded by `lock`; the semaphore is thread-safe.
    private let services: [any Service]
    private let lock = NSLock()
    private var started: [any Service] = []
    private let stopRequested = DispatchSemaphore(value: 0)
    private let logger = Logger(component: "lifecycle")

    public init(_ services: [any Service]) {
        self.services = services
    }

    public func start() throws {
        for service in services {
            try service.start()
            lock.withLock { started.append(service) }
        }
    }

    /// Blocks until SIGTERM or SIGINT (or `requestStop()`), then stops everything in order.
    public func runUntilSignalled() {
        let queue = DispatchQueue(label: "signals")
        var sources: [DispatchSourceSignal] = []
        for signalNumber in [SIGTERM, SIGINT] {
            signal(signalNumber, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: queue)
            source.setEventHandler { [stopRequested, logger] in
                logger.info("stopping", [("signal", .int(Int(signalNumber)))])
                stopRequested.signal()
            }
            source.resume()
            sources.append(source)
        }
        stopRequested.wait()
        stopAll()
        sources.forEach { $0.cancel() }
    }

    public func requestStop() { stopRequested.signal() }

    public func stopAll() {
        let running = lock.withLock {
            let list = started
            started = []
            return list
        }
        for service in running.reversed() {
            service.stop()
            logger.info("stopped", [("service", .string(service.name))])
        }
    }
}

/// Runs `work` every `interval` (± `jitter`, so replicas do not act in lockstep) on its own
/// thread, and once more when stopped if `runOnStop`.
public final class PeriodicService: Service, @unchecked Sendable {
    // @unchecked: `stopping` and `thread` are guarded by `condition`.
    public let name: String
    private let interval: TimeInterval
    private let jitter: Double
    private let runOnStop: Bool
    private let work: @Sendable () -> Void
    private let condition = NSCondition()
    private var stopping = false
    private var running = false
    private var wakeEarly = false

    public init(name: String, interval: TimeInterval, jitter: Double = 0, runOnStop: Bool = false,
                work: @escaping @Sendable () -> Void) {
        self.name = name
        self.interval = interval
        self.jitter = jitter
        self.runOnStop = runOnStop
        self.work = work
    }

    public func start() throws {
        condition.withLock { running = true }
        let thread = Thread { [self] in loop() }
        thread.name = name
        thread.start()
    }

    /// Runs the work now rather than at the next tick (e.g. a batch filled up).
    public func trigger() {
        condition.withLock {
            wakeEarly = true
            condition.signal()
        }
    }

    public func stop() {
        condition.withLock {
            stopping = true
            condition.broadcast()
            while running { condition.wait() }
        }
        if runOnStop { work() }
    }

    private func loop() {
        while true {
            let spread = interval * jitter
            let wait = interval + Double.random(in: -spread...max(spread, 0))
            let deadline = Date().addingTimeInterval(wait)
            let stop = condition.withLock {
                while !stopping && !wakeEarly && condition.wait(until: deadline) {}
                wakeEarly = false
                return stopping
            }
            if stop { break }
            work()
        }
        condition.withLock {
            running = false
            condition.broadcast()
        }
    }
}
