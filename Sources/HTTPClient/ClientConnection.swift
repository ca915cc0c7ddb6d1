import Glibc
import Locking

/// One connection to an origin, driven by its loop: resolve, connect (trying each address),
/// TLS handshake, then one exchange at a time — write the request, read the response into
/// the parser — and back to its pool when the response leaves it reusable.
///
/// Loop-confined (not `Sendable`): DNS answers come back through `Reactor.execute`, carrying
/// the connection as a `LoopBound`.
final class ClientConnection {
    enum State {
        case resolving, connecting, handshaking, active, idle, closed
    }

    private(set) var state = State.resolving
    private(set) var fd: Int32 = -1
    unowned let pool: OriginPool
    private var addresses: [SocketAddress] = []
    private var tls: TLSSession?
    private var call: HTTPCall?
    private var output: [UInt8] = []
    private var written = 0
    private var parser = ResponseParser()
    /// Events parsed from one read after the caller paused mid-way: given on resume, before
    /// anything more is read (a paused caller is given nothing, even what has arrived).
    private var held: [ResponseParser.Event] = []
    /// What epoll is asked for: nil when the descriptor is not watched at all.
    private var watching: Bool?
    /// A TLS operation is waiting for the socket to be writable.
    private var tlsWantsWrite = false
    /// Bytes follow the end of a response: the connection cannot carry another.
    private var spoiled = false
    /// Responses read to their end on this connection.
    private(set) var served = 0
    private(set) var idleSince: UInt64 = 0
    /// Writing the request failed (the upstream had closed the connection before it).
    private var writeFailed = false

    private var loop: LoopClient { pool.loop }

    init(pool: OriginPool, for call: HTTPCall) {
        self.pool = pool
        self.call = call
        call.connection = self
    }

    // MARK: Connecting

    func resolved(_ result: Result<[SocketAddress], HTTPClientError>) {
        guard state == .resolving else { return }
        switch result {
        case .failure(let error): fail(error)
        case .success(let found):
            addresses = found
            connectNext(lastError: nil)
        }
    }

    private func connectNext(lastError: HTTPClientError?) {
        closeSocket()
        guard !addresses.isEmpty else {
            fail(lastError ?? HTTPClientError(.connect, "\(pool.origin.hostHeader) has no address to connect to"))
            return
        }
        var address = addresses.removeFirst()
        let socket = Glibc.socket(address.family, Int32(SOCK_STREAM.rawValue | SOCK_NONBLOCK.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard socket >= 0 else {
            connectNext(lastError: HTTPClientError(.connect, "socket() failed (errno \(errno))"))
            return
        }
        fd = socket
        loop.client.noteOpened()
        let result = withUnsafePointer(to: &address.storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(socket, $0, address.length) }
        }
        state = .connecting
        if result == 0 {
            connected()
        } else if errno == EINPROGRESS || errno == EINTR {
            watch(writable: true)
        } else {
            connectNext(lastError: connectError(errno))
        }
    }

    private func connectError(_ number: Int32) -> HTTPClientError {
        HTTPClientError(.connect, "could not connect to \(pool.origin.hostHeader): \(String(cString: strerror(number)))")
    }

    private func finishConnecting() {
        var failure: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_ERROR, &failure, &length) == 0 else {
            connectNext(lastError: connectError(errno))
            return
        }
        if failure == EINPROGRESS || failure == EALREADY { return }
        guard failure == 0 else {
            connectNext(lastError: connectError(failure))
            return
        }
        connected()
    }

