import CLinux
import Glibc

/// Writing answers out: the queue, the socket's room, and how a connection that must close
/// after its answer stops (at once, or lingering while the client still sends).
extension Connection {
    func enqueue(_ bytes: [UInt8]) {
        output.append(bytes, at: loop.now)
    }

    /// Answers as `respond` does, writing to the socket at once when nothing is queued before
    /// the answer and no pipelined request follows it (the usual keep-alive request): the
    /// answer is serialized into the loop's scratch memory and written from there, and only
    /// what the socket does not take is copied into the queue. A buffer allocated, queued and
    /// freed for every answer cost ~1,000 instructions of a near-cache hit. The caller
    /// flushes after (as after `respond`): that closes a connection whose answer was its last.
    func respondNow(_ response: HTTPResponse, method: String, version: HTTPVersion, keepAlive: Bool,
                    requestID: RequestID) -> Int {
        guard output.isEmpty, parser.bufferedBytes == 0, response.body.count <= ResponseSerializer.inlineBodyLimit,
              let (count, bodyBytes) = ResponseSerializer.serialize(
                  response, sendsBody: method != "HEAD", version: version, keepAlive: keepAlive, requestID: requestID,
                  date: loop.date, server: loop.context.configuration.serverName, into: loop.scratch),
              let base = loop.scratch.baseAddress else {
            return respond(response, method: method, version: version, keepAlive: keepAlive, requestID: requestID)
        }
        var written = 0
        while written < count {
            let result = Glibc.write(fd, base + written, count - written)
            if result > 0 {
                written += result
            } else if result < 0 && errno == EINTR {
                continue
            } else {
                // Full (EAGAIN) or failed: the rest is queued, and the flush after waits for
                // room or meets the error and closes, as for any queued answer.
                break
            }
        }
        if written < count {
            enqueue(Array(UnsafeRawBufferPointer(start: base + written, count: count - written)))
        }
        return bodyBytes
    }

    func onWritable() {
        flush()
        if isClosed { return }
        // The client read enough: answer the requests that waited for room (or, after its
        // half-close, find that none is left and close).
        if canTakeRequests && (parser.bufferedBytes > 0 || inputClosed) {
            processBuffered()
            return
        }
        updatePhase()
        updateInterest()
    }

    /// Writes queued output until done or the socket is full (then EPOLLOUT resumes it).
    /// A streamed answer's producer hears how much is left to read after every write, from
    /// whichever path wrote (a paused producer resumes once its client has read enough).
    func flush() {
        defer { if !isClosed { streaming?.stream.noteQueued(output.bytes) } }
        while !output.isEmpty {
            if output.write(to: fd) < 0 {
                if errno == EINTR { continue }
                if errno == EAGAIN { return }
                close(reason: "write error")
                return
            }
        }
        guard closeAfterFlush else { return }
        if lingerOnClose && !inputClosed { startLingering() } else { close(reason: "answered") }
    }

    /// Like nginx's lingering close: after an error answer, stop writing but keep reading
    /// (and dropping) input for a moment, so a client still sending the body we refused
    /// reads our answer instead of a connection reset.
    func startLingering() {
        guard !lingering else { return }
        lingering = true
        shutdown(fd, Int32(SHUT_WR))
        phase = .lingering
        phaseStart = loop.now
        interest = EPOLLIN.rawValue | EPOLLRDHUP.rawValue
        loop.modify(fd, events: interest)
    }

    /// Reads and drops input: while an answer that closes the connection is still queued
    /// (the end of input is only noted), or while lingering (it ends the connection).
    func dropInput(lingering: Bool) {
        while true {
            let count = read(fd, loop.scratch.baseAddress, loop.scratch.count)
            if count > 0 || (count < 0 && errno == EINTR) { continue }
            if count < 0 && errno == EAGAIN { return }
            if count == 0 && !lingering {
                inputClosed = true
                return
            }
            close(reason: lingering ? "lingering over" : "read error after answer")
            return
        }
    }
}
