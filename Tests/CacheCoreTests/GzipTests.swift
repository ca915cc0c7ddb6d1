import CacheCore
import Foundation
import Locking
import Testing

@Suite struct GzipTests {
    @Test func roundTripsAndEnforcesLimit() throws {
        let text = Array(String(repeating: "abc", count: 10_000).utf8)
        let packed = try #require(Gzip.compress(text, level: 6))
        #expect(packed.count < text.count / 10)
        #expect(try Gzip.decompress(packed, limit: text.count) == text)
        #expect(throws: Gzip.Failure.tooLarge) { try Gzip.decompress(packed, limit: text.count - 1) }
        #expect(throws: Gzip.Failure.malformed) { try Gzip.decompress(Array(packed.dropLast(4)), limit: 1 << 20) }
        #expect(throws: Gzip.Failure.malformed) { try Gzip.decompress(packed + [0], limit: 1 << 20) }
    }

    /// Kept deflate streams (reset between bodies) give what a new one gives, whatever the
    /// bodies before, and are safe to take from many threads at once.
    @Test func reusedStreamsCompressAsNewOnesDo() throws {
        var generator = SystemRandomNumberGenerator()
        let bodies = (0..<64).map { index in
            (0..<(index * 97 % 5000)).map { _ in UInt8.random(in: 97...(index.isMultiple(of: 2) ? 100 : 255),
                                                              using: &generator) }
        }
        let first = try bodies.map { try #require(Gzip.compress($0, level: 6)) }
        for _ in 0..<3 {
            for (body, expected) in zip(bodies, first).reversed() { #expect(Gzip.compress(body, level: 6) == expected) }
        }
        let failures = Locked(0)
        DispatchQueue.concurrentPerform(iterations: 8) { thread in
            for round in 0..<100 {
                let body = bodies[(thread * 7 + round) % bodies.count]
                let level: Int32 = round.isMultiple(of: 3) ? 1 : 6
                guard let packed = Gzip.compress(body, level: level),
                      let back = try? Gzip.decompress(packed, limit: 1 << 20), back == body else {
                    failures.withLock { $0 += 1 }
                    continue
                }
            }
        }
        #expect(failures.value == 0)
    }

    /// A level zlib refuses (a policy set in code, past the configuration's 1-9 check) is no
    /// trap: nothing is compressed, a body is stored as it came, and the next call still works.
    @Test func aLevelZlibRefusesCompressesNothing() {
        let text = Array(String(repeating: "abc", count: 10_000).utf8)
        #expect(Gzip.compress(text, level: 42) == nil)
        var policy = CachePolicy()
        policy.compressionLevel = 42
        let stored = StoredBody.fromIdentity(text, contentType: "text/plain", policy: policy)
        #expect(stored.encoding == .identity && stored.bytes == text)
        #expect(Gzip.compress(text, level: 6) != nil)
    }

    @Test func smallOrIncompressibleBodiesStayIdentity() {
        let policy = CachePolicy()
        #expect(StoredBody.fromIdentity(Array("tiny".utf8), contentType: "text/plain", policy: policy).encoding
            == .identity)
        let random = (0..<4096).map { _ in UInt8.random(in: 0...255) }
        #expect(StoredBody.fromIdentity(random, contentType: "application/octet-stream", policy: policy).encoding
            == .identity)
        let text = Array(String(repeating: "{\"k\":1}", count: 200).utf8)
        #expect(StoredBody.fromIdentity(text, contentType: "application/json", policy: policy).encoding == .gzip)
        #expect(StoredBody.fromIdentity(text, contentType: "image/png", policy: policy).encoding == .identity)
    }
}
