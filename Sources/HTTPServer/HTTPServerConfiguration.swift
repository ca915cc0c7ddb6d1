import Foundation

/// Everything the HTTP layer can be tuned with; the defaults suit a shared production cache.
public struct HTTPServerConfiguration: Sendable {
    public var host = "127.0.0.1"
    /// 0 picks a free port (tests).
    public var port = 8080
    /// One epoll loop per core.
    public var eventLoops = ProcessInfo.processInfo.activeProcessorCount
    /// Threads for blocking handlers; about the database pool's size is right.
    public var workerThreads = 32
    /// Handler jobs waiting for a worker before new ones are refused with 503.
    public var maxQueuedJobs = 4096
    public var limits = HTTPParserLimits()
    /// Request bodies being received at once, over every connection, in bytes; a body that
    /// would pass it is refused with 503 (memory stays bounded whatever clients send).
    public var bodyBudgetBytes = 256 * 1024 * 1024
    /// A request whose credentials the precheck could not verify on the loop (a token not
    /// seen yet) has them verified on a worker before a body larger than this is read.
    public var unverifiedBodyLimit = 64 * 1024
    /// The most body bytes of such requests one client address may have in flight (smaller
    /// bodies read before their verification): 1/64 of the budget, at least 4 such bodies.
    public var unverifiedShareBytes: Int { max(4 * unverifiedBodyLimit, bodyBudgetBytes / 64) }
    /// From the first byte of a request until its head is complete (slowloris); also how
    /// long a new connection may stay silent before its first byte (well under the idle
    /// timeout: a connection that never spoke is only a cost).
    public var headerTimeout: TimeInterval = 10
    /// From the end of the head until the body is complete.
    public var bodyTimeout: TimeInterval = 60
    /// An open keep-alive connection with no request.
    public var idleTimeout: TimeInterval = 75
    /// From the start of a response until the client has read all of it (a total: a client
    /// reading a byte a minute does not restart it).
    public var writeTimeout: TimeInterval = 60
    /// From the end of a request's head until its answer is queued, waiting for a worker
    /// included; past it the client gets 503 and the handler's late answer is dropped.
    public var requestTimeout: TimeInterval = 5
    public var maxConnections = 20_000
    /// Open connections one client address may hold (past it: 503 and closed), so a single
    /// client cannot take every slot of `maxConnections` and keep them for the idle timeout.
    /// 0: no limit (behind a proxy every client has the proxy's address).
    public var maxConnectionsPerClient = 1_000
    /// Requests served on one connection before it is closed (0: no limit).
    public var maxRequestsPerConnection = 100_000
    /// How long in-flight requests may take to finish at shutdown.
    public var shutdownGracePeriod: TimeInterval = 10
    /// How long a streamed answer may send nothing while its client has read all of it,
    /// before the connection is closed (its producer is told, `ResponseStream.whenClosed`).
    public var streamIdleTimeout: TimeInterval = 60
    /// Unread bytes a streamed answer holds at most before its producer is asked to pause
    /// (`ResponseStream.isWritable`).
    public var streamBufferBytes = 256 * 1024
    /// The `Server` header's value.
    public var serverName = "http-server"
    /// Put before every metric name the server registers (`http_requests_total` and the
    /// rest): the application's namespace, with its underscore (TeamCache's: `teamcache_`).
    public var metricPrefix = ""
    /// Where the problem types of this application's errors point, ending in `/`
    /// (TeamCache's: `https://teamcache.dev/problems/`); empty: `about:blank`, or the base
    /// another server of the process named (see `ProblemTypes`).
    public var problemTypeBase = ""
    /// Each accepted socket's send buffer in bytes (`SO_SNDBUF`, which the kernel doubles and
    /// then stops tuning); 0 leaves the kernel's own. Tests make it small to see a full socket.
    public var socketSendBuffer = 0

    public init() {}
}
