import Locking

/// What a call tells its caller, on the loop it was started on, in this order: one head,
/// body parts, then `callFinished` — or `callFailed` at any point instead of what is left.
/// Loop-confined (called only on the call's loop).
public protocol HTTPCallDelegate: AnyObject {
    func callReceivedHead(_ head: ClientResponseHead)
    func callReceived(_ part: [UInt8])
    func callFinished()
    func callFailed(_ error: HTTPClientError)
}

/// One request in flight, from its loop's point of view: it waits for a connection, is
/// written, and its response read, with a deadline for each phase. Loop-confined; the
/// caller may `pause` reading (backpressure), `resume` it, or `cancel` the call.
public final class HTTPCall {
    enum Phase {
        case waiting, connecting, sending, awaitingHead, readingBody, done
    }

    let request: ClientRequest
    let origin: Origin
    let tls: TLSContext?
    private(set) var delegate: (any HTTPCallDelegate)?
    unowned let pool: OriginPool
    var phase = Phase.waiting
    /// When the current phase must have moved on (monotonic nanoseconds). None until a phase
    /// is entered: a call failed "soon" (overloaded, no TLS context) is tracked meanwhile, and
    /// the deadline sweep must not beat that failure to it with a time-out of its own.
    var deadline: UInt64 = .max
    /// When the whole call must be over (`ClientDeadlines.total`), set by the first phase.
    private(set) var endBy: UInt64 = .max
    var connection: ClientConnection?
    /// Tried again once on a new connection after a reused one failed before answering.
    var retried = false
    /// The caller asked not to be given more body for now.
    public private(set) var isPaused = false
    /// Identity in the loop's set of calls with deadlines.
    let id: Int

    init(request: ClientRequest, origin: Origin, tls: TLSContext?, delegate: any HTTPCallDelegate,
         pool: OriginPool, id: Int) {
        self.request = request
        self.origin = origin
        self.tls = tls
        self.delegate = delegate
        self.pool = pool
        self.id = id
    }

    /// Whether the call has ended (answered, failed or cancelled).
    public var isDone: Bool { phase == .done }

    /// Stops reading the response until `resume` (the socket's buffers fill, and the
    /// upstream's TCP window closes: nothing piles up here).
    public func pause() { isPaused = true }

    public func resume() {
        guard isPaused else { return }
        isPaused = false
        connection?.resumeReading()
    }

    /// Ends the call now: its connection is closed (a half-read response cannot be reused)
    /// and the delegate hears nothing more.
    public func cancel() {
        guard phase != .done else { return }
        delegate = nil
        let connection = self.connection
        finish()
        if let connection { connection.close() } else { pool.forget(self) }
    }

    // MARK: Told by the connection and the pool

    func enter(_ next: Phase, deadline seconds: Double, now: UInt64) {
        phase = next
        if endBy == .max { endBy = now + Self.nanoseconds(request.deadlines.total) }
        deadline = min(now + Self.nanoseconds(seconds), endBy)
    }

    /// Whether the call's whole time is up (the phase's deadline is never later).
    func isPastTotal(_ now: UInt64) -> Bool { now >= endBy }

    /// `seconds` as nanoseconds, bounded: a day at most (the upstreams file's bound), so the
    /// sum with a monotonic clock cannot overflow whatever a caller passes.
    private static func nanoseconds(_ seconds: Double) -> UInt64 {
        UInt64(min(max(0, seconds.isNaN ? 0 : seconds), 86_400) * 1e9)
    }

    func receivedHead(_ head: ClientResponseHead) { delegate?.callReceivedHead(head) }

    func received(_ part: [UInt8]) { delegate?.callReceived(part) }

    func succeeded() {
        let delegate = self.delegate
        finish()
        delegate?.callFinished()
    }

    func failed(_ error: HTTPClientError) {
        let delegate = self.delegate
        finish()
        delegate?.callFailed(error)
    }

    private func finish() {
        phase = .done
        delegate = nil
        connection = nil
        pool.loop.endTracking(self)
    }
}
