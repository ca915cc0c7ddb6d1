import Foundation
import Glibc
import Locking
import Observability

/// The HTTP/1.1 server: one epoll event loop per core, each with its own `SO_REUSEPORT`
/// listener, and a worker pool for blocking handlers. No thread per connection.
public final class HTTPServer: Sendable {
    public let configuration: HTTPServerConfiguration
    private let context: ServerContext
    /// The loops and the port, set by `start` (a lock taken at start, by the metrics collector
    /// and at shutdown: never on a request path).
    private let started = Locked<(loops: [EventLoop], port: Int)>(([], 0))
    private var loops: [EventLoop] { started.value.loops }
    private let onLoopStart: (@Sendable (EventLoop) -> Void)?

    /// `onLoopStart` runs on each loop's thread before it serves: the place to attach
    /// per-loop state (watched descriptors, iteration hooks).
    public init(configuration: HTTPServerConfiguration, routes: [Route], metrics: MetricsRegistry? = nil,
                onLoopStart: (@Sendable (EventLoop) -> Void)? = nil) {
        self.configuration = configuration
        self.onLoopStart = onLoopStart
        if !configuration.problemTypeBase.isEmpty { ProblemTypes.use(base: configuration.problemTypeBase) }
        self.context = ServerContext(configuration: configuration, router: Router(routes), metrics: metrics)
        if let metrics {
            let prefix = configuration.metricPrefix
            let connections = metrics.gauge(prefix + "http_connections", "Open client connections.")
            let queued = metrics.gauge(prefix + "http_worker_queue", "Handler jobs waiting for a worker thread.")
            metrics.addCollector { [context, weak self] in
                connections.set([], Double(context.connectionCount))
                queued.set([], Double(context.workers.queued))
                context.metrics?.publish(self?.loops.map(\.requestStats) ?? [], routeNames: context.routeNames)
            }
        }
    }

    /// The threads that run blocking handler work (a test fills them to see the server refuse).
    public var workers: WorkerPool { context.workers }

    /// How many event loops `start` runs (their `index` is below this).
    public var eventLoopCount: Int { max(1, configuration.eventLoops) }

    /// The port actually listened on (useful with port 0).
    public var port: Int { started.value.port }

    /// Binds the listeners and starts the loops; returns once the server accepts connections.
    public func start() throws {
        signal(SIGPIPE, SIG_IGN)
        MemoryReturn.boundArenas()
        ListeningSocket.raiseFileLimit()
        var port = try ListeningSocket.claim(host: configuration.host, port: configuration.port)
        var loops: [EventLoop] = []
        do {
            for index in 0..<eventLoopCount {
                let (fd, bound) = try ListeningSocket.open(host: configuration.host, port: port)
                port = bound
                do {
                    loops.append(try EventLoop(index: index, listener: fd, context: context))
                } catch {
                    close(fd)
                    throw error
                }
            }
        } catch {
            // Never run: their listeners are closed (a port's other sockets would otherwise keep
            // being handed connections nobody accepts) and their handles (which hold them) let go.
            for loop in loops {
                loop.closeListener()
                loop.releaseHandle()
            }
            throw error
        }
        started.withLock { $0 = (loops, port) }
        for loop in loops {
            let thread = Thread { [onLoopStart] in
                loop.claimThread()
                onLoopStart?(loop)
                loop.run()
            }
            thread.name = "event-loop-\(loop.index)"
            thread.start()
        }
    }

    /// Graceful stop: no new connections, idle ones closed, requests in flight finish within
    /// the grace period, then everything left is closed and the workers stop.
    public func shutdown() {
        // Once: the loops' `finished` signals are taken by the first call (a second would wait
        // out the whole grace period for signals that never come again).
        let loops = started.withLock { state -> [EventLoop] in
            defer { state.loops = [] }
            return state.loops
        }
        for loop in loops { loop.execute { loop.beginDraining() } }
        let deadline = DispatchTime.now() + configuration.shutdownGracePeriod
        var unfinished: [EventLoop] = []
        for loop in loops where loop.finished.wait(timeout: deadline) == .timedOut { unfinished.append(loop) }
        for loop in unfinished {
            loop.execute { loop.closeAll() }
            _ = loop.finished.wait(timeout: .now() + 2)
        }
        context.workers.shutdown()
    }
}
