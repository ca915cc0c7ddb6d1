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

        public init(refresh: Bool = false, staleOnError: Int? = nil, ttl: Int? = nil, tags: [String] = []) {
            self.refresh = refresh
            self.staleOnError = staleOnError
            self.ttl = ttl
            self.tags = tags
        }
    }

    /// Lookup → on a miss call `produce` → upsert → answer. A cache that cannot be reached
    /// never blocks the answer: the model is called, and the failed upsert is ignored.
    public func cached(namespace: String, _ descriptor: Descriptor, options: CachedOptions = CachedOptions(),
                       produce: @Sendable () async throws -> ModelAnswer) async throws -> ModelAnswer {
        if !options.refresh, case .hit(let answer, _, _, _)? = try? await lookup(namespace: namespace, descriptor) {
            return answer
        }
        let answer: ModelAnswer
        do {
            answer = try await produce()
        } catch {
            if let window = options.staleOnError,
               case .hit(let stale, _, _, _)? = try? await lookup(namespace: namespace, descriptor, maxStale: window) {
                return stale
            }
            throw error
        }
        _ = try? await upsert(namespace: namespace, descriptor, answer: answer, ttl: options.ttl, tags: options.tags)
        return answer
    }
}
