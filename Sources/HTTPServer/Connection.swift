import CLinux
import Foundation
import Glibc
import Locking
import Observability

/// One client connection: reads into the parser, hands complete requests to handlers one
/// at a time (so pipelined responses leave in order), and writes responses back.
///
/// Confined to its event loop's thread (not `Sendable`). Worker threads only carry it back to
/// that loop, as a `LoopBound`, through `EventLoop.execute`; a completion for a closed
/// connection is dropped.
final class Connection {
    // @unchecked: loop-confined, as described above.
    enum Phase {
        case idle, head, body, handling, streaming, writing, lingering
    }

    /// How long input is read and dropped after an error response before closing.
    static let lingerSeconds: TimeInterval = 2
    /// Pipelined requests answered per connection per loop turn: one client cannot hold its
    /// loop while the other connections on it wait.
    static let requestsPerTurn = 32
    /// Output queued for a client that is not reading; past it no request is answered (and
    /// no input read) until it drains.
    static let maxQueuedOutput = 1 << 20
    /// Unparsed input held at most; reading pauses past it until the parser has caught up.
    static let maxBufferedInput = 64 * 1024

    let fd: Int32
    /// unowned(unsafe): the loop owns its connections and outlives them; a checked unowned
    /// reference would cost two atomic operations on each of the ~15 uses per request.
    unowned(unsafe) let loop: EventLoop
    // Not checked for exclusive access at run time (`@exclusivity(unchecked)`): both are read
    // and changed several times a request (each check ~80 instructions, a tenth of a
    // near-cache hit's checks), only on the loop's thread, and neither's methods call out of
    // the struct, so no access to one can begin while another is under way.
    @exclusivity(unchecked) var parser: HTTPParser
    @exclusivity(unchecked) var output = OutputQueue()
    /// The request being handled; an answer for any other (one given up at its deadline)
    /// is dropped.
    var current: HTTPRequest?
    /// This connection's share of the server's body budget (`ServerContext.holdBodyBytes`).
    private var heldBodyBytes = 0
    /// Of those, the bytes of a request whose credentials are not verified yet, charged to
    /// this client's share (`ServerContext.holdUnverifiedBytes`).
    private var heldUnverifiedBytes = 0
    /// The body being read belongs to a request whose precheck could not verify it.
    var bodyUnverified = false
    /// A precheck's blocking verification runs on a worker: no request is taken meanwhile
    /// (its body waits in the socket, or at most `maxBufferedInput` of it in the parser).
    var verifying = false
    /// Set by `refusal(beforeBody:)` when the precheck left something to verify.
    var pendingVerification: (@Sendable () throws -> Void)?
    /// Whether any byte arrived (for the debug line of a connection closed unanswered).
    private var receivedAny = false
    var inFlight = false
    /// Time the current request may spend parked on purpose (a read with `wait`), on top of
    /// the request deadline (nanoseconds).
    private(set) var waitAllowance: UInt64 = 0
    /// What to do if the client goes away while the request in flight waits on purpose (a
    /// parked read): drop the waiter at once rather than keep it to its deadline.
    var onClientGone: (() -> Void)?
    /// The streamed answer of the request in flight, once it has started.
    var streaming: Streaming?
    private var processing = false
    var closeAfterFlush = false
    /// Close through a lingering close: the client may still be sending a body we refused.
    var lingerOnClose = false
    var lingering = false
    var inputClosed = false
    var served = 0
    var phase = Phase.idle
    var phaseStart: UInt64
    var interest: UInt32 = EPOLLIN.rawValue | EPOLLRDHUP.rawValue
    private(set) var isClosed = false
    /// Whether epoll is asked for input now.
    var isReading: Bool { interest & EPOLLIN.rawValue != 0 }

    /// The client's address, for limits per client (never logged with a request).
    let peer: String
    /// The credential this connection presented last (see `ConnectionCredential`).
    let credential = ConnectionCredential()

    init(fd: Int32, loop: EventLoop, peer: String = "") {
        self.fd = fd
        self.loop = loop
        self.peer = peer
        self.parser = HTTPParser(limits: loop.context.configuration.limits)
        self.phaseStart = loop.now
    }

    // MARK: Input

    func onReadable() {
        if lingering || closeAfterFlush {
            // An answer that ends the connection is out or on its way: what follows is not parsed.
            dropInput(lingering: lingering)
            return
        }
        while !inputClosed && parser.bufferedBytes < Self.maxBufferedInput {
            let count = read(fd, loop.scratch.baseAddress, loop.scratch.count)
            if count > 0 {
                receivedAny = true
                parser.feed(UnsafeRawBufferPointer(start: loop.scratch.baseAddress, count: count))
                if count < loop.scratch.count { break }
            } else if count == 0 {
                // The client half-closed: answer what it sent, then close. A request parked
                // on purpose is the exception: its client has gone (HTTP clients do not
                // half-close to wait for an answer), so the waiter goes now, not at its deadline.
                inputClosed = true
                if inFlight, let gone = onClientGone {
                    onClientGone = nil
                    gone()
                    close(reason: "client left while waiting")
                    return
                }
            } else if errno == EINTR {
                continue
            } else if errno == EAGAIN {
                break
            } else {
                close(reason: "read error")
                return
            }
        }
        processBuffered()
    }

