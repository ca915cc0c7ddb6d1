import Locking
import Synchronization

/// An HTTP/1.1 client whose calls run on event loops the caller already has: non-blocking
/// sockets watched by the loop (no thread per call), TLS through OpenSSL, keep-alive pools per
/// loop and origin, a deadline for each phase, DNS on a small queue of its own.
///
/// Start a call on a loop's thread with `call(_:to:tls:on:delegate:)`; everything about it
/// then happens on that loop.
public final class HTTPClient: Sendable {
    public struct Configuration: Sendable {
        /// Connections open to one origin from one loop; calls past it wait for one.
        public var maxConnectionsPerOrigin = 4096
        /// Calls waiting for a connection to one origin on one loop; past it they fail.
        public var maxWaitingPerOrigin = 4096
        /// Idle connections kept per origin and loop.
        public var maxIdlePerOrigin = 64
        /// How long an idle connection is kept (seconds).
        public var idleLifetime: Double = 20
        /// Bounds of a response head.
        public var headBytes = 64 * 1024
        public var headerCount = 128
        /// How long a resolved address is used (seconds).
        public var dnsLifetime: Double = 30
        public init() {}
    }

    public let configuration: Configuration
    let resolver: Resolver
    private let loops = Locked<[ObjectIdentifier: LoopBound<LoopClient>]>([:])
    private let sockets = Atomic<Int>(0)
    private let opened = Atomic<Int>(0)
    private let contexts = Locked<[String: TLSContext]>([:])

    public init(configuration: Configuration = Configuration()) {
        self.configuration = configuration
        self.resolver = Resolver(lifetime: configuration.dnsLifetime)
    }

    /// Starts `request` to `origin` on `reactor` (call on its thread). `tls` is required for
    /// an `https` origin. The delegate hears back on the same loop, never before this returns.
    @discardableResult
    public func call(_ request: ClientRequest, to origin: Origin, tls: TLSContext? = nil, on reactor: any Reactor,
                     delegate: any HTTPCallDelegate) -> HTTPCall {
        loopClient(for: reactor).call(request, to: origin, tls: tls, delegate: delegate)
    }

    /// A verifying TLS context for `caFile` (nil: the system store), made once and shared.
    public func tlsContext(caFile: String?) throws(HTTPClientError) -> TLSContext {
        let key = caFile ?? ""
        if let known = contexts.withLock({ $0[key] }) { return known }
        let made = try TLSContext(caFile: caFile)
        return contexts.withLock { contexts in
            if let raced = contexts[key] { return raced }
            contexts[key] = made
            return made
        }
    }

    /// Sockets open now (connecting, busy or idle), on every loop.
    public var openSockets: Int { sockets.load(ordering: .relaxed) }
    /// Sockets opened since the start (a count of connections made; reuse keeps it still).
    public var socketsOpened: Int { opened.load(ordering: .relaxed) }

    func noteOpened() {
        sockets.add(1, ordering: .relaxed)
        opened.add(1, ordering: .relaxed)
    }

    func noteClosed() { sockets.subtract(1, ordering: .relaxed) }

    func limits(bodyBytes: Int) -> ResponseParser.Limits {
        var limits = ResponseParser.Limits()
        limits.headBytes = configuration.headBytes
        limits.headerCount = configuration.headerCount
        limits.bodyBytes = bodyBytes
        return limits
    }

    private func loopClient(for reactor: any Reactor) -> LoopClient {
        let key = ObjectIdentifier(reactor)
        if let known = loops.withLock({ $0[key] }) { return known.value }
        let made = LoopClient(reactor: reactor, client: self)
        loops.withLock { $0[key] = LoopBound(made, on: reactor) }
        return made
    }
}
