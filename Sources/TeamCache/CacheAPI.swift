import CacheCore
import CacheKeys
import CacheStore
import Foundation
import HTTPServer
import Observability
import Postgres

/// What the cache routes share: the store, the access tracker, the policy and the clock.
public final class CacheAPI: Sendable {
    let store: any EntryStorage
    let tracker: AccessTracker
    /// Counts manual evictions in the eviction job's metrics (nil: not counted).
    let eviction: EvictionJob?
    let leases: any LeaseStorage
    /// Where reads with `wait` park (nil: they answer at once).
    let waiters: Waiters?
    let upserts: CounterFamily?
    /// Write answers sent without `TeamCache-Position` (it could not be learned in time).
    let positionsMissing: CounterFamily?
    let inflated: InflatedBodies
    /// Change feed pages shared by followers asking the same question.
    let feedPages: FeedPages
    /// Hot entries answered without a database read (nil: none); the store drops a key from
    /// it on every change this process makes, before the change is answered.
    let near: NearCache?
    /// The price table's currency, named beside every money figure.
    let currency: String
    let logger = Logger(component: "cache")
    /// Database failures during an outage repeat per request: one line per kind per 10 s.
    let failures = LogThrottle(Logger(component: "cache"))

    var policy: CachePolicy { store.policy }
    var clock: any Clock { store.clock }

    init(store: any EntryStorage, tracker: AccessTracker, eviction: EvictionJob?, leases: any LeaseStorage,
         waiters: Waiters? = nil, metrics: MetricsRegistry?, inflated: InflatedBodies, near: NearCache? = nil,
         currency: String = "USD") {
        self.store = store
        self.currency = currency
        self.near = near
        self.leases = leases
        self.waiters = waiters
        self.inflated = inflated
        let feedPages = FeedPages(metrics: metrics)
        self.feedPages = feedPages
        // The one place this process's own changes reach what it keeps: a change's key (or its
        // whole namespace) goes from the near-cache, and no shared feed page read before it is
        // reused, before the change is answered, without waiting for the notification's round
        // trip. Waiters are woken by the notification, once.
        store.localChanges.listen { namespace, key in
            near?.invalidate(namespace, key)
            feedPages.noteLocalChange(namespace)
        }
        self.tracker = tracker
        self.eviction = eviction
        upserts = metrics?.counter(MetricCatalogue.upsertsTotal)
        positionsMissing = store.tracksPositions ? metrics?.counter(MetricCatalogue.writePositionsMissingTotal) : nil
    }

    /// Runs a handler body, turning database failures into problems: unreachable or busy →
    /// 503 with Retry-After (the client retries, nothing hangs); anything else → 500. The
    /// database's own message is logged at debug only: it can quote row data.
    func guarded<T>(_ request: HTTPRequest, _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as PostgresError where error.sqlState == .plainInEncryptedNamespace {
            // This replica sealed with what it knew, and the namespace was encrypted since: the
            // store read the keys again, and the client's retry is sealed.
            throw HTTPError(503, "This namespace was just encrypted; retry shortly.",
                            headers: HTTPHeaders([("Retry-After", "1")]))
        } catch let error as PostgresError {
            failures.log(.warn, "database error", kind: error.description,
                         [("request_id", .string(request.requestID)), ("error", .string(error.description))])
            logger.debug("database error detail", [("request_id", .string(request.requestID)),
                                                   ("detail", .string(error.serverMessage))])
            if error.isUnavailable {
                throw HTTPError(503, "The database is unavailable; retry shortly.",
                                headers: HTTPHeaders([("Retry-After", "1")]))
            }
            throw HTTPError(500, "A database error occurred; quote the request id when reporting it.")
        } catch is WriteQueueFull {
            throw HTTPError(503, "Too many writes are waiting for the database; nothing was stored. Retry shortly.",
                            headers: HTTPHeaders([("Retry-After", "1")]))
        } catch is WriteAbandoned {
            throw HTTPError(503, "The write was not started within the request's deadline; nothing was stored.",
                            headers: HTTPHeaders([("Retry-After", "1")]))
        } catch let unavailable as Keyring.Unavailable {
            // Never stored plain: the write is refused until this replica can use the key
            // (another replica may: retry).
            failures.log(.error, "encrypted namespace without a usable key", kind: "keyring",
                         [("request_id", .string(request.requestID)), ("namespace", .string(unavailable.namespace))])
            throw HTTPError(503, "This namespace is encrypted and this server cannot use its key; retry shortly.",
                            headers: HTTPHeaders([("Retry-After", "1")]))
        }
    }

    /// Hands `write` to the write batcher and answers when it is committed: the thread that
    /// parsed the request (a loop, or a worker) is free at once, so writes waiting for a commit
    /// hold no thread and share commits however many are in flight. From a loop (`offLoop`),
    /// the commit itself runs on a worker.
    /// A `lease` the write carried is completed once the write is committed, before the
    /// answer (on the committing thread: one short statement, for one write of a burst).
    func commit(_ write: EntryWrite, location: String?, lease: String? = nil, request: HTTPRequest,
                offLoop: BlockingWork? = nil, answer: @escaping Responder.Answer) {
        // Past the request's deadline it is answered "outcome unknown": a write not started by
        // then never is (so what the deadline's answer says is at worst too cautious).
        var bounded = write
        if request.deadline > 0 { bounded.notAfter = request.deadline }
        // The store drops the key's kept copy before `committed`, whatever the outcome.
        store.submit(bounded, committed: { [self] result in
            completeLease(lease, write, outcome: result)
        }, offLoop: offLoop) { [self] result, position in
            answer {
                try guarded(request) {
                    var response = try writeResponse(try result.get(), write, location: location)
                    stamp(&response, position)
                    return response
                }
            }
        }
    }

    /// The JSON answer of a write (PUT and descriptor upsert).
    func writeResponse(_ outcome: WriteOutcome, _ write: EntryWrite, location: String?) throws -> HTTPResponse {
        let status: Int, expiresAt: Date
        switch outcome {
        case .created(let expiry): (status, expiresAt) = (201, expiry)
        case .replaced(let expiry): (status, expiresAt) = (200, expiry)
        case .preconditionFailed:
            upserts?.inc([tracker.label(for: write.namespace.name), "precondition_failed"])
            throw HTTPError(412, "The entry's current state does not satisfy the request's precondition.")
        case .storeFull:
            upserts?.inc([tracker.label(for: write.namespace.name), "store_full"])
            throw HTTPError(507, "Storing this would pass a byte cap of the store or the namespace; nothing was stored.")
        }
        tracker.admitNamespace(write.namespace.name)
        upserts?.inc([tracker.label(for: write.namespace.name), status == 201 ? "created" : "replaced"])
        let json = JSONValue.object([
            ("namespace", .string(write.namespace.name)), ("key", .string(write.key.display)),
            ("etag", .string(write.body.etag)), ("size", .int(write.body.identitySize)),
            ("stored_size", .int(write.body.bytes.count)), ("encoding", .string(write.body.encoding.rawValue)),
            ("expires_at", .string(RFC3339.format(expiresAt))),
        ])
        var response = HTTPResponse.json(status, json.serialized)
        response.headers.add("ETag", write.body.etag)
        if status == 201, let location { response.headers.add("Location", location) }
        return response
    }
}