    /// Whether the next buffered request may be taken now.
    var canTakeRequests: Bool {
        !inFlight && !verifying && !isClosed && !closeAfterFlush && output.bytes < Self.maxQueuedOutput
    }

    /// Takes events from the parser until a request is in flight, more bytes are needed,
    /// the turn's budget is spent, or the client is not reading what it was sent.
    func processBuffered() {
        guard !processing else { return }
        processing = true
        defer { processing = false }
        var answered = 0
        var yielded = false
        var needsBytes = false
        while true {
            while canTakeRequests {
                if answered >= Self.requestsPerTurn {
                    yielded = true
                    break
                }
                guard let event = parser.next() else {
                    needsBytes = true
                    break
                }
                take(event, answered: &answered)
            }
            if isClosed { return }
            accountBodyBytes()
            flush()
            if isClosed { return }
            // The write made room for answers that waited for it: the turn goes on.
            guard !yielded, !needsBytes, canTakeRequests else { break }
        }
        // The turn's budget is spent: the rest waits for the next loop turn, after the
        // loop's other connections have had theirs.
        if yielded {
            let this = LoopBound(self, on: loop)
            loop.execute { if !this.value.isClosed { this.value.processBuffered() } }
        }
        if inputClosed && !inFlight && output.isEmpty && needsBytes {
            close(reason: "client closed")
            return
        }
        updatePhase()
        updateInterest()
    }

