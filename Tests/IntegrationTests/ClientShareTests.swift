import Foundation
import Testing
import TeamCache
import TestSupport

/// No one client address can take what every client shares: connection slots.
@Suite(.serialized) struct ClientShareTests {
    /// At its limit a client's next connection gets 503 and is closed; another address is
    /// served meanwhile, and the first is served again once it closes one.
    @Test func oneClientCannotHoldEveryConnectionSlot() throws {
        let service = try TestService {
            $0.authEnabled = false
            $0.http.maxConnectionsPerClient = 5
        }
        defer { service.stop() }
        var held: [RawClient] = []
        for _ in 0..<5 {
            let client = try RawClient(port: service.port, timeout: 10)
            #expect(try client.request("GET", "/healthz").status == 200)
            held.append(client)
        }
        let refused = try RawClient(port: service.port, timeout: 10).readResponse()
        #expect(refused.status == 503 && refused.text.contains("as many connections as one client may"))
        let neighbour = try RawClient(port: service.port, timeout: 10, from: "127.0.0.2")
        #expect(try neighbour.request("GET", "/healthz").status == 200)
        held.removeLast()
        Thread.sleep(forTimeInterval: 0.2)
        #expect(try RawClient(port: service.port, timeout: 10).request("GET", "/healthz").status == 200)
        held.removeAll()
        Thread.sleep(forTimeInterval: 0.2)
        let metrics = try service.metrics()
        #expect(metricSample(metrics, "teamcache_http_connections_refused_total{limit=\"client_limit\"}") >= 1)
    }
}
