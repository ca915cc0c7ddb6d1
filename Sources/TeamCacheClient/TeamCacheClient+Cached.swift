import CacheKeys
import Foundation

extension TeamCacheClient {
    /// How `cached` behaves.
    public struct CachedOptions: Sendable {
        /// The user's "regenerate": skip the cache, call the model, store the new answer.
        public var refresh = false
        /// When the model call fails, answer with a cached answer expired up to this many
        /// seconds (the offline / upstream-down fallback); nil: rethrow.
        public var staleOnError: Int?
        public var ttl: Int?
        public var tags: [String] = []
        /// Single-flight: on a miss, ask for the key's lease for this long (seconds, at most
        /// 600), so that of a burst of identical calls, on every replica, one calls the model
        /// and the others wait for its answer. nil: every caller that misses calls the model.
        public var lease: Int? = 60
        /// How long a caller waits for another's fill (seconds, at most 60) before it calls the
        /// model itself.
        public var wait: Double = 30
        /// Stored with the answer: seconds past `ttl` for which it is still served while one
        /// caller refreshes it in the background (RFC 5861); nil: none.
        public var staleWhileRevalidate: Int?

        public init(refresh: Bool = false, staleOnError: Int? = nil, ttl: Int? = nil, tags: [String] = [],
                    lease: Int? = 60, wait: Double = 30, staleWhileRevalidate: Int? = nil) {
            self.refresh = refresh
            self.staleOnError = staleOnError
            self.ttl = ttl
            self.tags = tags
            self.lease = lease
            self.wait = wait
            self.staleWhileRevalidate = staleWhileRevalidate
        }
    }

    /// Lookup → on a miss call `produce` → upsert → answer, with one call per burst: the
    /// first caller to miss is given the key's lease and calls `produce`; the others wait for
    /// its upsert and answer from it. A caller whose `produce` throws gives the lease back, so
    /// one waiter is handed it and calls `produce` instead. A stale-while-revalidate answer is
    /// returned at once, and the caller handed its refresh lease refreshes it in the
    /// background. A cache that cannot be reached never blocks the answer: the model is
    /// called, and the failed upsert is ignored.
    public func cached(namespace: String, _ descriptor: Descriptor, options: CachedOptions = CachedOptions(),
                       produce: @escaping @Sendable () async throws -> ModelAnswer) async throws -> ModelAnswer {
        var lease: MissLease?
        if !options.refresh {
            switch try? await lookupForFill(namespace, descriptor, options) {
            case .hit(let answer, _, _, _)?:
                return answer
            case .revalidate(let answer, _, _, let refresh)?:
                Task {
                    try? await fill(namespace, descriptor, options, lease: refresh, waitedOn: false, produce: produce)
                }
                return answer
            case .leased(_, let granted)?:
                lease = granted
            case .miss?, .pending?, nil:
                // A miss, another caller still filling after our wait, or no cache: call it ourselves.
                break
            }
        }
        do {
            return try await fill(namespace, descriptor, options, lease: lease, waitedOn: true, produce: produce)
        } catch {
            if let window = options.staleOnError,
               case .hit(let stale, _, _, _)? = try? await lookup(namespace: namespace, descriptor, maxStale: window) {
                return stale
            }
            throw error
        }
    }

    /// The lookup of `cached`: first without waiting, under the short lookup deadline (a
    /// frozen cache costs that once, not the wait); only a caller told another is filling the
    /// key then waits for the fill.
    private func lookupForFill(_ namespace: String, _ descriptor: Descriptor, _ options: CachedOptions) async throws
        -> LookupResult {
        let first = try await lookup(namespace: namespace, descriptor, lease: options.lease)
        guard case .pending = first, options.lease != nil, options.wait > 0 else { return first }
        return try await lookup(namespace: namespace, descriptor, lease: options.lease, wait: options.wait)
    }

    /// Calls `produce` and stores its answer with `lease`; gives the lease back if it throws.
    /// `waitedOn`: a caller waits for this fill (not a background refresh): its writes are on
    /// that caller's path (`onCallersPath`).
    private func fill(_ namespace: String, _ descriptor: Descriptor, _ options: CachedOptions, lease: MissLease?,
                      waitedOn: Bool, produce: @Sendable () async throws -> ModelAnswer) async throws -> ModelAnswer {
        let answer: ModelAnswer
        do {
            answer = try await produce()
        } catch {
            await Self.$onCallersPath.withValue(waitedOn) { await letGo(namespace, descriptor, lease) }
            throw error
        }
        await Self.$onCallersPath.withValue(waitedOn) {
            do {
                _ = try await upsert(namespace: namespace, descriptor, answer: answer, ttl: options.ttl,
                                     tags: options.tags, lease: lease,
                                     staleWhileRevalidate: options.staleWhileRevalidate)
            } catch let error as TeamCacheClientError where error.refusedWrite {
                // Refused for what it carried: the lease goes back at once, so the callers
                // waiting on it are not held until it expires.
                await letGo(namespace, descriptor, lease)
            } catch {}
        }
        return answer
    }

    /// Gives back a lease whose fill will not come.
    private func letGo(_ namespace: String, _ descriptor: Descriptor, _ lease: MissLease?) async {
        guard let lease else { return }
        _ = try? await release(namespace: namespace, key: descriptor.key, lease: lease)
    }
}
