import Foundation
import Glibc

/// Every phase of a connection has a total deadline (head, body, handling, writing,
/// lingering), checked by the loop's sweep; a request that outlives its own gets a 503.
/// Apart from reading and writing because it is its own rule: which clock runs in which
/// phase, and what a timed-out phase gets on its way out.
extension Connection {
    /// Closes the connection if its current phase has outlived its timeout.
    func checkDeadline(now: UInt64) {
        let configuration = loop.context.configuration
        let limit: TimeInterval
        var since = phaseStart
        switch phase {
        case .handling:
            if now > phaseStart + Self.nanoseconds(configuration.requestTimeout) + waitAllowance { abandonRequest() }
            return
        case .streaming:
            checkStreamDeadlines(now: now)
            return
        // A connection that never sent a byte gets the head's allowance, not the idle one.
        case .idle: limit = served == 0 ? min(configuration.headerTimeout, configuration.idleTimeout)
                                        : configuration.idleTimeout
        case .head: limit = configuration.headerTimeout
        case .body: limit = configuration.bodyTimeout
        case .writing:
            limit = configuration.writeTimeout
            since = output.oldestQueuedAt ?? phaseStart
        case .lingering: limit = Self.lingerSeconds
        }
        guard now > since + Self.nanoseconds(limit) else { return }
        if (phase == .head || phase == .body) && !lingering {
            // Best effort: tell the client why, without waiting for it to read.
            closeAfterFlush = true
            respond(HTTPError(408, "The request was not received in time.").response(requestID: ""),
                    method: "", version: .http11, keepAlive: false)
            _ = output.write(to: fd)
        }
        if phase == .writing {
            // Reset rather than close: a plain close would leave the kernel trickling out the
            // megabytes already in the socket buffer to the very client that was too slow.
            var abort = linger(l_onoff: 1, l_linger: 0)
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort, socklen_t(MemoryLayout<linger>.size))
        }
        close(reason: "deadline")
    }

    /// The request outlived its deadline: the client gets 503 now and the connection closes
    /// after it (a late answer cannot be put back in pipeline order); the handler's own
    /// answer, if it ever comes, is dropped by `complete`.
    private func abandonRequest() {
        guard let request = current else { return }
        // A write given up may still commit (it was queued, or committing): saying 503 would
        // tell the client "not applied, retry", and a retry of a create-only write would then
        // meet its own effect. It is 504 with a problem type of its own: read to find out.
        let error = request.mayChangeState
            ? HTTPError(504, "The request did not complete within its deadline; it may or may not have taken effect. "
                + "Read the state (GET the key) before retrying a write that is not idempotent.",
                        title: "Outcome unknown", type: ProblemTypes.uri("outcome-unknown"),
                        headers: HTTPHeaders([("Retry-After", "1")]))
            : HTTPError(503, "The request did not complete within its deadline; retry shortly.",
                        headers: HTTPHeaders([("Retry-After", "1")]))
        current = nil
        onClientGone = nil
        inFlight = false
        closeAfterFlush = true
        let seconds = Double(loop.now - phaseStart) / 1e9
        let bytes = respond(error.response(requestID: request.requestID), method: request.method,
                            version: request.version, keepAlive: false, requestID: request.id)
        loop.record(method: request.method, routeID: request.routeID,
                    route: request.routeTemplate.isEmpty ? "unmatched" : request.routeTemplate,
                    status: error.status, bytes: bytes, seconds: seconds, requestID: request.id)
        loop.context.metrics?.deadlineExceeded.inc()
        accountBodyBytes()
        flush()
        if !isClosed {
            updatePhase()
            updateInterest()
        }
    }

    /// A stream's client must read each part within the write timeout of its queueing (else
    /// the connection is reset, as for any answer); its producer must send something within the
    /// stream's idle timeout while the client has read everything (a paused producer is not idle).
    private func checkStreamDeadlines(now: UInt64) {
        let configuration = loop.context.configuration
        if let queued = output.oldestQueuedAt {
            guard now > queued + Self.nanoseconds(configuration.writeTimeout) else { return }
            var abort = linger(l_onoff: 1, l_linger: 0)
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort, socklen_t(MemoryLayout<linger>.size))
            close(reason: "stream not read")
        } else if now > phaseStart + Self.nanoseconds(configuration.streamIdleTimeout) {
            close(reason: "stream idle")
        }
    }

    static func nanoseconds(_ seconds: TimeInterval) -> UInt64 { UInt64(max(0, seconds) * 1e9) }
}
