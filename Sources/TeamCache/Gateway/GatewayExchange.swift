import CacheCore
import CacheKeys
import Dispatch
import Foundation
import HTTPClient
import HTTPServer
import Locking

/// One upstream call of the gateway, on the loop that made it: relays the answer into its
/// broadcast as it arrives, reads a stream's events on the way (its end, its usage, the
/// usage-only event the gateway asked for), and stores a complete 2xx answer — even when its
/// own client has gone, since others may be waiting for it and it is paid for.
///
/// Loop-confined (an `HTTPCallDelegate`).
final class GatewayExchange: HTTPCallDelegate {
    let gateway: Gateway
    let call: GatewayRequest
    let broadcast: Broadcast
    private var lease: Lease?
    private let liveName: String?
    private let cached: Bool
    /// The client whose call this is (nil for a background refresh).
    private let owner: GatewayReader?
    private var handle: HTTPCall?
    private var recorder: StreamRecorder?
    private var status = 0
    private var contentType = ""
    /// The upstream encoded its answer though asked not to: relayed with its encoding, never stored.
    private var encoded = false
    private let started = DispatchTime.now().uptimeNanoseconds

    /// Where the write of the answer hands what may block (its group's commit): the loop's workers.
    private let handOff: BlockingWork

    init(gateway: Gateway, call: GatewayRequest, broadcast: Broadcast, lease: Lease?, liveName: String?, cached: Bool,
         owner: GatewayReader?, loop: EventLoop) {
        handOff = loop.handOff
        self.gateway = gateway
        self.call = call
        self.broadcast = broadcast
        self.lease = lease
        self.liveName = liveName
        self.cached = cached
        self.owner = owner
        if cached, let plan = call.plan, plan.stream {
            recorder = StreamRecorder(stripsUsage: plan.upstreamBody != nil)
        }
    }

    func attach(_ handle: HTTPCall) {
        self.handle = handle
        // An uncached answer is its client's alone: when that client leaves, the call goes too.
        guard !cached, let owner else { return }
        let bound = LoopBound(handle, on: owner.responder.loop)
        owner.responder.whenClientLeaves { bound.value.cancel() }
    }

    func callReceivedHead(_ head: ClientResponseHead) {
        status = head.status
        // An answer that names no type is passed on as bytes, not claimed to be JSON.
        // Stored and replayed in every hit's head: only a media type `MediaType` takes.
        contentType = head["Content-Type"].flatMap { MediaType.isStorable($0) ? $0 : nil } ?? "application/octet-stream"
        encoded = head["Content-Encoding"].map { $0.lowercased() != "identity" } ?? false
        gateway.metrics?.observeFirstByte(call.upstream.name, seconds: elapsed)
        broadcast.begin(Broadcast.Head(status: head.status, headers: GatewayHeaders.relayed(head.headers),
                                       contentType: contentType))
        // The owner's client left mid-stream: an uncached call stops, a cached one reads on.
        if !cached, let owner, let stream = owner.stream, let handle {
            let loop = owner.responder.loop, bound = LoopBound(handle, on: loop)
            stream.whenClosed { loop.execute { bound.value.cancel() } }
        }
    }

    func callReceived(_ part: [UInt8]) {
        let relayed = (200..<300).contains(status) ? recorder?.feed(part) ?? part : part
        broadcast.send(relayed)
        applyBackpressure()
    }

    /// An uncached answer waits for its one reader; a cached one is read at the upstream's pace
    /// (bounded by the entry size it keeps), for every caller waiting on it.
    private func applyBackpressure() {
        guard !cached, let owner, let stream = owner.stream, let handle, !stream.isWritable, !stream.isClosed else {
            return
        }
        handle.pause()
        let loop = owner.responder.loop, bound = LoopBound(handle, on: loop)
        stream.whenWritable { loop.execute { bound.value.resume() } }
    }