    private func connected() {
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), 1 /* TCP_NODELAY */, &one, socklen_t(MemoryLayout<Int32>.size))
        addresses = []
        guard let context = pool.tls else {
            becomeActive()
            return
        }
        do {
            tls = try TLSSession(fd: fd, origin: pool.origin, context: context)
        } catch {
            fail(error)
            return
        }
        state = .handshaking
        handshake()
    }

    private func handshake() {
        guard let tls else { return }
        switch tls.handshake() {
        case .done: becomeActive()
        case .wouldBlock(let writable): watch(writable: writable)
        case .closed: fail(HTTPClientError(.tls, "the upstream closed the connection during the TLS handshake"))
        case .failed(let error): fail(error)
        }
    }

    private func becomeActive() {
        state = .active
        guard let call else {
            // Its call went away while connecting: the connection still serves the pool.
            pool.release(self, reusable: true)
            return
        }
        begin(call)
    }

    // MARK: Exchanges

    /// Starts `call` on this idle (or freshly connected) connection.
    func assign(_ call: HTTPCall) {
        self.call = call
        call.connection = self
        state = .active
        begin(call)
    }

    private func begin(_ call: HTTPCall) {
        switch RequestWriter.bytes(of: call.request, to: call.origin) {
        case .failure(let error):
            self.call = nil
            call.failed(error)
            pool.release(self, reusable: true)
        case .success(let bytes):
            output = bytes
            written = 0
            writeFailed = false
            parser = ResponseParser(limits: loop.client.limits(bodyBytes: call.request.maxResponseBytes),
                                    headRequest: call.request.method == "HEAD")
            call.enter(.sending, deadline: call.request.deadlines.firstByte, now: loop.now)
            writeOutput()
            if state == .active { readInput() }
        }
    }

    func becomeIdle(now: UInt64) {
        state = .idle
        idleSince = now
        watch(writable: false)
    }

    /// Whether an idle connection can carry a request: not closed by the upstream meanwhile,
    /// and quiet. Its readability closes it, but only when the loop sees the event: bytes that
    /// arrived after the last answer ended (a Content-Length that undercounted, an answer sent
    /// before the request was read, then the rest of it drained) would otherwise be read as
    /// the next call's answer, which may be another tenant's.
    var isReusable: Bool { state == .idle && !spoiled && isQuiet }

    /// Nothing to read on the socket, nor in the TLS session's buffer: one `recv` peek, at
    /// each reuse.
    var isQuiet: Bool {
        if let tls, tls.hasBuffered { return false }
        var byte: UInt8 = 0
        let count = recv(fd, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT))
        return count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)
    }

    // MARK: Events

    private func onEvent() {
        switch state {
        case .connecting: finishConnecting()
        case .handshaking: handshake()
        case .active:
            tlsWantsWrite = false
            writeOutput()
            if state == .active { readInput() }
        case .idle:
            // An idle connection that turns readable was closed by the upstream (or it sent
            // bytes nobody asked for): either way it can carry nothing more.
            close()
        case .resolving, .closed: break
        }
    }

    private func writeOutput() {
        while written < output.count {
            let step = output.withUnsafeBytes { bytes -> TLSSession.Step in
                let rest = UnsafeRawBufferPointer(rebasing: bytes[written...])
                if let tls { return tls.write(rest) }
                let count = Glibc.write(fd, rest.baseAddress, rest.count)
                if count >= 0 { return .done(count) }
                if errno == EAGAIN || errno == EINTR { return .wouldBlock(writable: true) }
                return .failed(HTTPClientError(.closed, "writing the request failed: \(String(cString: strerror(errno)))"))
            }
            switch step {
            case .done(let count): written += count
            case .wouldBlock(let writable):
                tlsWantsWrite = writable
                watch(writable: true)
                return
            case .closed:
                writeFailed = true
                fail(HTTPClientError(.closed, "the upstream closed the connection before the request was written"))
                return
            case .failed(let error):
                writeFailed = true
                fail(error)
                return
            }
        }
        if !output.isEmpty {
            output = []
            if let call, call.phase == .sending {
                call.enter(.awaitingHead, deadline: call.request.deadlines.firstByte, now: loop.now)
            }
        }
        updateReadInterest()
    }

    private func updateReadInterest() {
        guard state == .active, let call else { return }
        if call.isPaused && !tlsWantsWrite && output.isEmpty {
            unwatch()
        } else {
            watch(writable: tlsWantsWrite || !output.isEmpty)
        }
    }

    private func readInput() {
        let scratch = loop.scratch
        while state == .active, let call, !call.isPaused {
            let step: TLSSession.Step
            if let tls {
                step = tls.read(into: scratch)
            } else {
                let count = Glibc.read(fd, scratch.baseAddress, scratch.count)
                if count > 0 {
                    step = .done(count)
                } else if count == 0 {
                    step = .closed
                } else if errno == EAGAIN || errno == EINTR {
                    step = .wouldBlock(writable: false)
                } else {
                    step = .failed(HTTPClientError(.closed, "reading the response failed: \(String(cString: strerror(errno)))"))
                }
            }
            switch step {
            case .done(let count):
                if count == 0 { continue }
                call.enter(.readingBody, deadline: call.request.deadlines.idle, now: loop.now)
                var events: [ResponseParser.Event] = []
                let used = parser.feed(UnsafeRawBufferPointer(rebasing: scratch[0..<count])) { events.append($0) }
                if used < count { spoiled = true }
                deliver(events, to: call)
            case .closed:
                var events: [ResponseParser.Event] = []
                parser.inputEnded { events.append($0) }
                spoiled = true
                // The connection ends here: what it brought is given now, paused or not.
                deliver(events, to: call, evenIfPaused: true)
                if state == .active { close() }
                return
            case .wouldBlock(let writable):
                tlsWantsWrite = writable
                updateReadInterest()
                return
            case .failed(let error):
                fail(error)
                return
            }
        }
        updateReadInterest()
    }

    private func deliver(_ events: [ResponseParser.Event], to call: HTTPCall, evenIfPaused: Bool = false) {
        for (index, event) in events.enumerated() {
            // The delegate may cancel the call (closing this connection) from any callback.
            guard self.call === call, state == .active else { return }
            if call.isPaused && !evenIfPaused {
                held = Array(events[index...])
                return
            }
            switch event {
            case .head(let head): call.receivedHead(head)
            case .body(let part): call.received(part)
            case .end(let reusable): complete(call, reusable: reusable)
            case .failure(let error): fail(error)
            }
        }
    }

    private func complete(_ call: HTTPCall, reusable: Bool) {
        served += 1
        self.call = nil
        // An answer that came before the whole request was written (a refusal of a large body)
        // leaves the rest unsent, or the upstream reading it as the next request: not reused.
        let keep = reusable && !spoiled && output.isEmpty
        call.succeeded()
        if state == .active { pool.release(self, reusable: keep) }
    }

    /// The caller resumed reading: pick up what is buffered (in TLS, where epoll cannot see
    /// it) on the next loop turn, outside the caller's own callback.
    func resumeReading() {
        guard state == .active else { return }
        let this = LoopBound(self, on: loop.reactor)
        loop.reactor.execute {
            let connection = this.value
            guard connection.state == .active else { return }
            if !connection.held.isEmpty, let call = connection.call {
                let events = connection.held
                connection.held = []
                connection.deliver(events, to: call)
            }
            connection.readInput()
        }
    }

    // MARK: Failure and closing

    /// Fails the call in flight (or tries it once more on a new connection when a reused
    /// one broke before any of the answer came and repeating it is safe) and closes.
    func fail(_ error: HTTPClientError, mayRetry: Bool = true) {
        let call = self.call
        self.call = nil
        let retry = call.map {
            mayRetry && served > 0 && !$0.retried && !parser.started && (writeFailed || Self.idempotent($0))
        } ?? false
        close()
        guard let call, !call.isDone else { return }
        if retry {
            call.retried = true
            call.connection = nil
            pool.start(call)
        } else {
            call.failed(error)
        }
    }

    private static func idempotent(_ call: HTTPCall) -> Bool {
        ["GET", "HEAD", "OPTIONS", "PUT", "DELETE"].contains(call.request.method)
    }

    /// Closes the socket and leaves the pool; a call still attached hears nothing more.
    func close() {
        guard state != .closed else { return }
        state = .closed
        if let call {
            self.call = nil
            call.connection = nil
        }
        closeSocket()
        pool.removed(self)
    }

    private func closeSocket() {
        tls = nil
        guard fd >= 0 else { return }
        unwatch()
        Glibc.close(fd)
        fd = -1
        loop.client.noteClosed()
    }

    private func watch(writable: Bool) {
        guard fd >= 0, watching != writable else { return }
        watching = writable
        // The loop holds the connection while it is watched; `unwatch` (on close) lets it go.
        loop.reactor.watch(fd, writable: writable) { self.onEvent() }
    }

    private func unwatch() {
        guard fd >= 0, watching != nil else { return }
        watching = nil
        loop.reactor.unwatch(fd)
    }
}
