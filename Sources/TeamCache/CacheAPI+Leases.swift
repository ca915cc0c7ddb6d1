import CacheCore
import CacheKeys
import CacheStore
import Foundation
import HTTPServer
import Locking

/// Miss leases (single-flight) on lookups, raw GETs, writes and `release`: one caller of a
/// burst is made the filler; the others are told the key is pending and for how long.
extension CacheAPI {
    /// What a miss becomes. With a lease asked: one is granted (after a wait, a hand-over),
    /// or, while another caller holds a live one, the request parks until the key changes or
    /// the lease runs out (when it may, and has time left), else it is answered `pending`.
    /// Without a lease but with `wait`: it parks until the key appears, else it is a miss.
    ///
    /// A lookup is counted once, by how it ends: a miss only when it is answered as one
    /// (a miss, a lease, `pending`), never while it parks; a waiter answered by the fill is a
    /// hit (and collapsed) alone. (Counting each read before a park as a miss once made a
    /// burst that paid once read as half misses.)
    func missStep(_ namespace: Namespace, _ key: EntryKey, lease seconds: Int?, holder: Int64?,
                  budget: WaitBudget?, mayPark: Bool, request: HTTPRequest, answers: MissAnswers,
                  labelled: Bool, countsMiss: Bool = true, filledBy: FillCheck? = nil) -> ReadAnswer {
        let waiters = self.waiters
        // The gateway counts its callers itself, once their answer is settled: a miss may
        // still end as a collapsed hit (a call here to follow) or a stale answer.
        let countMiss: @Sendable () -> Void = { [self] in if countsMiss { recordMiss(namespace, labelled: labelled) } }
        guard let seconds else {
            if mayPark, let budget, let waiters, budget.remaining > 0 {
                budget.waited = true
                return .park(seconds: waiters.recheckDelay(untilDeadline: budget.remaining))
            }
            if budget?.waited == true { waiters?.count("timeout") }
            countMiss()
            return .response(answers.miss())
        }
        // A lease granted after a fill committed (the read came just before it) is withdrawn,
        // so the caller reads the entry rather than pay for it again (one that may not wait is
        // told `pending`, and reads it when it asks again: the clients' first lookup is such).
        // Once a request: an entry the read does not take could otherwise have it go round,
        // granted and withdrawn, for its whole wait.
        let check = budget?.leaseWithdrawn == true ? nil : filledBy
        return .blocking { [self] in
            let grant = try guarded(request) {
                try leases.grant(namespace, key, seconds: seconds, holder: holder, unlessFilled: check)
            }
            switch grant {
            case .granted(let lease):
                if budget?.waited == true {
                    waiters?.count("handed_over")
                    leases.countHandOver()
                }
                countMiss()
                // A grant that waited past the request's deadline (on a row lock, say) is given
                // back when its answer cannot be delivered: nobody else knows its id.
                var answer = answers.granted(lease)
                let leases = self.leases
                answer.undelivered = { leases.releaseUndelivered(namespace, key, lease, holder: holder) }
                return .response(answer)
            case .held(let retryAfter):
                if mayPark, let budget, let waiters, budget.remaining > 0 {
                    budget.waited = true
                    // Woken by the fill or the lease's end; by itself when the lease runs out.
                    let delay = min(waiters.recheckDelay(untilDeadline: budget.remaining), Double(retryAfter))
                    return .park(seconds: delay)
                }
                if budget?.waited == true { waiters?.count("timeout") }
                countMiss()
                return .response(answers.pending(retryAfter))
            case .filled:
                // Read again: the lease's withdrawal and the fill wake it, or a second's recheck.
                budget?.leaseWithdrawn = true
                if mayPark, let budget, let waiters, budget.remaining > 0 {
                    budget.waited = true
                    return .park(seconds: min(waiters.recheckDelay(untilDeadline: budget.remaining), 1))
                }
                countMiss()
                return .response(answers.pending(1))
            }
        }
    }

    /// Counts a lookup that ended as a miss. `labelled`: its token may write the namespace.
    func recordMiss(_ namespace: Namespace, labelled: Bool) {
        tracker.record(.miss, namespace: namespace.name, at: clock.now(), mayLabel: labelled)
    }

    /// The longest stale-while-revalidate window: the maximum TTL, within the column's
    /// 32-bit integer (TEAMCACHE_MAX_TTL may be configured past it).
    static func maxWindow(_ policy: CachePolicy) -> Int { min(policy.maxTTL, Int(Int32.max)) }

    /// A refresh lease's length when the request names none (`lease`), in seconds.
    static let refreshLeaseSeconds = 30

    /// A stale-while-revalidate answer: the stale entry, and with it a refresh lease for the
    /// first caller since the entry expired (or since the last refresh lease ran out); every
    /// other caller meanwhile gets the stale answer alone. Asking for the lease may block, so
    /// a loop hands it to a worker, unless this process already knows the key is leased.
    func revalidateStep(_ namespace: Namespace, _ key: EntryKey, lease seconds: Int?, holder: Int64?,
                        answer: @escaping @Sendable (Lease?) throws -> HTTPResponse) throws -> ReadAnswer {
        if leases.isKnownHeld(namespace, key) { return .response(try answer(nil)) }
        let seconds = seconds ?? Self.refreshLeaseSeconds
        return .blocking { [self] in
            let lease = leases.refresh(namespace, key, seconds: seconds, holder: holder)
            var response = try answer(lease)
            if let lease {
                let leases = self.leases
                response.undelivered = { leases.releaseUndelivered(namespace, key, lease, holder: holder) }
            }
            return .response(response)
        }
    }

