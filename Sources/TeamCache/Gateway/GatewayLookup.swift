import CacheCore
import CacheKeys
import Foundation
import HTTPServer
import Locking

/// The read of a gateway call's entry, as a descriptor lookup with a lease and a wait reads
/// it, and what it found: a hit (answered as is), a lease to fill, or a miss to call anyway
/// (no lease to be had within the wait). Misses answer nothing themselves: the gateway calls.
final class GatewayLookup: Sendable {
    enum Outcome: Sendable {
        /// The answer is a hit; with a refresh lease when it was served stale in its window.
        case hit(revalidate: Lease?)
        case lease(Lease)
        case missed
    }

    private struct State {
        var outcome = Outcome.hit(revalidate: nil)
        var stale: StoredEntry?
    }

    let gateway: Gateway
    let call: GatewayRequest
    let key: EntryKey
    private let state = Locked(State())

    init(gateway: Gateway, call: GatewayRequest, key: EntryKey) {
        self.gateway = gateway
        self.call = call
        self.key = key
    }

    var outcome: Outcome { state.withLock { $0.outcome } }
    /// An entry past its freshness but within the request's `max-stale`: the answer if the
    /// upstream fails.
    var staleEntry: StoredEntry? { state.withLock { $0.stale } }

    func plan() -> ReadPlan {
        let api = gateway.api, call = self.call, key = self.key
        let model = call.plan?.descriptor.model
        let budget = gateway.settings.wait > 0 ? WaitBudget(seconds: gateway.settings.wait) : nil
        let leaseSeconds = gateway.settings.lease
        let labelled = call.principal.mayWrite(call.namespace)
        let answers = CacheAPI.MissAnswers(
            miss: { [self] in note(.missed) },
            granted: { [self] lease in note(.lease(lease)) },
            pending: { [self] _ in note(.missed) })
        return .read(call.namespace, key, standby: false) { [self] entry, mayPark in
            let now = api.clock.now()
            let matching = entry.flatMap { $0.model == model ? $0 : nil }
            if let matching, let maxStale = call.controls.maxStale,
               case .stale = Freshness.of(matching, now: now, maxStale: maxStale) {
                state.withLock { $0.stale = matching }
            }
            let question = CacheAPI.HitQuestion(namespace: call.namespace, key: key, maxStale: nil, mayRefresh: true,
                                                leaseSeconds: nil, holder: call.holder,
                                                collapsed: budget?.waited == true)
            if let answer = try api.hitStep(matching, question, now: now, render: { [self] entry, freshness, collapsed, lease in
                state.withLock { $0.outcome = .hit(revalidate: lease) }
                return try GatewayAnswers.hit(entry, freshness: freshness, collapsed: collapsed, now: now,
                                              request: call.request, api: api)
            }) {
                return answer
            }
            return api.missStep(call.namespace, key, lease: leaseSeconds, holder: call.holder, budget: budget,
                                mayPark: mayPark, request: call.request, answers: answers, labelled: labelled,
                                countsMiss: false, filledBy: .model(model))
        }
    }

    /// Records how the read ended; the gateway, not this answer, goes on from there.
    private func note(_ outcome: Outcome) -> HTTPResponse {
        state.withLock { $0.outcome = outcome }
        return HTTPResponse(status: 204)
    }
}
