import CacheCore
import Foundation
@testable import HTTPServer
import Locking
@testable import TeamCache
import Testing
import TestSupport

/// A connection that repeats its token pays one SHA-256, not one a request; the repeat is
/// still checked against the token cache, so a revocation takes effect as before; another
/// token, or another connection, is hashed afresh; what a connection held is zeroed.
@Suite struct ConnectionCredentialTests {
    /// A directory of tokens by hash whose answers a test can change (a revocation).
    final class Directory: TokenDirectory, Sendable {
        let tokens = Locked<[[UInt8]: APIToken]>([:])

        func add(_ secret: String, revoked: Bool = false) {
            let token = APIToken(id: Int64(secret.count), name: "t", namespacePattern: "*", scopes: [.read],
                                 createdAt: Date(), expiresAt: nil, revokedAt: revoked ? Date() : nil)
            tokens.withLock { $0[APIToken.hash(secret: secret)] = token }
        }

        func find(hash: [UInt8]) throws -> APIToken? { tokens.withLock { $0[hash] } }
    }

    static func request(_ secret: String, on connection: ConnectionCredential?) -> HTTPRequest {
        let request = HTTPRequest(method: "GET", target: "/v1/caches/a/stats", version: .http11,
                                  headers: HTTPHeaders([("Authorization", "Bearer \(secret)")]))
        request.connectionCredential = connection
        return request
    }

    @Test func aRepeatedTokenIsHashedOncePerConnectionAndStillChecked() throws {
        let directory = Directory()
        let a = APIToken.newSecret(), b = APIToken.newSecret()
        directory.add(a)
        directory.add(b)
        // No cache TTL: every request asks the directory, as after the TTL in production.
        let auth = Authenticator(enabled: true, store: directory, cacheTTL: 0, rateLimit: 0, clock: SystemClock())
        let namespace = try #require(Namespace("a"))
        let connection = ConnectionCredential()
        for _ in 0..<10 { _ = try auth.authorize(Self.request(a, on: connection), .read, namespace: namespace) }
        #expect(auth.digestsComputed.load(ordering: .relaxed) == 1)
        // Another token on the same connection, and the same token on another: hashed afresh.
        _ = try auth.authorize(Self.request(b, on: connection), .read, namespace: namespace)
        _ = try auth.authorize(Self.request(a, on: ConnectionCredential()), .read, namespace: namespace)
        #expect(auth.digestsComputed.load(ordering: .relaxed) == 3)
        // A near miss (one character off) is not the remembered credential.
        let near = String(b.dropLast()) + (b.last == "0" ? "1" : "0")
        #expect(throws: HTTPError.self) { try auth.authorize(Self.request(near, on: connection), .read, namespace: namespace) }
        // Revoked while the connection keeps sending it: refused at once (TTL 0).
        directory.add(b, revoked: true)
        #expect(throws: HTTPError.self) { try auth.authorize(Self.request(b, on: connection), .read, namespace: namespace) }
    }

    /// Through a real listening server: a kept-alive connection's GETs (no body: set up
    /// apart from requests with one) and PUTs hash its token once. GETs were hashed every
    /// time, the credential being handed only to requests with a body.
    @Test func aRealConnectionHashesItsTokenOnceForEveryKindOfRequest() throws {
        let service = try TestService()
        defer { service.stop() }
        let token = try service.token([.read, .write], namespaces: "credential")
        let client = try RawClient(port: service.port, timeout: 10)
        let bearer = [("Authorization", "Bearer \(token)")]
        let digests = { service.app.authenticator.digestsComputed.load(ordering: .relaxed) }
        // The first request hashes the token once (its check before the body, and its
        // verification after, share the digest), and no request after it does.
        let before = digests()
        #expect(try client.request("PUT", "/v1/caches/credential/entries/k", headers: bearer, body: [1]).status == 201)
        #expect(digests() - before == 1)
        for _ in 0..<20 {
            #expect(try client.request("GET", "/v1/caches/credential/entries/k", headers: bearer).status == 200)
            #expect(try client.request("HEAD", "/v1/caches/credential/entries/k", headers: bearer).status == 200)
        }
        #expect(try client.request("PUT", "/v1/caches/credential/entries/k", headers: bearer, body: [2]).status == 200)
        #expect(digests() - before == 1)
    }

    @Test func whatAConnectionHeldIsZeroedAndComparedWhole() {
        let credential = ConnectionCredential()
        credential.remember("tc_secret"[...], digest: [1, 2, 3])
        #expect(credential.digest(for: "tc_secret"[...]) == [1, 2, 3])
        #expect(credential.digest(for: "tc_secreT"[...]) == nil)
        #expect(credential.digest(for: "tc_secret2"[...]) == nil)
        #expect(credential.digest(for: "tc_secre"[...]) == nil)
        credential.wipe()
        #expect(credential.digest(for: "tc_secret"[...]) == nil)
        #expect(ConnectionCredential.equalInConstantTime(Array("abc".utf8), "abc"[...].utf8))
        #expect(!ConnectionCredential.equalInConstantTime(Array("abc".utf8), "abd"[...].utf8))
    }

    /// The word-at-a-time comparison against `==`: every length to 40, a difference at every
    /// position (in a word or in the tail), and equal bytes.
    @Test func constantTimeComparisonAgreesWithEquality() {
        let letters = Array("abcdefghijklmnopqrstuvwxyz0123456789_".utf8)
        for length in 0...40 {
            let known = (0..<length).map { _ in letters.randomElement()! }
            #expect(ConnectionCredential.equalInConstantTime(known, Substring(String(decoding: known, as: UTF8.self)).utf8))
            for position in 0..<length {
                var other = known
                other[position] = other[position] == UInt8(ascii: "a") ? UInt8(ascii: "b") : UInt8(ascii: "a")
                let given = Substring(String(decoding: other, as: UTF8.self)).utf8
                #expect(!ConnectionCredential.equalInConstantTime(known, given), "length \(length), position \(position)")
            }
            #expect(!ConnectionCredential.equalInConstantTime(known, Substring(String(decoding: known + [97], as: UTF8.self)).utf8))
        }
    }
}
