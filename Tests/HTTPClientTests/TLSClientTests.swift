import Foundation
import HTTPClient
import Testing
import TestSupport

/// TLS to an upstream whose certificate a throwaway CA (made here with `openssl`) signed for
/// `localhost`: trusted through that CA file, refused by the system store, refused for an
/// address the certificate does not name; kept-alive and streamed like plain HTTP.
@Suite(.serialized) struct TLSClientTests {
    static let setUp = Result { () throws -> (ThrowawayCA, FakeUpstream) in
        let authority = try ThrowawayCA()
        return (authority, try FakeUpstream(tls: (authority.serverCertificate, authority.serverKey)))
    }

    func fixture() throws -> (ca: String, port: Int) {
        let (authority, upstream) = try Self.setUp.get()
        return (authority.caCertificate, upstream.port)
    }

    @Test func aCertificateSignedByTheConfiguredCAIsTrustedAndTheConnectionKept() throws {
        let (ca, port) = try fixture()
        let harness = try ClientHarness()
        let tls = try harness.client.tlsContext(caFile: ca)
        for _ in 0..<2 {
            let recorder = try harness.start(ClientRequest(method: "GET", path: "/_test/length?size=70000"),
                                             to: "https://localhost:\(port)", tls: tls)
            #expect(recorder.wait())
            #expect(recorder.error == nil && recorder.body.count == 70_000)
        }
        #expect(harness.client.socketsOpened == 1)
    }

    @Test func chunksArriveOneByOneOverTLS() throws {
        let (ca, port) = try fixture()
        let harness = try ClientHarness()
        let recorder = try harness.start(ClientRequest(method: "GET", path: "/_test/chunks?n=3&gap_ms=300&size=2"),
                                         to: "https://localhost:\(port)", tls: try harness.client.tlsContext(caFile: ca))
        #expect(recorder.wait())
        #expect(recorder.body == Array("000102".utf8))
        let times = recorder.heard.withLock { $0.parts.map(\.at) }
        #expect(times.count == 3 && times[2].timeIntervalSince(times[0]) > 0.45)
    }

    @Test func theSystemStoreDoesNotTrustAThrowawayCA() throws {
        let (_, port) = try fixture()
        let harness = try ClientHarness()
        let recorder = try harness.start(ClientRequest(method: "GET", path: "/_test/length"),
                                         to: "https://localhost:\(port)", tls: try harness.client.tlsContext(caFile: nil))
        #expect(recorder.wait())
        #expect(recorder.error?.code == .tls)
        #expect(recorder.error?.detail.contains("not trusted") == true, "\(String(describing: recorder.error))")
        #expect(recorder.status == nil, "no request was sent")
    }

    @Test func anAddressTheCertificateDoesNotNameIsRefused() throws {
        let (ca, port) = try fixture()
        let harness = try ClientHarness()
        let recorder = try harness.start(ClientRequest(method: "GET", path: "/_test/length"),
                                         to: "https://127.0.0.1:\(port)", tls: try harness.client.tlsContext(caFile: ca))
        #expect(recorder.wait())
        #expect(recorder.error?.code == .tls)
        #expect(recorder.error?.detail.contains("not trusted") == true, "\(String(describing: recorder.error))")
    }

    @Test func aMissingCAFileIsRefusedWhenTheContextIsMade() throws {
        #expect(throws: HTTPClientError.self) { try TLSContext(caFile: "/nonexistent/ca.pem") }
    }

    @Test func plainHTTPToATLSPortFailsRatherThanHangs() throws {
        let (_, port) = try fixture()
        let harness = try ClientHarness()
        let recorder = try harness.start(ClientRequest(method: "GET", path: "/_test/length",
                                                       deadlines: ClientDeadlines(connect: 2, firstByte: 2, idle: 2)),
                                         to: "http://localhost:\(port)")
        #expect(recorder.wait(5))
        #expect(recorder.error != nil)
    }
}
