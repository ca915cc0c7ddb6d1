/// The connections of one loop to one origin (scheme, host, port and trust): idle ones kept
/// for reuse (bounded, newest first), a cap on how many are open, and the calls waiting for
/// one past the cap (bounded too). Loop-confined.
final class OriginPool {
    unowned let loop: LoopClient
    let origin: Origin
    let tls: TLSContext?
    private var idle: [ClientConnection] = []
    /// Connections open or opening (idle ones included).
    private(set) var open = 0
    private var waiting: [HTTPCall] = []

    init(loop: LoopClient, origin: Origin, tls: TLSContext?) {
        self.loop = loop
        self.origin = origin
        self.tls = tls
    }

    var idleCount: Int { idle.count }

    /// Puts `call` on a connection: an idle one, a new one, or in line for one.
    func start(_ call: HTTPCall) {
        loop.track(call)
        while let connection = idle.popLast() {
            if connection.isReusable {
                connection.assign(call)
                return
            }
            connection.close()
        }
        let limits = loop.client.configuration
        if open < limits.maxConnectionsPerOrigin {
            connect(for: call)
        } else if waiting.count < limits.maxWaitingPerOrigin {
            call.enter(.waiting, deadline: call.request.deadlines.connect, now: loop.now)
            waiting.append(call)
        } else {
            loop.failSoon(call, HTTPClientError(.overloaded, "too many calls to \(origin.hostHeader) wait for a connection"))
        }
    }

    private func connect(for call: HTTPCall) {
        open += 1
        call.enter(.connecting, deadline: call.request.deadlines.connect, now: loop.now)
        let connection = ClientConnection(pool: self, for: call)
        loop.resolve(origin) { [weak connection] result in connection?.resolved(result) }
    }

    /// A connection finished an exchange: it serves the next waiting call, or rests idle.
    func release(_ connection: ClientConnection, reusable: Bool) {
        // Quiet too when handed straight to a waiting call, as when taken from the idle list:
        // bytes already there after the answer's end would be read as that call's answer.
        guard reusable, connection.state == .active, connection.isQuiet else {
            connection.close()
            return
        }
        if let next = nextWaiting() {
            connection.assign(next)
        } else if idle.count < loop.client.configuration.maxIdlePerOrigin {
            connection.becomeIdle(now: loop.now)
            idle.append(connection)
        } else {
            connection.close()
        }
    }

    /// A connection closed: a waiting call may now open one of its own.
    func removed(_ connection: ClientConnection) {
        open -= 1
        if let index = idle.firstIndex(where: { $0 === connection }) { idle.remove(at: index) }
        if open < loop.client.configuration.maxConnectionsPerOrigin, let next = nextWaiting() {
            connect(for: next)
        }
    }

    /// A call that was waiting for a connection ended (cancelled or out of time).
    func forget(_ call: HTTPCall) {
        if let index = waiting.firstIndex(where: { $0 === call }) { waiting.remove(at: index) }
    }

    private func nextWaiting() -> HTTPCall? {
        while !waiting.isEmpty {
            let call = waiting.removeFirst()
            if !call.isDone { return call }
        }
        return nil
    }

    /// Closes idle connections that have rested longer than `lifetime` nanoseconds (the
    /// upstream would close them soon anyway, perhaps as a request goes out).
    func closeIdle(olderThan lifetime: UInt64, now: UInt64) {
        for connection in idle where now &- connection.idleSince > lifetime {
            connection.close()
        }
    }
}
