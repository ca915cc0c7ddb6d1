import CacheCore
import HTTPClient
import HTTPServer
import Locking

/// One client reading a broadcast: the caller whose call it is (`owner`), or one who asked
/// the same meanwhile (`follower`, answered as a collapsed hit). A streamed answer goes out
/// part by part as it comes; a non-streamed one whole at its end (so it can say `stored`).
///
/// Loop-confined to its responder's loop; the broadcast reaches it through `follower()`.
final class GatewayReader {
    enum Role {
        /// With the entry `max-stale` allows, answered if the upstream fails; `cached`: its
        /// answer is stored (else it is a bypass: `no-store`, not cacheable, or the cache sick).
        case owner(stale: StoredEntry?, cached: Bool)
        case follower
    }

    let gateway: Gateway
    let call: GatewayRequest
    let responder: Responder
    let role: Role
    let streamed: Bool
    /// The streamed answer once started (its client's backpressure and departure).
    private(set) var stream: ResponseStream?
    private var head: Broadcast.Head?
    private var body: [UInt8] = []
    private var done = false

    init(gateway: Gateway, call: GatewayRequest, responder: Responder, role: Role, streamed: Bool) {
        self.gateway = gateway
        self.call = call
        self.responder = responder
        self.role = role
        self.streamed = streamed
    }

    private var isOwner: Bool { if case .owner = role { true } else { false } }

    /// The closures the broadcast tells: at once when it runs on this loop (the owner's
    /// exchange does), else through the loop's queue (in order either way).
    func follower() -> Broadcast.Follower {
        let loop = responder.loop
        let bound = LoopBound(self, on: loop)
        let onLoop: @Sendable (@escaping @Sendable () -> Void) -> Void = { work in
            if loop.inLoop { work() } else { loop.execute(work) }
        }
        return Broadcast.Follower(
            head: { head in onLoop { bound.value.begin(head) } },
            part: { part in onLoop { bound.value.take(part) } },
            end: { ending in onLoop { bound.value.finish(ending) } })
    }

    private func begin(_ head: Broadcast.Head) {
        guard !done else { return }
        let success = (200..<300).contains(head.status)
        if !success, !isOwner {
            // Not an answer to share: this caller makes its own way (a hand-over, or its own call).
            done = true
            gateway.look(call, responder, mayFollow: false)
            return
        }
        if case .owner(let stale?, _) = role, head.status >= 500 || head.status == 429 {
            answerStale(stale)
            return
        }
        self.head = head
        guard streamed else { return }
        stream = responder.stream(response(head, body: [], stored: false))
        if stream == nil { done = true }
    }

    private func take(_ part: [UInt8]) {
        guard !done, head != nil else { return }
        if let stream {
            stream.send(part)
        } else {
            body += part
        }
    }

    private func finish(_ ending: Broadcast.Ending) {
        guard !done else { return }
        done = true
        switch ending {
        case .complete(let stored):
            if !isOwner {
                gateway.api.tracker.record(.collapsed, namespace: call.namespace.name, at: gateway.api.clock.now())
                gateway.metrics?.count(call.upstream.name, "collapsed")
            }
            if let stream {
                stream.finish()
            } else if let head {
                responder.respond(response(head, body: body, stored: stored))
            }
        case .failed(let error):
            if let stream {
                // Part of the answer is out: the client sees it cut, never a complete wrong one.
                stream.abort()
            } else if !isOwner {
                gateway.look(call, responder, mayFollow: false)
            } else if case .owner(let stale?, _) = role {
                answerStale(stale)
            } else {
                responder.respond(GatewayAnswers.failure(error, upstream: call.upstream).response(
                    requestID: call.request.requestID))
            }
        }
    }

    private func answerStale(_ entry: StoredEntry) {
        done = true
        let api = gateway.api
        responder.respond {
            let now = api.clock.now()
            api.tracker.record(.stale, namespace: call.namespace.name, entry: entry, at: now)
            return try GatewayAnswers.hit(entry, freshness: Freshness.of(entry, now: now, maxStale: Int.max),
                                          collapsed: false, now: now, request: call.request, api: api)
        }
    }

    private func response(_ head: Broadcast.Head, body: [UInt8], stored: Bool) -> HTTPResponse {
        var headers = HTTPHeaders(capacity: head.headers.count + 3)
        // The upstream's own fields go to the caller whose call it was, and to no one else.
        if isOwner { for (name, value) in head.headers { headers.add(name, value) } }
        headers.add("Content-Type", head.contentType)
        switch role {
        case .owner(_, cached: false):
            headers.add("Cache-Status", "teamcache; fwd=bypass")
            headers.add("X-TeamCache", "bypass")
        case .owner:
            headers.add("Cache-Status", "teamcache; fwd=miss" + (stored ? "; stored" : ""))
            headers.add("X-TeamCache", "miss")
        case .follower:
            headers.add("Cache-Status", "teamcache; hit; collapsed")
            headers.add("X-TeamCache", "hit; collapsed")
        }
        return HTTPResponse(status: head.status, headers: headers, body: body)
    }
}