    private func take(_ event: HTTPParser.Event, answered: inout Int) {
        switch event {
        case .head(let request, let continueExpected):
            switch verdict(beforeBody: request) {
            case .refuse(let refusal):
                answered += 1
                refuse(request, with: refusal)
            case .read(let unverified):
                bodyUnverified = unverified
                // Only now: a client that waits for it sends no byte of a refused body.
                if continueExpected { enqueue(Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)) }
            case .verifyFirst(let verify):
                startVerifying(request, verify, continueExpected: continueExpected)
            }
        case .request(let request):
            served += 1
            answered += 1
            inFlight = true
            current = request
            phase = .handling
            waitAllowance = 0
            onClientGone = nil
            phaseStart = loop.now
            dispatch(request)
        case .failure(let error):
            closeAfterFlush = true
            lingerOnClose = true
            let problem = HTTPError(error.status, error.detail)
            respond(problem.response(requestID: ""), method: "", version: .http11, keepAlive: false)
            loop.record(method: "-", routeID: Router.unparsedID, route: "unparsed", status: error.status,
                        bytes: 0, seconds: 0, requestID: "")
        }
    }

    // MARK: Requests

    /// Why a request with a body is refused on its head alone (no route, a precheck such as
    /// a missing or known-bad token), or nil to read the body.
    func refusal(beforeBody request: HTTPRequest) -> HTTPResponse? {
        request.id = loop.requestID(for: request)
        request.remoteAddress = peer
        request.connectionCredential = credential
        let error: HTTPError
        switch loop.context.router.match(method: request.method, path: request.path) {
        case .found(let route, let parameters):
            guard let precheck = route.precheck else { return nil }
            request.routeTemplate = route.template
            request.routeID = route.id
            request.pathParameters = parameters
            do {
                if case .unverified(let verify) = try precheck(request) { pendingVerification = verify }
                return nil
            } catch let refused as HTTPError {
                error = refused
            } catch {
                return nil
            }
        case .methodNotAllowed(let methods):
            error = HTTPError(405, "\(request.method) is not allowed here.",
                              headers: HTTPHeaders([("Allow", methods.joined(separator: ", "))]))
        case .notFound: error = HTTPError(404, "No route matches this path.")
        case .badPath: error = HTTPError(400, "The path has a malformed percent-escape.")
        }
        return error.response(requestID: request.requestID)
    }

    /// Answers `request` with `response` before its body is read, then closes (lingering,
    /// so the client reads the answer rather than a reset).
    func refuse(_ request: HTTPRequest, with response: HTTPResponse) {
        served += 1
        closeAfterFlush = true
        lingerOnClose = true
        // The body that follows is dropped unread; the parser's memory goes with it.
        parser = HTTPParser(limits: loop.context.configuration.limits)
        accountBodyBytes()
        let bytes = respond(response, method: request.method, version: request.version, keepAlive: false,
                            requestID: request.id)
        loop.record(method: request.method, routeID: request.routeID,
                    route: request.routeTemplate.isEmpty ? "unmatched" : request.routeTemplate,
                    status: response.status, bytes: bytes, seconds: 0, requestID: request.id)
    }

    /// Keeps the server-wide count of body bytes being received up to date; past the
    /// budget, the request whose body pushed it over is refused with 503.
    func accountBodyBytes() {
        // Counted until answered: a body waiting for a worker or being handled holds memory too.
        let holding = parser.bodyBytesReceived + (current?.body.count ?? 0)
        // Bodies whose credentials are not verified yet also draw on this client's small share.
        let unverifiedDelta = (bodyUnverified ? holding : 0) - heldUnverifiedBytes
        let delta = holding - heldBodyBytes
        guard delta != 0 || unverifiedDelta != 0 else { return }
        heldBodyBytes = holding
        heldUnverifiedBytes += unverifiedDelta
        let withinShare = unverifiedDelta == 0 || loop.context.holdUnverifiedBytes(unverifiedDelta, from: peer)
        let withinBudget = delta == 0 || loop.context.holdBodyBytes(delta)
        guard !(withinShare && withinBudget), delta > 0 || unverifiedDelta > 0, parser.isReadingBody else { return }
        loop.context.metrics?.bodyBudgetRefusals.inc()
        let refusal = HTTPError(503, withinBudget
            ? "This client is sending too many bodies with credentials not verified yet; retry shortly."
            : "The server is receiving too many request bodies at once; retry shortly.",
                                headers: HTTPHeaders([("Retry-After", "1")]))
        let request = HTTPRequest(method: "-", target: "/", version: .http11, headers: HTTPHeaders(), keepAlive: false)
        refuse(request, with: refusal.response(requestID: ""))
    }

    private func dispatch(_ request: HTTPRequest) {
        if request.id.isEmpty { request.id = loop.requestID(for: request) }
        request.remoteAddress = peer
        // Every request, not only those with a body (set before their body is read): a GET
        // hit without it paid a SHA-256 of its token each time (callgrind: 10% of a hit).
        request.connectionCredential = credential
        let started = loop.now
        let context = loop.context
        switch context.router.match(method: request.method, path: request.path) {
        case .found(let route, let parameters):
            request.routeTemplate = route.template
            request.routeID = route.id
            request.pathParameters = parameters
            request.mayChangeState = route.mayChangeState
            request.deadline = phaseStart + Self.nanoseconds(context.configuration.requestTimeout)
            switch route.work {
            case .inline(let handler):
                complete(context.run(route, request) { try handler(request) }, for: request, started: started)
            case .worker(let handler):
                Responder(connection: self, loop: loop, route: route, request: request, started: started)
                    .offload { try handler(request) }
            case .async(let handler):
                handler(request, Responder(connection: self, loop: loop, route: route, request: request, started: started))
            }
        case .methodNotAllowed(let methods):
            let error = HTTPError(405, "\(request.method) is not allowed here.",
                                  headers: HTTPHeaders([("Allow", methods.joined(separator: ", "))]))
            complete(error.response(requestID: request.requestID), for: request, started: started)
        case .notFound:
            let error = HTTPError(404, "No route matches this path.")
            complete(error.response(requestID: request.requestID), for: request, started: started)
        case .badPath:
            let error = HTTPError(400, "The path has a malformed percent-escape.")
            complete(error.response(requestID: request.requestID), for: request, started: started)
        }
    }

    /// Queues the response of the request in flight and moves on to the next one.
    /// Lets `request` (if still current) be parked for `seconds` more past its deadline.
    func allowWaiting(_ seconds: TimeInterval, for request: HTTPRequest) {
        guard current === request else { return }
        waitAllowance += Self.nanoseconds(max(0, seconds))
    }

    /// Whether `request` is still waiting for its answer here.
    func isAwaiting(_ request: HTTPRequest) -> Bool { !isClosed && current === request }

    /// Runs `gone` if the client goes away while `request` (still current) waits, or at
    /// once if it has already closed its side (its FIN was read before the request parked).
    func whenClientLeaves(_ request: HTTPRequest, _ gone: @escaping () -> Void) {
        guard current === request, !isClosed else { return }
        guard !inputClosed else {
            gone()
            close(reason: "client left while waiting")
            return
        }
        onClientGone = gone
    }

    func complete(_ response: HTTPResponse, for request: HTTPRequest, started: UInt64) {
        guard !isClosed, current === request else {
            response.undelivered?()
            return
        }
        inFlight = false
        current = nil
        bodyUnverified = false
        onClientGone = nil
        accountBodyBytes()
        let limit = loop.context.configuration.maxRequestsPerConnection
        // A client that half-closed still gets an answer to every request it sent; the
        // connection closes once the parser has none left (processBuffered).
        let keepAlive = request.keepAlive && !loop.isDraining && (limit == 0 || served < limit)
        if !keepAlive { closeAfterFlush = true }
        let bytes = respondNow(response, method: request.method, version: request.version, keepAlive: keepAlive,
                               requestID: request.id)
        if request.body.count >= MemoryReturn.largeBody || response.body.count >= MemoryReturn.largeBody {
            MemoryReturn.noteLargeBody()
        }
        let seconds = Double(monotonicNanoseconds() - started) / 1e9
        loop.record(method: request.method, routeID: request.routeID,
                    route: request.routeTemplate.isEmpty ? "unmatched" : request.routeTemplate,
                    status: response.status, bytes: bytes, seconds: seconds, requestID: request.id)
        processBuffered()
    }

    /// Serialises a response into the output queue; returns the body bytes sent.
    @discardableResult
    func respond(_ response: HTTPResponse, method: String, version: HTTPVersion, keepAlive: Bool,
                         requestID: RequestID = .none) -> Int {
        let wire = ResponseSerializer.serialize(response, sendsBody: method != "HEAD", version: version,
                                                keepAlive: keepAlive, requestID: requestID, date: loop.date,
                                                server: loop.context.configuration.serverName)
        enqueue(wire.head)
        if let body = wire.separateBody { enqueue(body) }
        return wire.bodyBytes
    }

    // MARK: State

    func updatePhase() {
        if lingering { return }
        let next: Phase
        if inFlight {
            next = streaming == nil ? .handling : .streaming
        } else if !output.isEmpty {
            next = .writing
        } else if parser.isIdle {
            next = .idle
        } else if parser.isReadingHead {
            next = .head
        } else {
            next = .body
        }
        if next != phase {
            phase = next
            phaseStart = loop.now
        }
    }

    /// Reads pause while a handler runs with a full pipeline behind it, or while the client
    /// is not reading its responses (backpressure); writes are watched while output waits.
    func updateInterest() {
        // A lingering close keeps reading (and dropping) until it ends.
        if lingering { return }
        var wanted: UInt32 = 0
        let backlog = parser.bufferedBytes >= Self.maxBufferedInput
        if !inputClosed && !backlog && output.bytes < Self.maxQueuedOutput {
            wanted |= EPOLLIN.rawValue | EPOLLRDHUP.rawValue
        }
        if !output.isEmpty { wanted |= EPOLLOUT.rawValue }
        if wanted != interest {
            interest = wanted
            loop.modify(fd, events: wanted)
        }
    }


    /// At shutdown: close now if idle, otherwise after the current response.
    func drain() {
        // A request being read or handled finishes: complete() sees the loop draining and
        // answers with `Connection: close`.
        if inFlight || !parser.isIdle { return }
        if output.isEmpty { close(reason: "draining") } else { closeAfterFlush = true }
    }

    func close(reason: StaticString = "closed") {
        guard !isClosed else { return }
        // However it closes (reset, write error, deadline), a parked request's waiter goes now.
        if let gone = onClientGone {
            onClientGone = nil
            gone()
        }
        if inFlight || (receivedAny && served == 0 && !lingerOnClose) {
            // A client that sent something gets no answer: worth a line when debugging.
            loop.context.logger.debug("connection closed without an answer",
                                      [("reason", .string("\(reason)")), ("phase", .string("\(phase)")),
                                       ("served", .int(served)), ("in_flight", .bool(inFlight))])
        }
        isClosed = true
        credential.wipe()
        // A stream cut short: reset (see resetIfStreaming), and its producer learns its client has gone.
        resetIfStreaming()
        if let cut = streaming {
            streaming = nil
            cut.stream.noteClosed()
        }
        loop.remove(fd)
        Glibc.close(fd)
        output.removeAll()
        current = nil
        onClientGone = nil
        if heldBodyBytes > 0 { _ = loop.context.holdBodyBytes(-heldBodyBytes) }
        heldBodyBytes = 0
        if heldUnverifiedBytes > 0 { _ = loop.context.holdUnverifiedBytes(-heldUnverifiedBytes, from: peer) }
        heldUnverifiedBytes = 0
        loop.forget(self)
    }

    /// Answers a connection over the limit with a 503 and closes it, without registering it.
    static func refuse(_ fd: Int32, _ refusal: ServerContext.ConnectionRefusal) {
        let detail = switch refusal {
        case .serverFull: "The server is at its connection limit."
        case .clientFull: "This client address holds as many connections as one client may; reuse them or close some."
        }
        let body = String(decoding: HTTPError(503, detail).response(requestID: "").body, as: UTF8.self)
        let text = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/problem+json\r\nRetry-After: 1\r\n"
            + "Connection: close\r\nContent-Length: \(body.utf8.count)\r\n\r\n" + body
        _ = text.withCString { write(fd, $0, strlen($0)) }
        Glibc.close(fd)
    }
}
