import CacheStore
import Foundation
import Glibc
import Locking
import Postgres
import TeamCache
import Testing
import TestSupport

/// Miss leases (single-flight): one caller of a burst is the filler, across replicas.
@Suite struct LeaseTests {
    static let descriptor = "\"model\":\"m\",\"prompt\":\"the burst prompt\""

    static func json(_ response: RawClient.Response) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any])
    }

    /// 50 lookups of one new prompt at once, split over two `serve` processes on one
    /// database: exactly one is granted the lease, the 49 others are told it is pending;
    /// the holder's upsert completes it and every replica then answers hits.
    @Test func exactlyOneOfFiftyLookupsAcrossTwoReplicasGetsTheLease() throws {
        let database = try TestDatabase.shared.migratedDatabase(prefix: "lease")
        let replicas = [try ServeProcess(database: database), try ServeProcess(database: database)]
        defer { for replica in replicas { replica.stop(SIGTERM) } }
        for replica in replicas { try #require(replica.waitUntilListening()) }
        let body = Array("{\(Self.descriptor),\"lease\":30}".utf8)
        let answers = Locked<[[String: Any]]>([])
        let start = DispatchSemaphore(value: 0)
        let group = DispatchGroup()
        for index in 0..<50 {
            group.enter()
            let port = replicas[index % 2].port
            Thread.detachNewThread {
                defer { group.leave() }
                guard let client = try? RawClient(port: port, timeout: 10) else { return }
                start.wait()
                if let response = try? client.request("POST", "/v1/caches/burst/lookup",
                                                      headers: [("Content-Type", "application/json")], body: body),
                   let object = try? JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any] {
                    answers.withLock { $0.append(object) }
                }
            }
        }
        Thread.sleep(forTimeInterval: 0.3)
        for _ in 0..<50 { start.signal() }
        #expect(group.wait(timeout: .now() + 20) == .success)
        let all = answers.value
        let granted = all.compactMap { $0["lease"] as? [String: Any] }
        let pending = all.filter { $0["pending"] as? Bool == true }
        #expect(all.count == 50 && granted.count == 1 && pending.count == 49, "\(all.count) \(granted.count) \(pending.count)")
        #expect(pending.allSatisfy { ($0["retry_after"] as? Int ?? 0) >= 1 })
        let lease = try #require(granted.first?["id"] as? String)
        #expect(lease.hasPrefix("tcl_") && lease.utf8.count == 68)
        // The holder fills it; both replicas answer hits, and the lease is gone (completed).
        let client = try RawClient(port: replicas[1].port, timeout: 10)
        let upsert = try client.request("POST", "/v1/caches/burst/upsert", headers: [("Content-Type", "application/json")],
                                        body: Array("{\(Self.descriptor),\"response\":\"the answer\",\"lease\":\"\(lease)\"}".utf8))
        #expect(upsert.status == 201)
        for replica in replicas {
            let hit = try RawClient(port: replica.port, timeout: 10).request(
                "POST", "/v1/caches/burst/lookup", headers: [("Content-Type", "application/json")], body: body)
            #expect(try Self.json(hit)["hit"] as? Bool == true)
        }
        let rows = try TestDatabase.shared.connect(database: database)
            .query("SELECT count(*)::int8 AS n FROM leases").first?.int("n")
        #expect(rows == 0)
    }

    /// A lease is its token's: another token, even with write scope, cannot release or
    /// complete it; its holder can release it, and the next caller then gets the key.
    @Test func aLeaseIsBoundToTheTokenThatGotIt() throws {
        let service = try TestService()
        defer { service.stop() }
        let namespace = TestService.namespace("lease-auth")
        let holder = try service.token([.read, .write], namespaces: "*")
        let other = try service.token([.read, .write], namespaces: "*")
        let first = try service.request("GET", entryPath(namespace, "k") + "?lease=30", token: holder)
        #expect(first.status == 404 && first.header("Cache-Status") == "teamcache; fwd=miss")
        let header = try #require(first.header("TeamCache-Lease"))
        let id = String(try #require(header.split(separator: ";").first))
        #expect(header.hasSuffix("expires_in=30"))
        #expect(try Self.json(first)["lease"] as? String == id)
        // Another caller meanwhile: pending, with the lease's time left.
        let second = try service.request("GET", entryPath(namespace, "k") + "?lease=30", token: other)
        #expect(second.status == 404 && second.header("Cache-Status") == "teamcache; fwd=miss; detail=pending")
        #expect(Int(second.header("Retry-After") ?? "") ?? 0 >= 29)
        let release = "{\"key\":\"k\",\"lease\":\"\(id)\"}"
        #expect(try service.request("POST", "/v1/caches/\(namespace)/release", token: other, json: release).status == 404)
        // Another token's write is stored (last write wins) but does not complete the lease.
        #expect(try service.request("PUT", entryPath(namespace, "k"), token: other,
                                    headers: [("TeamCache-Lease", id)], body: [1]).status == 201)
        #expect(try service.request("POST", "/v1/caches/\(namespace)/release", token: holder, json: release).status == 204)
        #expect(try service.request("POST", "/v1/caches/\(namespace)/release", token: holder, json: release).status == 404)
        #expect(try service.request("DELETE", entryPath(namespace, "k"), token: holder).status == 204)
        let again = try service.request("GET", entryPath(namespace, "k") + "?lease=30", token: other)
        #expect(again.header("TeamCache-Lease") != nil, "the released key was not free for the next caller")
    }

    /// A lease is the right to fill: a token that cannot write the namespace is answered as if
    /// it asked none (a miss, then a hit; and no refresh lease on a stale-while-revalidate
    /// entry), never handed one it could neither fill nor give back while others wait on it.
    @Test func aTokenThatCannotWriteIsNeverHandedALease() throws {
        let service = TestService.shared
        let namespace = TestService.namespace("lease-read-only")
        let reader = try service.token([.read], namespaces: namespace)
        let writer = try service.token([.read, .write], namespaces: namespace)
        let miss = try service.request("GET", entryPath(namespace, "k") + "?lease=30", token: reader)
        #expect(miss.status == 404 && miss.header("TeamCache-Lease") == nil)
        let lookup = try Self.json(try service.request("POST", "/v1/caches/\(namespace)/lookup", token: reader,
                                                       json: "{\(Self.descriptor),\"lease\":30}"))
        #expect(lookup["hit"] as? Bool == false && lookup["lease"] == nil)
        // The key is free for a caller that can fill it.
        let filler = try service.request("GET", entryPath(namespace, "k") + "?lease=30", token: writer)
        #expect(filler.header("TeamCache-Lease") != nil)
        let fillerLookup = try Self.json(try service.request("POST", "/v1/caches/\(namespace)/lookup", token: writer,
                                                             json: "{\(Self.descriptor),\"lease\":30}"))
        #expect(fillerLookup["lease"] != nil)
    }

    /// A lease that runs out unfilled frees the key for the next caller.
    @Test func anExpiredLeaseIsGrantedAgain() throws {
        let service = try TestService { $0.authEnabled = false }
        defer { service.stop() }
        let path = entryPath(TestService.namespace("lease-exp"), "k") + "?lease=1"
        #expect(try service.request("GET", path).header("TeamCache-Lease") != nil)
        #expect(try service.request("GET", path).header("Cache-Status") == "teamcache; fwd=miss; detail=pending")
        Thread.sleep(forTimeInterval: 1.2)
        #expect(try service.request("GET", path).header("TeamCache-Lease") != nil)
        let metrics = try service.metrics()
        #expect(metricSample(metrics, "teamcache_leases_total{outcome=\"expired\"}") >= 1)
        #expect(metricSample(metrics, "teamcache_leases_total{outcome=\"granted\"}") == 2)
    }

    /// Bad lease values are refused before anything happens.
    @Test func badLeaseValuesAreProblems() throws {
        let service = try TestService { $0.authEnabled = false }
        defer { service.stop() }
        let namespace = TestService.namespace("lease-bad")
        #expect(try service.request("GET", entryPath(namespace, "k") + "?lease=0").status == 400)
        #expect(try service.request("GET", entryPath(namespace, "k") + "?lease=601").status == 400)
        let lookup = try service.request("POST", "/v1/caches/\(namespace)/lookup", json: "{\(Self.descriptor),\"lease\":0}")
        #expect(lookup.status == 422)
        let put = try service.request("PUT", entryPath(namespace, "k"), headers: [("TeamCache-Lease", "tcl_nope")], body: [1])
        #expect(put.status == 400 && put.header("Content-Type") == "application/problem+json")
        #expect(try service.request("GET", entryPath(namespace, "k")).status == 404, "a refused write stored something")
        let release = try service.request("POST", "/v1/caches/\(namespace)/release", json: "{\"key\":\"k\",\"lease\":\"x\"}")
        #expect(release.status == 400)
        let unknown = "tcl_" + String(repeating: "0", count: 64)
        #expect(try service.request("POST", "/v1/caches/\(namespace)/release",
                                    json: "{\"key\":\"k\",\"lease\":\"\(unknown)\"}").status == 404)
    }
}
