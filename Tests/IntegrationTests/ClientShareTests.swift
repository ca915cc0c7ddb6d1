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
        // Served again once the loop has seen the close (asked until then: 503s meanwhile).
        let port = service.port
        func health() -> Int { (try? RawClient(port: port, timeout: 10).request("GET", "/healthz").status) ?? 503 }
        var again = health()
        for _ in 0..<100 where again == 503 {
            Thread.sleep(forTimeInterval: 0.05)
            again = health()
        }
        #expect(again == 200)
        held.removeAll()
        var metrics = (try? service.metrics()) ?? ""
        for _ in 0..<100 where metrics.isEmpty {
            Thread.sleep(forTimeInterval: 0.05)
            metrics = (try? service.metrics()) ?? ""
        }
        #expect(metricSample(metrics, "teamcache_http_connections_refused_total{limit=\"client_limit\"}") >= 1)
    }
}
