import Locking

/// The client's state on one loop: its pools, the calls whose deadlines it watches, and a
/// read buffer shared by its connections (one loop reads one socket at a time). Loop-confined.
final class LoopClient {
    let reactor: any Reactor
    /// Strong: a client's loops outlive any one call, and a client lives as long as its service.
    let client: HTTPClient
    let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
    private var pools: [PoolKey: OriginPool] = [:]
    private var tracked: [Int: HTTPCall] = [:]
    private var nextID = 0
    private var nextSweep: UInt64 = 0
    private var nextIdleSweep: UInt64 = 0

    struct PoolKey: Hashable {
        let secure: Bool
        let host: String
        let port: Int
        let trust: ObjectIdentifier?
    }

    init(reactor: any Reactor, client: HTTPClient) {
        self.reactor = reactor
        self.client = client
        reactor.onEachIteration { [weak self] in self?.sweepIfDue() }
    }

    deinit { scratch.deallocate() }

    var now: UInt64 { reactor.nanoseconds }

    func call(_ request: ClientRequest, to origin: Origin, tls: TLSContext?, delegate: any HTTPCallDelegate) -> HTTPCall {
        let key = PoolKey(secure: origin.secure, host: origin.host, port: origin.port, trust: tls.map(ObjectIdentifier.init))
        let pool = pools[key] ?? {
            let made = OriginPool(loop: self, origin: origin, tls: tls)
            pools[key] = made
            return made
        }()
        nextID += 1
        let call = HTTPCall(request: request, origin: origin, tls: tls, delegate: delegate, pool: pool, id: nextID)
        if origin.secure && tls == nil {
            failSoon(call, HTTPClientError(.tls, "an https origin needs a TLS context"))
        } else {
            pool.start(call)
        }
        return call
    }

    // MARK: For pools and calls

    func track(_ call: HTTPCall) { tracked[call.id] = call }

    func endTracking(_ call: HTTPCall) { tracked[call.id] = nil }

    /// Fails `call` on the next loop turn: a caller never hears back before `call` returns.
    func failSoon(_ call: HTTPCall, _ error: HTTPClientError) {
        track(call)
        let this = LoopBound(call, on: reactor)
        reactor.execute { if !this.value.isDone { this.value.failed(error) } }
    }

    func resolve(_ origin: Origin, _ done: @escaping (Result<[SocketAddress], HTTPClientError>) -> Void) {
        let back = LoopBound(done, on: reactor)
        let reactor = self.reactor
        client.resolver.resolve(origin.host, port: origin.port, now: now) { result in
            reactor.execute { back.value(result) }
        }
    }

    // MARK: Deadlines

    /// Every 50 ms at most (the loop turns at least every 250 ms): calls past their phase's
    /// deadline fail; idle connections past their lifetime close, once a second.
    private func sweepIfDue() {
        let now = self.now
        guard now >= nextSweep else { return }
        nextSweep = now + 50_000_000
        for call in tracked.values where call.deadline <= now && !call.isDone {
            // A paused reader is the caller's slowness, not the upstream's (but not for ever).
            if call.phase == .readingBody && call.isPaused && !call.isPastTotal(now) { continue }
            timeOut(call, now: now)
        }
        if now >= nextIdleSweep {
            nextIdleSweep = now + 1_000_000_000
            let lifetime = UInt64(client.configuration.idleLifetime * 1e9)
            for pool in pools.values { pool.closeIdle(olderThan: lifetime, now: now) }
        }
    }

    private func timeOut(_ call: HTTPCall, now: UInt64) {
        let error: HTTPClientError
        switch call.phase {
        case _ where call.isPastTotal(now) && call.phase != .done:
            error = HTTPClientError(.totalTimeout, "\(call.origin.hostHeader) did not finish within \(call.request.deadlines.total) s")
        case .waiting, .connecting:
            error = HTTPClientError(.connectTimeout, "no connection to \(call.origin.hostHeader) within \(call.request.deadlines.connect) s")
        case .sending, .awaitingHead:
            error = HTTPClientError(.firstByteTimeout, "\(call.origin.hostHeader) sent nothing within \(call.request.deadlines.firstByte) s")
        case .readingBody:
            error = HTTPClientError(.idleTimeout, "\(call.origin.hostHeader) paused longer than \(call.request.deadlines.idle) s")
        case .done:
            return
        }
        if let connection = call.connection {
            connection.fail(error, mayRetry: false)
        } else {
            call.pool.forget(call)
            call.failed(error)
        }
    }
}
