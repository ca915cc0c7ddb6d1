import Foundation
import Locking

/// The identity bytes of recently served gzip entries, so clients that do not accept gzip
/// do not pay an inflate for every hit on a hot entry (perf put zlib at an eighth of a hit).
///
/// Keyed by row id and strong ETag: the tag is the identity bytes' hash, so a replaced body
/// gets a new key and a cached body is never served for another row. The database is still
/// read on every request (freshness, deletes and replaces are seen at once); only the
/// decompression is remembered. Bounded by bytes, oldest out first.
public final class InflatedBodies: Sendable {
    private struct Key: Hashable {
        let id: Int64
        let etag: String
    }

    public let budget: Int
    /// Larger bodies are not kept: they are rare, and one would push out many hot ones.
    public let maxBodyBytes: Int
    private let kept = Locked(Kept())

    /// The bodies kept, in arrival order for eviction (oldest first).
    private struct Kept {
        var bodies: [Key: [UInt8]] = [:]
        var arrivals: [Key?] = []
        var oldest = 0
        var bytes = 0

        mutating func keep(_ body: [UInt8], under key: Key, budget: Int) {
            guard bodies.updateValue(body, forKey: key) == nil else { return }
            bytes += body.count
            arrivals.append(key)
            while bytes > budget, oldest < arrivals.count {
                if let evicted = arrivals[oldest], let gone = bodies.removeValue(forKey: evicted) {
                    bytes -= gone.count
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

    /// The entry's identity bytes, inflated now (and kept) or earlier.
    public func identity(of entry: StoredEntry) throws -> [UInt8] {
        let key = Key(id: entry.id, etag: entry.etag)
        if budget > 0, let body = kept.withLock({ $0.bodies[key] }) { return body }
        let body = try Gzip.decompress(entry.body, limit: max(entry.identitySize, 1))
        if budget > 0 && body.count <= maxBodyBytes { keep(body, under: key) }
        return body
    }

    private func keep(_ body: [UInt8], under key: Key) {
        kept.withLock { $0.keep(body, under: key, budget: budget) }
    }
}