    /// The answers a miss can end in, per route.
    struct MissAnswers: Sendable {
        let miss: @Sendable () -> HTTPResponse
        let granted: @Sendable (Lease) -> HTTPResponse
        let pending: @Sendable (_ retryAfter: Int) -> HTTPResponse
    }

    /// A descriptor lookup's miss answers.
    static func lookupMissAnswers(key: String) -> MissAnswers {
        MissAnswers(
            miss: { lookupMiss(key) },
            granted: { lease in
                .json(200, JSONValue.object([
                    ("hit", .bool(false)), ("key", .string(key)),
                    ("lease", .object([("id", .string(lease.id)), ("expires_in", .int(lease.expiresIn))])),
                ]).serialized)
            },
            pending: { retryAfter in
                .json(200, JSONValue.object([
                    ("hit", .bool(false)), ("key", .string(key)), ("pending", .bool(true)),
                    ("retry_after", .int(retryAfter)),
                ]).serialized)
            })
    }

    /// A raw GET's miss answers: 404 every time, with the lease or `pending`.
    static func entryMissAnswers(requestID: String, miss: @escaping @Sendable () -> HTTPResponse) -> MissAnswers {
        MissAnswers(
            miss: miss,
            granted: { lease in
                var problem = HTTPError(404, "No fresh entry under this key; you hold its lease: fill it.")
                problem.headers.add("Cache-Status", "teamcache; fwd=miss")
                problem.headers.add("TeamCache-Lease", "\(lease.id); expires_in=\(lease.expiresIn)")
                problem.members = [("lease", "\"\(lease.id)\""), ("expires_in", String(lease.expiresIn))]
                return problem.response(requestID: requestID)
            },
            pending: { retryAfter in
                var problem = HTTPError(404, "No fresh entry under this key; another caller is filling it.")
                problem.headers.add("Cache-Status", "teamcache; fwd=miss; detail=pending")
                problem.headers.add("Retry-After", String(retryAfter))
                problem.members = [("pending", "true"), ("retry_after", String(retryAfter))]
                return problem.response(requestID: requestID)
            })
    }

    /// `wait` (seconds, 0 to 60; fractions allowed) from a lookup's JSON (a bad one: 422) or
    /// a GET's query (400, as for every bad query parameter).
    static func waitSeconds(_ text: String?, status: Int) throws -> TimeInterval? {
        guard let text else { return nil }
        guard let seconds = Double(text), seconds.isFinite, (0...WaitBudget.maxSeconds).contains(seconds) else {
            throw HTTPError(status, "`wait` must be a number of seconds from 0 to 60.")
        }
        return seconds
    }

    /// A lease id from a client: its shape is checked before anything is stored.
    static func leaseID(_ text: String?, _ name: String) throws -> String? {
        guard let text else { return nil }
        guard Lease.isWellFormed(text) else {
            throw HTTPError(400, "`\(name)` is not a lease id (tcl_ and 64 hex digits, as granted).")
        }
        return text
    }

    /// Completes the lease a write carried, once the write is committed. A lease that is
    /// unknown, another token's, expired or handed over is left alone: the write stands.
    func completeLease(_ id: String?, _ write: EntryWrite, outcome: Result<WriteOutcome, any Error>) {
        guard let id, case .success(let stored) = outcome else { return }
        switch stored {
        case .created, .replaced:
            _ = try? leases.complete(write.namespace, write.key, id: id, holder: write.writerTokenID)
        case .preconditionFailed, .storeFull: return
        }
    }

    /// `POST /v1/caches/{ns}/release` `{"key", "lease"}`: the holder gives its lease back
    /// (its call failed), so the next caller can fill the key. 204; 404 for a lease that is
    /// unknown, another token's, or already finished.
    func release(_ request: HTTPRequest, _ context: RequestContext) throws -> HTTPResponse {
        let namespace = try context.namespace
        let json = try RequestParsing.jsonObject(request)
        try RequestParsing.rejectUnknownMembers(json, allowed: ["key", "lease"])
        guard let text = json["key"]?.stringValue, let key = EntryKey(Array(text.utf8)) else {
            throw HTTPError(422, "`key` must be the key the lease was granted on (1 to 512 bytes of UTF-8).")
        }
        guard let id = try Self.leaseID(json["lease"]?.stringValue, "lease") else {
            throw HTTPError(422, "`lease` must be the id of the lease to give back.")
        }
        let released = try guarded(request) {
            try leases.release(namespace, key, id: id, holder: context.holder)
        }
        guard released else { throw HTTPError(404, "No live lease with this id on this key for this token.") }
        return HTTPResponse(status: 204)
    }
}

/// A read's `wait`: its deadline, and whether it has waited (its hit is then "collapsed").
/// Used by one thread at a time, handed between the request's loop and the worker of a
/// blocking step; the flag is `Locked` so that hand-off needs no proof in a comment.
final class WaitBudget: Sendable {
    static let maxSeconds: TimeInterval = 60
    let deadline: TimeInterval
    private let waitedFlag = Locked(false)

    /// Whether the request parked at least once (its answer is then a collapsed one).
    var waited: Bool {
        get { waitedFlag.value }
        set { waitedFlag.withLock { $0 = newValue } }
    }

    private let withdrawnFlag = Locked(false)

    /// Whether a lease granted to this request was withdrawn for a fill (once is enough).
    var leaseWithdrawn: Bool {
        get { withdrawnFlag.value }
        set { withdrawnFlag.withLock { $0 = newValue } }
    }

    init(seconds: TimeInterval) {
        deadline = ProcessInfo.processInfo.systemUptime + seconds
    }

    var remaining: TimeInterval { max(0, deadline - ProcessInfo.processInfo.systemUptime) }
}
