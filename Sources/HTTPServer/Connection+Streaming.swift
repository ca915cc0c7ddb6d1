import Glibc

/// A streamed answer on the wire (`ResponseStream`): its head, its parts as they come, its end.
/// The request stays in flight until the stream ends, so pipelined requests behind it wait
/// their turn; its deadlines are the write timeout (a client that does not read) and the
/// stream's idle timeout (a producer that sends nothing), instead of the request timeout.
extension Connection {
    /// Sends `head` (its status and headers; no Content-Length) for `request`, still current,
    /// and returns the stream its body follows through; nil if the answer cannot be given.
    func startStream(_ head: HTTPResponse, for request: HTTPRequest, started: UInt64) -> ResponseStream? {
        guard !isClosed, current === request else { return nil }
        let configuration = loop.context.configuration
        let framing: ResponseStream.Framing = request.method == "HEAD" || head.forbidsBody ? .none
            : request.version == .http10 ? .closeDelimited : .chunked
        let limit = configuration.maxRequestsPerConnection
        // A close-delimited body ends with the connection; so does one when the server drains.
        let keepAlive = framing != .closeDelimited && request.keepAlive && !loop.isDraining
            && (limit == 0 || served < limit)
        let stream = ResponseStream(connection: self, framing: framing, bufferBytes: configuration.streamBufferBytes)
        streaming = Streaming(stream: stream, request: request, started: started, keepAlive: keepAlive,
                              status: head.status)
        // What a parked read asked to hear of its client leaving does not apply to the stream.
        onClientGone = nil
        enqueue(ResponseSerializer.streamHead(head, framing: framing, version: request.version, keepAlive: keepAlive,
                                              requestID: request.id, date: loop.date,
                                              server: configuration.serverName))
        phase = .streaming
        phaseStart = loop.now
        afterStreamOutput()
        return stream
    }

    /// One part of the body, framed, queued and written as far as the socket takes it.
    func streamPart(_ part: [UInt8], of stream: ResponseStream) {
        guard !isClosed, let current = streaming, current.stream === stream else {
            return stream.notePartQueued(part.count, queued: nil)
        }
        switch stream.framing {
        case .chunked:
            enqueue(Array((String(part.count, radix: 16) + "\r\n").utf8))
            enqueue(part)
            enqueue([13, 10])
            streaming?.bodyBytes += part.count
        case .closeDelimited:
            enqueue(part)
            streaming?.bodyBytes += part.count
        case .none:
            // Nothing goes out (HEAD): the part counts as read at once, and as a sign of life.
            break
        }
        stream.notePartQueued(part.count, queued: output.bytes)
        // The idle deadline runs from the last part.
        phaseStart = loop.now
        afterStreamOutput()
    }

    /// The body is complete: its end goes out, the request is answered, and the connection
    /// goes on to the next request (or closes, for a close-delimited body).
    func finishStream(_ stream: ResponseStream) {
        guard !isClosed, let finished = streaming, finished.stream === stream else { return }
        if stream.framing == .chunked { enqueue(Array("0\r\n\r\n".utf8)) }
        streaming = nil
        stream.detach()
        inFlight = false
        current = nil
        bodyUnverified = false
        onClientGone = nil
        accountBodyBytes()
        // A server that began draining meanwhile closes after it, as after any answer.
        if !finished.keepAlive || loop.isDraining { closeAfterFlush = true }
        let request = finished.request
        let seconds = Double(monotonicNanoseconds() - finished.started) / 1e9
        loop.record(method: request.method, routeID: request.routeID,
                    route: request.routeTemplate.isEmpty ? "unmatched" : request.routeTemplate,
                    status: finished.status, bytes: finished.bodyBytes, seconds: seconds, requestID: request.id)
        processBuffered()
    }

    /// The producer gave up midway: the client must not take a partial body for a whole one.
    func abortStream(_ stream: ResponseStream) {
        guard !isClosed, streaming?.stream === stream else { return }
        close(reason: "stream aborted")
    }

    /// A stream cut short ends with a reset, not a close: a close would mark the end of a
    /// close-delimited (HTTP/1.0) body, and its client would take the part it got for the whole.
    func resetIfStreaming() {
        guard streaming != nil else { return }
        var abort = linger(l_onoff: 1, l_linger: 0)
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort, socklen_t(MemoryLayout<linger>.size))
    }

    /// Writes what the socket takes now, watches for room for the rest, and tells the
    /// stream how much its client has yet to read.
    func afterStreamOutput() {
        flush()
        if isClosed { return }
        updateInterest()
    }
}

/// The stream a connection's request in flight answers through.
struct Streaming {
    let stream: ResponseStream
    let request: HTTPRequest
    let started: UInt64
    let keepAlive: Bool
    let status: Int
    /// Body bytes sent so far (for the access line).
    var bodyBytes = 0

    init(stream: ResponseStream, request: HTTPRequest, started: UInt64, keepAlive: Bool, status: Int) {
        self.stream = stream
        self.request = request
        self.started = started
        self.keepAlive = keepAlive
        self.status = status
    }
}
