import Foundation
import Locking
import Observability

/// A long-running part of the process (listener, access-tracker flusher, eviction job).
public protocol Service: AnyObject, Sendable {
    var name: String { get }
    func start() throws
    /// Returns once the service has stopped (a flusher flushes one last time).
    func stop()
}

/// Starts services in order and stops them in reverse order, on SIGTERM/SIGINT or `stop()`.
public final class ServiceGroup: Sendable {
    private let services: [any Service]
    private let started = Locked<[any Service]>([])
    private let stopRequested = DispatchSemaphore(value: 0)
    private let logger = Logger(component: "lifecycle")

    public init(_ services: [any Service]) {
        self.services = services
    }

    public func start() throws {
        for service in services {
            try service.start()
            started.withLock { $0.append(service) }
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
        let running = started.withLock { started in
            defer { started = [] }
            return started
        }
        for service in running.reversed() {
            service.stop()
            logger.info("stopped", [("service", .string(service.name))])
        }
    }
}

/// Runs `work` every `interval` (± `jitter`, so replicas do not act in lockstep) on its own
/// thread, once in `start` if `runOnStart` (what later services need before they start), and
/// once more when stopped if `runOnStop`.
public final class PeriodicService: Service, Sendable {
    public let name: String
    private let interval: TimeInterval
    private let jitter: Double
    private let runOnStart: Bool
    private let runOnStop: Bool
    private let work: @Sendable () -> Void
    /// Run on stop instead of `work` (with `runOnStop`): a last run that must do everything.
    private let finalWork: (@Sendable () -> Void)?
    private let flags = Monitor(Flags())

    private struct Flags {
        var stopping = false
        var running = false
        var wakeEarly = false
    }

    public init(name: String, interval: TimeInterval, jitter: Double = 0, runOnStart: Bool = false,
                runOnStop: Bool = false, finalWork: (@Sendable () -> Void)? = nil,
                work: @escaping @Sendable () -> Void) {
        self.name = name
        self.interval = interval
        self.jitter = jitter
        self.runOnStart = runOnStart
        self.runOnStop = runOnStop
        self.finalWork = finalWork
        self.work = work
    }

    public func start() throws {
        if runOnStart { work() }
        flags.withLock { $0.running = true }
        let thread = Thread { [self] in loop() }
        thread.name = name
        thread.start()
    }

    /// Runs the work now rather than at the next tick (e.g. a batch filled up).
    public func trigger() {
        flags.change { $0.wakeEarly = true }
    }

    public func stop() {
        flags.change { $0.stopping = true }
        flags.wait(while: { $0.running }, then: { _, _ in })
        if runOnStop { (finalWork ?? work)() }
    }

    private func loop() {
        while true {
            let spread = interval * jitter
            let wait = interval + Double.random(in: -spread...max(spread, 0))
            let deadline = Date().addingTimeInterval(wait)
            let stop = flags.wait(until: deadline, while: { !$0.stopping && !$0.wakeEarly }) { flags, _ in
                flags.wakeEarly = false
                return flags.stopping
            }
            if stop { break }
            work()
        }
        flags.change { $0.running = false }
    }
}
