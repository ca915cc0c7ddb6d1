@testable import CacheCore
import Cryptography
import Testing

/// Sealing's pure half, with no database: a sealed entry opens only as what it was sealed as
/// (its namespace, key, ETag, encoding and part), and opening anything else is total.
@Suite struct SealedMessageTests {
    static let dataKey = Sealing.DataKey(id: 42, namespace: "secret", bytes: Bytes.random(count: 32))

    static func sealed() throws -> (body: [UInt8], encoding: String, metadata: String?) {
        try Sealing.seal(body: Array("the answer".utf8), encoding: .identity, metadata: "{\"n\":1}", namespace: "secret",
                         key: Array("k".utf8), etag: "\"e\"", with: dataKey)
    }

    @Test func aSealedEntryOpensAsItWasSealed() throws {
        let stored = try Self.sealed()
        #expect(stored.encoding == "aes256gcm/identity")
        let form = try #require(Sealing.sealedForm(encoding: stored.encoding, body: stored.body))
        #expect(form.inner == .identity && form.keyID == 42)
        let opened = try Sealing.open(namespace: "secret", key: Array("k".utf8), etag: "\"e\"", body: stored.body,
                                      inner: form.inner, metadata: stored.metadata, with: Self.dataKey).get()
        #expect(opened.body == Array("the answer".utf8) && opened.metadata == "{\"n\":1}")
        #expect(!stored.body.containsSubsequence(Array("the answer".utf8)))
    }

    @Test func anythingElseDoesNotOpen() throws {
        let stored = try Self.sealed()
        func open(namespace: String = "secret", key: String = "k", etag: String = "\"e\"", body: [UInt8]? = nil,
                  inner: BodyEncoding = .identity, metadata: String?? = .none, with dataKey: Sealing.DataKey = SealedMessageTests.dataKey)
            -> Sealing.Failure? {
            guard case .failure(let failure) = Sealing.open(
                namespace: namespace, key: Array(key.utf8), etag: etag, body: body ?? stored.body, inner: inner,
                metadata: metadata ?? stored.metadata, with: dataKey) else { return nil }
            return failure
        }
        #expect(open(key: "other") == .bodyDoesNotOpen, "a row copied to another key")
        #expect(open(etag: "\"f\"") == .bodyDoesNotOpen, "another version's tag")
        #expect(open(inner: .gzip) == .bodyDoesNotOpen, "another inner encoding")
        #expect(open(namespace: "other") == .bodyDoesNotOpen, "another namespace's row")
        #expect(open(with: Sealing.DataKey(id: 42, namespace: "secret", bytes: Bytes.random(count: 32))) == .bodyDoesNotOpen)
        var flipped = stored.body
        flipped[flipped.count / 2] ^= 1
        #expect(open(body: flipped) == .bodyDoesNotOpen, "a flipped byte")
        #expect(open(metadata: "{\"teamcache_sealed\":\"AAAA\"}") == .metadataDoesNotOpen, "metadata swapped")
        #expect(open(metadata: .some(nil)) == nil, "an entry sealed without metadata opens without it")
        // Total: any bytes under any encoding name, no trap.
        for length in [0, 8, 24, 40, 100] {
            let bytes = Bytes.random(count: length)
            #expect(Sealing.sealedForm(encoding: "aes256gcm/nope", body: bytes) == nil)
            if let form = Sealing.sealedForm(encoding: "aes256gcm/gzip", body: bytes) {
                #expect(open(body: bytes, inner: form.inner) == .bodyDoesNotOpen)
            }
        }
    }
}

extension Array where Element == UInt8 {
    func containsSubsequence(_ needle: [UInt8]) -> Bool {
        guard count >= needle.count else { return false }
        return (0...(count - needle.count)).contains { Array(self[$0..<($0 + needle.count)]) == needle }
    }
}
