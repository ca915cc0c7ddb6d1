import Locking

/// How an async handler answers its request: exactly once, on the request's event loop,
/// either there (after waiting on a file descriptor the loop watches) or by handing the
/// rest of the work to the worker pool.
///
/// Loop-confined like the connection it answers for (not `Sendable`): a worker's answer comes
/// back through `EventLoop.execute`, carrying the responder as a `LoopBound`.
public final class Responder {
    /// The loop the request arrived on: where its answer must be given.
    public let loop: EventLoop
    private let connection: Connection
    private let route: Route
    private let request: HTTPRequest
    private let started: UInt64
    private var answered = false
    private var waitAllowance: UInt64 = 0

    init(connection: Connection, loop: EventLoop, route: Route, request: HTTPRequest, started: UInt64) {
        self.connection = connection
        self.loop = loop
        self.route = route
        self.request = request
        self.started = started
    }

    /// The request parks on purpose (a read with `wait`) for up to `seconds`: its deadline,
    /// and that of work it hands to workers, moves on by as much.
    public func allowWaiting(_ seconds: Double) {
        waitAllowance += UInt64(max(0, seconds) * 1e9)
        connection.allowWaiting(seconds, for: request)
    }

    /// Runs `gone` (on this loop) if the client goes away while the request is parked; the
    /// connection then closes, and any later answer is dropped. Replaces an earlier one.
    public func whenClientLeaves(_ gone: @escaping () -> Void) {
        guard !answered else { return }
        connection.whenClientLeaves(request, gone)
    }

    /// Whether the answer can no longer reach the client (it left, or the connection closed).
    public var clientLeft: Bool { !connection.isAwaiting(request) }

    /// The deadline of work handed to workers now.
    private var workDeadline: UInt64 {
        started + UInt64(max(0, loop.context.configuration.requestTimeout) * 1e9) + waitAllowance
    }

    /// Answers with `response`. Only the first answer counts.
    public func respond(_ response: HTTPResponse) {
        guard !answered else {
            response.undelivered?()
            return
        }
        answered = true
        connection.complete(response, for: request, started: started)
    }

    /// Starts a streamed answer: `head`'s status and headers go out now (its body is ignored;
    /// the body follows through the returned stream, from any thread). nil when the request
    /// has been answered already or its client has gone. Counts as the answer.
    public func stream(_ head: HTTPResponse) -> ResponseStream? {
        guard !answered else { return nil }
        answered = true
        return connection.startStream(head, for: request, started: started)
    }

    /// Answers with what `body` returns, or with the problem it throws (as handlers do).
    public func respond(_ body: () throws -> HTTPResponse) {
        respond(loop.context.run(route, request, body))
    }

    /// Runs `body` on the worker pool (it may block) and answers with its result; answers
    /// 503 at once when the pool's queue is full.
    public func offload(_ body: @escaping @Sendable () throws -> HTTPResponse) {
        let context = loop.context, loop = self.loop, route = self.route, request = self.request
        let deadline = workDeadline
        let this = LoopBound(self, on: loop)
        let accepted = context.workers.submit {
            // Queued past its deadline: the client has had its 503; do not start the work.
            guard monotonicNanoseconds() < deadline else { return }
            let response = context.run(route, request, body)
            loop.execute { this.value.respond(response) }
        }
        if !accepted { respondOverloaded() }
    }

    /// Answers a request from any thread, once: `make` builds the answer (its errors become
    /// problem responses, as a handler's do) and the loop sends it.
    public typealias Answer = @Sendable (_ make: () throws -> HTTPResponse) -> Void

    /// Runs `start` on the worker pool. It returns the answer, or nil when it handed the rest
    /// of the work on (to the write batcher, say) and will answer through `answer` when that
    /// is done: the worker is free meanwhile, so waiting requests do not hold threads.
    public func offload(deferring start: @escaping @Sendable (_ answer: @escaping Answer) throws -> HTTPResponse?) {
        let context = loop.context, loop = self.loop, route = self.route, request = self.request
        let deadline = workDeadline
        let this = LoopBound(self, on: loop)
        let answer = laterAnswer()
        let accepted = context.workers.submit {
            guard monotonicNanoseconds() < deadline else { return }
            let immediate: HTTPResponse?
            do {
                immediate = try start(answer)
            } catch {
                immediate = context.run(route, request) { throw error }
            }
            if let immediate { loop.execute { this.value.respond(immediate) } }
        }
        if !accepted { respondOverloaded() }
    }

    /// As `offload(deferring:)`, with `start` run here, on the loop: it must not block, and
    /// hands what would (a commit) to a worker through the loop's `handOff`.
    public func start(deferring start: (_ answer: @escaping Answer) throws -> HTTPResponse?) {
        let immediate: HTTPResponse?
        do {
            immediate = try start(laterAnswer())
        } catch {
            respond { throw error }
            return
        }
        if let immediate { respond(immediate) }
    }

    /// An answer given later from any thread: built there (its errors become problem
    /// responses), sent by this loop.
    private func laterAnswer() -> Answer {
        let context = loop.context, loop = self.loop, route = self.route, request = self.request
        let this = LoopBound(self, on: loop)
        return { make in
            let response = context.run(route, request, make)
            loop.execute { this.value.respond(response) }
        }
    }

    /// Runs `work` on the worker pool, then `next` with its result back on this loop (a
    /// step that may block, in the middle of a request the loop goes on with).
    public func offload<T: Sendable>(_ work: @escaping @Sendable () throws -> T,
                                     then next: @escaping (Result<T, any Error>) -> Void) {
        let context = loop.context, loop = self.loop
        let deadline = workDeadline
        let continuation = LoopBound(next, on: loop)
        let accepted = context.workers.submit {
            guard monotonicNanoseconds() < deadline else { return }
            let result = Result { try work() }
            loop.execute { continuation.value(result) }
        }
        if !accepted { respondOverloaded() }
    }

    private func respondOverloaded() {
        respond(HTTPError(503, "The server is overloaded; retry shortly.",
                          headers: HTTPHeaders([("Retry-After", "1")])).response(requestID: request.requestID))
    }
}
