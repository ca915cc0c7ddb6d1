import CacheCore
import Foundation
import Testing

@Suite struct GzipTests {
    @Test func roundTripsAndEnforcesLimit() throws {
        let text = Array(String(repeating: "abc", count: 10_000).utf8)
        let packed = Gzip.compress(text, level: 6)
        #expect(packed.count < text.count / 10)
        #expect(try Gzip.decompress(packed, limit: text.count) == text)
        #expect(throws: Gzip.Failure.tooLarge) { try Gzip.decompress(packed, limit: text.count - 1) }
        #expect(throws: Gzip.Failure.malformed) { try Gzip.decompress(Array(packed.dropLast(4)), limit: 1 << 20) }
        #expect(throws: Gzip.Failure.malformed) { try Gzip.decompress(packed + [0], limit: 1 << 20) }
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
