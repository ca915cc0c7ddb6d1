import Foundation
import Locking

/// The identity bytes of recently served gzip entries, so clients that do not accept gzip
/// do not pay an inflate for every hit on a hot entry (perf put zlib at an eighth of a hit).
///
/// Keyed by row id, and served only while the row's strong ETag is the one kept with the
/// body: the tag is the identity bytes' hash, so a replaced body (same row, new tag) is never
/// served from the old copy; it is inflated and kept in its place, and an older version read
/// after it (a read standby behind) is inflated and served but not kept, so two versions of a
/// row do not push each other out on every hit. (The id alone is hashed:
/// hashing the 34-byte tag too cost ~500 instructions a near-cache hit.) The database is still
/// read on every request (freshness, deletes and replaces are seen at once); only the
/// decompression is remembered. Bounded by bytes, oldest out first.
public final class InflatedBodies: Sendable {
    private struct Body {
        let etag: String
        let updatedAt: Date
        let bytes: [UInt8]
    }

    public let budget: Int
    /// Larger bodies are not kept: they are rare, and one would push out many hot ones.
    public let maxBodyBytes: Int
    private let kept = Locked(Kept())

    /// The bodies kept, in arrival order for eviction (oldest first).
    private struct Kept {
        var bodies: [Int64: Body] = [:]
        var arrivals: [Int64?] = []
        var oldest = 0
        var bytes = 0

        /// Keeps `body` for row `id`; a row's newer body takes an older one's place (and its
        /// arrival); an older one than held is not kept.
        mutating func keep(_ body: Body, for id: Int64, budget: Int) {
            if let held = bodies[id], held.updatedAt > body.updatedAt { return }
            if let replaced = bodies.updateValue(body, forKey: id) {
                bytes += body.bytes.count - replaced.bytes.count
            } else {
                bytes += body.bytes.count
                arrivals.append(id)
            }
            while bytes > budget, oldest < arrivals.count {
                if let evicted = arrivals[oldest], let gone = bodies.removeValue(forKey: evicted) {
                    bytes -= gone.bytes.count
                }
                arrivals[oldest] = nil
                oldest += 1
            }
            // Compact now and then so the arrival list does not grow without bound.
            if oldest > 1024 && oldest * 2 > arrivals.count {
                arrivals.removeFirst(oldest)
                oldest = 0
            }
        }
    }

    public init(budget: Int, maxBodyBytes: Int) {
        self.budget = budget
        self.maxBodyBytes = maxBodyBytes
    }

    /// Bytes held right now.
    public var heldBytes: Int { kept.withLock { $0.bytes } }

    /// The entry's identity bytes, inflated now or earlier; inflated now, they are kept
    /// unless `keep` is false (a near-cache copy that keeps its own: see `keep(_:of:)`).
    public func identity(of entry: StoredEntry, keep: Bool = true) throws -> [UInt8] {
        if budget > 0, let body = kept.withLock({ kept -> [UInt8]? in
            guard let held = kept.bodies[entry.id], held.etag == entry.etag else { return nil }
            return held.bytes
        }) {
            return body
        }
        let body = try Gzip.decompress(entry.body, limit: max(entry.identitySize, 1))
        if keep { self.keep(body, of: entry) }
        return body
    }

    /// Keeps `body`, the identity bytes of `entry`, within the budget.
    public func keep(_ body: [UInt8], of entry: StoredEntry) {
        guard budget > 0 && body.count <= maxBodyBytes else { return }
        let held = Body(etag: entry.etag, updatedAt: entry.updatedAt, bytes: body)
        kept.withLock { $0.keep(held, for: entry.id, budget: budget) }
    }
}
