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
    /// A follower's broadcast: its transcript is a whole (not streamed) answer.
    private let broadcast: Broadcast?
    /// The streamed answer once started (its client's backpressure and departure).
    private(set) var stream: ResponseStream?
    private var head: Broadcast.Head?
    private var body: [UInt8] = []
    private var done = false
    /// This caller's lookup is counted once, when its answer is settled (the gateway's read
    /// leaves it uncounted, as it may still end otherwise): the owner of a cached call as a
    /// miss, or as stale when a stale entry answers the upstream's failure; a follower as a
    /// collapsed hit once answered from the call it followed (else it asks again, and that is
    /// counted). `no-cache` was counted as a bypass already; an uncached call is no lookup.
    private var counted = false

    init(gateway: Gateway, call: GatewayRequest, responder: Responder, role: Role, streamed: Bool,
         broadcast: Broadcast? = nil) {
        self.broadcast = broadcast
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
        if case .owner(let stale?, _) = role, head.status >= 500 || head.status == 429, answerStale(stale) {
            return
        }
        self.head = head
        guard streamed else { return }
        stream = responder.stream(response(head, body: [], stored: false))
        if stream == nil {
            done = true
            countOwnersMiss()
        }
    }

    private func countOwnersMiss() {
        guard !counted, case .owner(_, cached: true) = role, !call.controls.noCache else { return }
        counted = true
        let api = gateway.api
        api.tracker.record(.miss, namespace: call.namespace.name, at: api.clock.now(),
                           mayLabel: call.principal.mayWrite(call.namespace))
        gateway.metrics?.count(call.upstream.name, "miss")
    }

    /// A follower answered from the call it followed: a collapsed hit, saving what the call's
    /// answer reported. Labelled as the owner's miss is (it may be counted first: the callers
    /// of one answer are told on their own loops).
    private func countFollowed(_ usage: AnswerUsage?) {
        guard !counted, !isOwner else { return }
        counted = true
        let api = gateway.api
        api.tracker.record(.collapsed, namespace: call.namespace.name, model: call.plan?.descriptor.model,
                           inputTokens: usage?.inputTokens, outputTokens: usage?.outputTokens, at: api.clock.now(),
                           mayLabel: call.principal.mayWrite(call.namespace))
        gateway.metrics?.count(call.upstream.name, "collapsed")
    }

    /// Unread bytes a reader of a shared (cached) call may fall behind by before it is cut:
    /// such a call goes at the upstream's pace for everyone, so a reader that does not keep
    /// up is not buffered without bound (it sees an incomplete answer, as on any cut).
    static let maxUnread = 4 << 20

    private func take(_ part: [UInt8]) {
        guard !done, head != nil else { return }
        if let stream {
            if shared && stream.unreadBytes > Self.maxUnread {
                done = true
                stream.abort()
                countOwnersMiss()
                return
            }
            stream.send(part)
        } else if isOwner {
            body += part
        }
        // A follower's whole answer is the broadcast's transcript, read at the end: one copy
        // for every follower, not one each.
    }

    /// Whether the call is cached (read at the upstream's pace, not this reader's).
    private var shared: Bool {
        if case .owner(_, cached: false) = role { false } else { true }
    }

    private func finish(_ ending: Broadcast.Ending) {
        guard !done else { return }
        done = true
        switch ending {
        case .complete(let stored, let usage):
            countOwnersMiss()
            // Counted before the answer goes: a caller who reads its answer and then the stats
            // finds itself in them (after a flush).
            if let stream {
                countFollowed(usage)
                stream.finish()
            } else if let head {
                if isOwner {
                    responder.respond(response(head, body: body, stored: stored))
                } else if let whole = broadcast?.transcript {
                    countFollowed(usage)
                    responder.respond(response(head, body: whole, stored: stored))
                } else {
                    // Too large to have been kept for followers: this caller makes its own way.
                    gateway.look(call, responder, mayFollow: false)
                }
            }
        case .failed(let error):
            if let stream {
                // Part of the answer is out: the client sees it cut, never a complete wrong one.
                stream.abort()
                countOwnersMiss()
            } else if !isOwner {
                gateway.look(call, responder, mayFollow: false)
            } else if case .owner(let stale?, _) = role, answerStale(stale) {
                return
            } else {
                countOwnersMiss()
                responder.respond(GatewayAnswers.failure(error, upstream: call.upstream).response(
                    requestID: call.request.requestID))
            }
        }
    }

    /// Answers with the stale entry the caller's `max-stale` took when the call began, if it
    /// still takes it now (the call may have run for minutes since); false when it does not,
    /// and the failure is the answer.
    private func answerStale(_ entry: StoredEntry) -> Bool {
        let api = gateway.api, now = api.clock.now()
        let freshness = Freshness.of(entry, now: now, maxStale: call.controls.maxStale)
        if case .expired = freshness { return false }
        done = true
        counted = true
        gateway.metrics?.count(call.upstream.name, "stale")
        responder.respond {
            api.tracker.record(.stale, namespace: call.namespace.name, entry: entry, at: now)
            return try GatewayAnswers.hit(entry, freshness: freshness, collapsed: false, now: now,
                                          request: call.request, api: api)
        }
        return true
    }

    private func response(_ head: Broadcast.Head, body: [UInt8], stored: Bool) -> HTTPResponse {
        var headers = HTTPHeaders(capacity: head.headers.count + 3)
        // The upstream's own fields go to the caller whose call it was, and to no one else, but
        // for how the bytes are encoded: a follower gets the same bytes, and must be able to read them.
        if isOwner {
            for (name, value) in head.headers { headers.add(name, value) }
        } else if let encoding = head.headers.first(where: { $0.0.lowercased() == "content-encoding" }) {
            headers.add(encoding.0, encoding.1)
        }
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
