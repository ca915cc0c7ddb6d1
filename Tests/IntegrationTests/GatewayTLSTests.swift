import Foundation
import Testing
import TestSupport

/// The gateway to an https upstream: verified against the upstream's CA file (SNI, host
/// name), and a certificate the service cannot trust (unknown CA, or a name it was not made
/// for) is a 502 problem naming the upstream, never a call made anyway.
@Suite(.serialized) struct GatewayTLSTests {
    static let ca = Result { try ThrowawayCA() }
    static let harness = Result { try GatewayHarness(tls: try ca.get()) }
    static let service = Result { try harness.get().service() }

    @Test func aVerifiedUpstreamIsCalledAndCached() throws {
        let service = try Self.service.get()
        let namespace = TestService.namespace("gwtls")
        let headers = [("TeamCache-Authorization", "Bearer \(try service.token([.read, .write], namespaces: namespace))")]
        let prompt = ModelBodies.unique("tls")
        let target = "/v1/caches/\(namespace)/gateway/secure/chat/completions"
        let first = try StreamedAnswer.read(port: service.port, target, headers: headers,
                                            body: ModelBodies.chat(prompt, stream: true))
        #expect(first.head.status == 200 && first.text.hasSuffix("data: [DONE]\n\n"))
        let second = try StreamedAnswer.read(port: service.port, target, headers: headers,
                                             body: ModelBodies.chat(prompt, stream: true))
        #expect(second.head.header("X-TeamCache") == "hit" && second.body == first.body)
    }

    @Test(arguments: ["untrusted", "wrongname"]) func anUntrustedCertificateIs502(upstream: String) throws {
        let service = try Self.service.get()
        let namespace = TestService.namespace("gwtls")
        let headers = [("TeamCache-Authorization", "Bearer \(try service.token([.read, .write], namespaces: namespace))")]
        let answer = try service.request("POST", "/v1/caches/\(namespace)/gateway/\(upstream)/chat/completions",
                                         headers: headers, json: ModelBodies.chat(ModelBodies.unique("tls")))
        #expect(answer.status == 502)
        let problem = try object(answer)
        #expect(problem["upstream"] as? String == upstream && problem["reason"] as? String == "tls")
    }
}
