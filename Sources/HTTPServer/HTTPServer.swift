import Foundation
import Glibc
import Observability

/// The HTTP/1.1 server: one epoll event loop per core, each with its own `SO_REUSEPORT`
/// listener, and a worker pool for blocking handlers. No thread per connection.
public final class HTTPServer: @unchecked Sendable {
    // @unchecked: `loops`, `threads` and `boundPort` are written once in start() before any
    // other thread can see them, and only read afterwards.
    public let configuration: HTTPServerConfiguration
    private let context: ServerContext
    private var loops: [EventLoop] = []
    private var boundPort = 0
    private let onLoopStart: (@Sendable (EventLoop) -> Void)?

    /// `onLoopStart` runs on each loop's thread before it serves: the place to attach
    /// per-loop state (watched descriptors, iteration hooks).
    public init(configuration: HTTPServerConfiguration, routes: [Route], metrics: MetricsRegistry? = nil,
                onLoopStart: (@Sendable (EventLoop) -> Void)? = nil) {
        self.configuration = configuration
        self.onLoopStart = onLoopStart
        self.context = ServerContext(configuration: configuration, router: Router(routes), metrics: metrics)
        if let metrics {
            let connections = metrics.gauge("teamcache_http_connections", "Open client connections.")
            let queued = metrics.gauge("teamcache_http_worker_queue", "Handler jobs waiting for a worker thread.")
            metrics.addCollector { [context, weak self] in
                connections.set([], Double(context.connectionCount))
                queued.set([], Double(context.workers.queued))
                context.metrics?.publish(self?.loops.map(\.requestStats) ?? [], routeNames: context.routeNames)
            }
        }
    }

    /// How many event loops `start` runs (their `index` is below this).
    public var eventLoopCount: Int { max(1, configuration.eventLoops) }

    /// The port actually listened on (useful with port 0).
    public var port: Int { boundPort }

    /// Binds the listeners and starts the loops; returns once the server accepts connections.
    public func start() throws {
        signal(SIGPIPE, SIG_IGN)
        MemoryReturn.boundArenas()
        ListeningSocket.raiseFileLimit()
        var port = try ListeningSocket.claim(host: configuration.host, port: configuration.port)
        for index in 0..<eventLoopCount {
            let (fd, bound) = try ListeningSocket.open(host: configuration.host, port: port)
            port = bound
            loops.append(try EventLoop(index: index, listener: fd, context: context))
        }
        boundPort = port
        for loop in loops {
            let thread = Thread { [onLoopStart] in
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
