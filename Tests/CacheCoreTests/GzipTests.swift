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

    /// The trailer's length is only a hint for the first allocation: one that lies (larger,
    /// smaller, past the limit) never changes what is inflated or refused, and the output
    /// grows past a wrong hint; sizes around the first allocation and the limit round-trip.
    @Test func theTrailersLengthIsOnlyAHint() throws {
        var generator = SystemRandomNumberGenerator()
        for size in [0, 1, 17, 18, 1000, 2082, 65_536, 65_537, 300_000] {
            let body = (0..<size).map { _ in UInt8.random(in: 97...100, using: &generator) }
            let packed = try #require(Gzip.compress(body, level: 6))
            #expect(try Gzip.decompress(packed, limit: size) == body, "\(size)")
            #expect(try Gzip.decompress(packed, limit: size + 1) == body, "\(size)")
            if size > 0 {
                #expect(throws: Gzip.Failure.tooLarge, "\(size)") { try Gzip.decompress(packed, limit: size - 1) }
            }
            for lie: UInt32 in [0, 1, UInt32(size) / 2, UInt32(size) * 2 + 1, .max] where lie != UInt32(size) {
                let lying = Array(packed.dropLast(4)) + withUnsafeBytes(of: lie.littleEndian, Array.init)
                // zlib checks the length too: a lying trailer is a malformed stream, found
                // only at its end (so the whole body was inflated into a buffer that grew).
                #expect(throws: Gzip.Failure.malformed, "\(size), \(lie)") {
                    try Gzip.decompress(lying, limit: 1 << 20)
                }
            }
        }
        // A bomb whose trailer says it is small still stops at the limit.
        let bomb = try #require(Gzip.compress([UInt8](repeating: 0, count: 4 << 20), level: 9))
        let quiet = Array(bomb.dropLast(4)) + [1, 0, 0, 0]
        #expect(throws: Gzip.Failure.tooLarge) { try Gzip.decompress(quiet, limit: 1 << 20) }
        #expect(throws: Gzip.Failure.tooLarge) { try Gzip.decompress(bomb, limit: 1 << 20) }
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