    func callFinished() {
        if var recorder {
            let rest = recorder.finish()
            self.recorder = recorder
            broadcast.send(rest)
        }
        // 200 only: a 201 or 202 is a job or a creation, not an answer to replay.
        let storable = cached && status == 200 && !call.controls.noStore && !encoded && completeStream
        let transcript = storable ? broadcast.transcript : nil
        let usage = transcript.flatMap { usageOf($0) }
        gateway.metrics?.observeUpstream(call.upstream.name, seconds: elapsed)
        // Out of the registry before the end is told: a caller the end lets go may ask again
        // at once, and must not find this finished call to follow.
        guard let transcript, let usage else {
            leaveLive()
            broadcast.end(.complete(stored: false, usage: usage))
            if let lease { gateway.giveBack(lease, call) }
            return
        }
        // The callers here are told the end once the entry is committed (or not): "stored"
        // means it, and a caller arriving meanwhile still joins this broadcast rather than
        // waiting on the lease.
        let broadcast = self.broadcast, live = gateway.live, liveName = self.liveName
        store(transcript, usage) { stored in
            if let liveName { live.remove(liveName, broadcast) }
            broadcast.end(.complete(stored: stored, usage: usage))
        }
    }

    func callFailed(_ error: HTTPClientError) {
        gateway.metrics?.countError(call.upstream.name, error.code.rawValue)
        gateway.metrics?.count(call.upstream.name, "error")
        leaveLive()
        broadcast.end(.failed(error))
        if let lease { gateway.giveBack(lease, call) }
    }

    private var elapsed: Double { Double(DispatchTime.now().uptimeNanoseconds - started) / 1e9 }

    private var completeStream: Bool {
        guard let recorder else { return true }
        return recorder.complete && !recorder.unreadable && !recorder.failed
    }

    private func leaveLive() {
        if let liveName { gateway.live.remove(liveName, broadcast) }
    }

    /// The usage of a complete answer; nil when it cannot be stored (a non-streamed answer
    /// that is not JSON or reports a failure, or one larger than an entry may be).
    private func usageOf(_ transcript: [UInt8]) -> AnswerUsage? {
        guard !transcript.isEmpty, transcript.count <= gateway.api.policy.maxBodyBytes else { return nil }
        if let recorder { return recorder.usage }
        guard let document = try? JSONParser.parse(transcript), !AnswerFailure.reported(by: document) else { return nil }
        var usage = AnswerUsage()
        usage.read(document)
        return usage
    }

    /// Stores the answer (compressing a large one off the loop) and completes the lease when
    /// the write is committed; the callers waiting on other replicas are woken by it.
    private func store(_ transcript: [UInt8], _ usage: AnswerUsage, then done: @escaping @Sendable (Bool) -> Void) {
        guard let plan = call.plan, let key = EntryKey(Array(plan.descriptor.key.utf8)) else {
            if let lease { gateway.giveBack(lease, call) }
            return done(false)
        }
        let api = gateway.api, call = self.call, lease = self.lease, contentType = self.contentType
        let metrics = gateway.metrics, gateway = self.gateway
        let large = transcript.count > 64 * 1024, handOff = self.handOff
        let write = { @Sendable in
            var entry = EntryWrite(namespace: call.namespace, key: key,
                                   body: StoredBody.fromIdentity(transcript, contentType: contentType, policy: api.policy),
                                   contentType: contentType)
            entry.model = plan.descriptor.model
            entry.promptDigest = plan.descriptor.promptDigest
            entry.metadata = usage.metadata(contentType: contentType, endpoint: plan.endpoint).serialized
            entry.inputTokens = usage.inputTokens ?? 0
            entry.outputTokens = usage.outputTokens ?? 0
            entry.ttlSeconds = call.controls.ttl
            entry.staleWhileRevalidate = call.controls.staleWhileRevalidate
            entry.writerTokenID = call.holder
            let written = entry
            // On the loop, the commit goes to a worker (never the loop: it waits on the database).
            api.store.submit(written, committed: { result in
                let stored: Bool
                switch result {
                case .success(.created), .success(.replaced): stored = true
                case .success(.preconditionFailed), .success(.storeFull), .failure: stored = false
                }
                // The callers here first (the entry is committed: a repeat anywhere is a hit;
                // other replicas' waiters wake on the write's notification), then the lease's
                // round trip. Not stored (a sick database, a full store): the lease goes to a
                // waiter at once, rather than holding every other replica's callers to its end.
                done(stored)
                if stored {
                    api.completeLease(lease?.id, written, outcome: result)
                } else if let lease {
                    gateway.giveBack(lease, call)
                }
            }, offLoop: large ? nil : handOff) { result, _ in
                if case .failure = result { metrics?.countError(call.upstream.name, "store") }
            }
        }
        // Compressing a large answer would hold the loop: it goes to a utility thread.
        if large { DispatchQueue.global(qos: .utility).async(execute: write) } else { write() }
    }
}
