import Locking

/// A response whose body goes out in parts as they come (`Responder.stream`): the head is
/// sent at once, then each part as soon as it is handed over, framed as the request allows
/// (chunked for HTTP/1.1, delimited by the connection's close for HTTP/1.0, nothing at all for
/// HEAD). Any thread may use it: each call hops to the connection's loop.
///
/// Backpressure: the stream holds at most about `bufferBytes` that the client has not read
/// yet. Past it `isWritable` is false, and a producer pauses until `whenWritable` calls it
/// back (once the client has read half of it); a producer that sends anyway is not refused,
/// but its bytes count, and a client that reads nothing for the write timeout is cut off.
/// `whenClosed` tells the producer the client has gone (it left, could not keep up, or the
/// stream was idle past its deadline): what it sends then is dropped.
public final class ResponseStream: Sendable {
    /// How the body is framed on the wire.
    public enum Framing: Sendable {
        /// `Transfer-Encoding: chunked` (HTTP/1.1).
        case chunked
        /// Raw bytes, the end marked by closing the connection (HTTP/1.0).
        case closeDelimited
        /// No body on the wire (HEAD, or a status that has none); parts are dropped.
        case none
    }

    struct State {
        /// Bytes handed to `send` and not yet in the connection's output queue, counted as
        /// they will be queued (`wireSize`), so a part joining the queue moves the total by nothing.
        var inTransit = 0
        /// The connection's unwritten output, as the loop last saw it.
        var queued = 0
        var closed = false
        var finished = false
        var writable: [@Sendable () -> Void] = []
        var gone: [@Sendable () -> Void] = []
    }

    public let framing: Framing
    /// Unread bytes past which the producer is asked to pause.
    public let bufferBytes: Int
    private let loop: EventLoop
    /// The connection while the stream runs; dropped when it ends, so a producer that keeps
    /// its stream does not keep a closed connection (and its buffers) alive.
    private let connection: Locked<LoopBound<Connection>?>
    private let state = Locked(State())

    init(connection: Connection, framing: Framing, bufferBytes: Int) {
        self.loop = connection.loop
        self.connection = Locked(LoopBound(connection, on: connection.loop))
        self.framing = framing
        self.bufferBytes = max(1, bufferBytes)
    }

    /// Whether a part sent now stays within the buffer (false once the stream has ended).
    public var isWritable: Bool {
        state.withLock { !$0.closed && !$0.finished && $0.inTransit + $0.queued < bufferBytes }
    }

    /// Bytes sent and not yet read by the client (held by the server, or on their way to it).
    public var unreadBytes: Int { state.withLock { $0.inTransit + $0.queued } }

    /// Whether the stream has ended: finished, aborted, or its client gone.
    public var isClosed: Bool { state.withLock { $0.closed || $0.finished } }

    /// Sends one part of the body (an empty one is nothing: it would end a chunked body).
    public func send(_ part: [UInt8]) {
        guard !part.isEmpty else { return }
        let accepted = state.withLock { state -> Bool in
            guard !state.closed && !state.finished else { return false }
            state.inTransit += wireSize(of: part.count)
            return true
        }
        guard accepted else { return }
        // The loop moves the part from `inTransit` to `queued` itself, in one update
        // (`notePartQueued`): a part counted in neither for a moment would let a racing
        // producer send past the buffer.
        onLoop { connection in connection.streamPart(part, of: self) }
    }

    /// What a part of `count` bytes counts for while in transit: what it will add to the
    /// connection's output, its chunk framing with it (`4000\r\n` … `\r\n` for 16 KiB). A part
    /// of a body that is not sent (HEAD) still counts until the loop drops it: it is held meanwhile.
    func wireSize(of count: Int) -> Int {
        switch framing {
        case .chunked: count + Self.hexDigits(count) + 4
        case .closeDelimited, .none: count
        }
    }

    /// How many hex digits `String(count, radix: 16)` writes.
    static func hexDigits(_ count: Int) -> Int {
        var digits = 1, rest = count >> 4
        while rest > 0 { (digits, rest) = (digits + 1, rest >> 4) }
        return digits
    }

    /// Ends the body: the response is complete, and the connection goes on to the next request.
    public func finish() {
        let first = state.withLock { state -> Bool in
            guard !state.closed && !state.finished else { return false }
            state.finished = true
            state.writable = []
            state.gone = []
            return true
        }
        guard first else { return }
        onLoop { connection in connection.finishStream(self) }
    }

    /// Ends the stream without completing the body (the producer failed midway): the
    /// connection closes, so the client sees an incomplete response, never a complete wrong one.
    public func abort() {
        guard !isClosed else { return }
        onLoop { connection in connection.abortStream(self) }
    }

    /// Runs `resume` once the buffer has room: at once if it has now, else on the loop when
    /// the client has read half of it. Not run if the stream ends first.
    public func whenWritable(_ resume: @escaping @Sendable () -> Void) {
        let now = state.withLock { state -> Bool in
            guard !state.closed && !state.finished else { return false }
            if state.inTransit + state.queued < bufferBytes { return true }
            state.writable.append(resume)
            return false
        }
        if now { resume() }
    }

    /// Runs `gone` once if the stream ends without `finish`: the client left, could not keep
    /// up, or the stream outlived a deadline (at once if that has happened already).
    public func whenClosed(_ gone: @escaping @Sendable () -> Void) {
        let now = state.withLock { state -> Bool in
            if state.closed { return true }
            if !state.finished { state.gone.append(gone) }
            return false
        }
        if now { gone() }
    }

    // MARK: The loop's side

    /// The connection's unwritten output after a write or a queueing (on the loop): wakes
    /// a paused producer once half the buffer has drained.
    func noteQueued(_ bytes: Int) {
        let wake = state.withLock { state -> [@Sendable () -> Void] in
            state.queued = bytes
            return drained(&state)
        }
        for resume in wake { resume() }
    }

    /// A part from `send` reached the loop (on the loop): it leaves `inTransit` as it joins
    /// the connection's output (`queued`, the output's size with it), or nothing at all if the
    /// stream has ended and the part was dropped.
    func notePartQueued(_ part: Int, queued bytes: Int?) {
        let wake = state.withLock { state -> [@Sendable () -> Void] in
            state.inTransit -= wireSize(of: part)
            if let bytes { state.queued = bytes }
            return drained(&state)
        }
        for resume in wake { resume() }
    }

    /// The paused producers to wake, taken from the state, once half the buffer has drained.
    private func drained(_ state: inout State) -> [@Sendable () -> Void] {
        guard !state.writable.isEmpty, state.inTransit + state.queued <= bufferBytes / 2 else { return [] }
        defer { state.writable = [] }
        return state.writable
    }

    /// The connection closed before the body was finished (on the loop).
    func noteClosed() {
        detach()
        let gone = state.withLock { state -> [@Sendable () -> Void] in
            guard !state.closed && !state.finished else { return [] }
            state.closed = true
            state.writable = []
            defer { state.gone = [] }
            return state.gone
        }
        for run in gone { run() }
    }

    /// The stream has ended (on the loop): it lets go of its connection.
    func detach() { connection.withLock { $0 = nil } }

    private func onLoop(_ body: @escaping @Sendable (Connection) -> Void) {
        guard let connection = connection.value else { return }
        loop.execute { body(connection.value) }
    }
}
