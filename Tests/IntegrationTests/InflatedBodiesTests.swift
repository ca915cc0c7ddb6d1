@testable import CacheCore
import CacheStore
import Foundation
import Glibc
import Postgres
import Testing
import TestSupport

/// Identity clients of a gzip entry get its inflated bytes from memory after the first
/// hit; a replaced body is never answered from the old copy.
@Suite struct InflatedBodiesTests {
    @Test func aReplacedBodyIsNeverServedFromTheOldInflatedCopy() throws {
        let service = TestService.shared
        let namespace = TestService.namespace("inflate")
        let token = try writer(namespace)
        let path = entryPath(namespace, "doc")
        let first = Array(String(repeating: "first answer, compressible. ", count: 200).utf8)
        let second = Array(String(repeating: "second answer, also compressible! ", count: 150).utf8)
        #expect(try service.request("PUT", path, token: token, headers: [("Content-Type", "text/plain")],
                                    body: first).status == 201)
        for _ in 0..<3 { #expect(try service.request("GET", path, token: token).body == first) }
        #expect(try service.request("PUT", path, token: token, headers: [("Content-Type", "text/plain")],
                                    body: second).status == 200)
        #expect(try service.request("GET", path, token: token).body == second)
        let gzip = try service.request("GET", path, token: token, headers: [("Accept-Encoding", "gzip")])
        let unpacked = try gunzip(gzip.body)
        #expect(gzip.header("Content-Encoding") == "gzip" && unpacked == second)
        let metrics = try service.metrics()
        // The second body took the first's place (one row): at least it is held.
        #expect(metricSample(metrics, "teamcache_inflate_cache_bytes") >= Double(second.count))
    }

    @Test func theCacheKeepsToItsBudget() throws {
        let bodies = InflatedBodies(budget: 10_000, maxBodyBytes: 64 * 1024)
        for id in 0..<50 {
            let identity = [UInt8](repeating: UInt8(id), count: 1_000)
            let stored = StoredBody.fromIdentity(identity, contentType: "application/octet-stream", policy: CachePolicy())
            #expect(stored.encoding == .gzip)
            let entry = StoredEntry(id: Int64(id), namespace: "n", key: [1], body: stored.bytes, encoding: stored.encoding,
                                    contentType: "application/octet-stream", identitySize: stored.identitySize,
                                    etag: stored.etag, model: nil, metadata: nil, inputTokens: 0, outputTokens: 0,
                                    updatedAt: Date(), expiresAt: Date())
            #expect(try bodies.identity(of: entry) == identity)
            #expect(try bodies.identity(of: entry) == identity)
        }
        #expect(bodies.heldBytes > 0 && bodies.heldBytes <= 10_000)
    }

    /// A row's new body replaces its old one: the new one is served, the bytes held are the
    /// new one's (not both), and the budget still holds as replaced rows grow.
    @Test func aRowsNewBodyTakesItsOldOnesPlace() throws {
        let bodies = InflatedBodies(budget: 10_000, maxBodyBytes: 64 * 1024)
        let start = Date()
        func entry(_ id: Int64, _ identity: [UInt8], written seconds: Double = 0) -> StoredEntry {
            let stored = StoredBody.fromIdentity(identity, contentType: "text/plain", policy: CachePolicy())
            return StoredEntry(id: id, namespace: "n", key: [1], body: stored.bytes, encoding: stored.encoding,
                               contentType: "text/plain", identitySize: stored.identitySize, etag: stored.etag,
                               model: nil, metadata: nil, inputTokens: 0, outputTokens: 0,
                               updatedAt: start.addingTimeInterval(seconds), expiresAt: start)
        }
        let old = [UInt8](repeating: 1, count: 3_000), new = [UInt8](repeating: 2, count: 2_000)
        // Inflated for a near-cache copy that keeps them: not kept here until asked to.
        #expect(try bodies.identity(of: entry(7, old), keep: false) == old)
        #expect(bodies.heldBytes == 0)
        bodies.keep(old, of: entry(7, old))
        #expect(bodies.heldBytes == 3_000)
        #expect(try bodies.identity(of: entry(7, old), keep: false) == old, "held bytes are served whatever `keep` says")
        #expect(try bodies.identity(of: entry(7, old)) == old)
        #expect(bodies.heldBytes == 3_000)
        #expect(try bodies.identity(of: entry(7, new, written: 1)) == new)
        #expect(try bodies.identity(of: entry(7, new, written: 1)) == new)
        #expect(bodies.heldBytes == 2_000)
        // The old version asked for again (a read standby behind) is its own bytes, never the
        // new, and does not push the newer one out.
        #expect(try bodies.identity(of: entry(7, old)) == old)
        #expect(bodies.heldBytes == 2_000)
        #expect(try bodies.identity(of: entry(7, new, written: 1)) == new)
        for size in stride(from: 1_000, through: 9_000, by: 1_000) {
            let grown = [UInt8](repeating: UInt8(size / 1_000), count: size)
            #expect(try bodies.identity(of: entry(8, grown)) == grown)
            #expect(bodies.heldBytes <= 10_000)
        }
    }
}
