import CacheCore
import CacheStore
import Foundation
import Glibc
import Postgres
import TeamCache
import Testing
import TestSupport

/// Stale-while-revalidate (RFC 5861): past expiry, within the entry's window, every lookup
/// is answered from the stale entry and exactly one caller is handed a refresh lease.
@Suite struct StaleWhileRevalidateTests {
    static let descriptor = "\"model\":\"m\",\"prompt\":\"refresh me\""

    /// 20 lookups at once over two replicas after expiry: all 20 are stale hits, exactly one
    /// carries the refresh lease; its upsert makes the entry fresh for everyone.
    @Test func twentyStaleLookupsHandOutOneRefreshLeaseAcrossReplicas() throws {
        let database = try TestDatabase.shared.migratedDatabase(prefix: "swr")
        let replicas = [try ServeProcess(database: database), try ServeProcess(database: database)]
        defer { for replica in replicas { replica.stop(SIGTERM) } }
        for replica in replicas { try #require(replica.waitUntilListening()) }
        let upsert = try RawClient(port: replicas[0].port, timeout: 10).request(
            "POST", "/v1/caches/swr/upsert", headers: [("Content-Type", "application/json")],
            body: Array("{\(Self.descriptor),\"response\":\"old\",\"ttl\":1,\"stale_while_revalidate\":60}".utf8))
        #expect(upsert.status == 201)
        Thread.sleep(forTimeInterval: 1.3)
        let (group, answers) = WaitTests.burst(20, ports: replicas.map(\.port), namespace: "swr",
                                               body: "{\(Self.descriptor)}")
        #expect(group.wait(timeout: .now() + 10) == .success)
        let objects = answers.value.map(\.object)
        #expect(objects.count == 20)
        #expect(objects.allSatisfy { $0["hit"] as? Bool == true && $0["stale"] as? Bool == true
            && $0["response"] as? String == "old" }, "\(objects)")
        let leases = objects.compactMap { ($0["revalidate"] as? [String: Any])?["lease"] as? String }
        #expect(leases.count == 1, "\(objects)")
        let refreshed = try RawClient(port: replicas[1].port, timeout: 10).request(
            "POST", "/v1/caches/swr/upsert", headers: [("Content-Type", "application/json")],
            body: Array("{\(Self.descriptor),\"response\":\"new\",\"lease\":\"\(leases.first ?? "")\"}".utf8))
        #expect(refreshed.status == 201, "an expired entry rewritten is a creation")
        for replica in replicas {
            let fresh = try object(try RawClient(port: replica.port, timeout: 10).request(
                "POST", "/v1/caches/swr/lookup", headers: [("Content-Type", "application/json")],
                body: Array("{\(Self.descriptor)}".utf8)))
            #expect(fresh["stale"] as? Bool == false && fresh["response"] as? String == "new"
                && fresh["revalidate"] == nil, "\(fresh)")
        }
    }

    /// Raw entries: the window from `Cache-Control` on PUT; the lease as `TeamCache-Lease` on
    /// the first GET only (never on HEAD); the holder's PUT makes the entry fresh.
    @Test func aRawEntryIsServedStaleWithOneRefreshLease() throws {
        let clock = ManualClock()
        let service = try TestService(clock: clock) { $0.authEnabled = false }
        defer { service.stop() }
        let namespace = TestService.namespace("swr-raw")
        let path = entryPath(namespace, "k")
        let put = try service.request("PUT", path + "?ttl=10", headers: [("Cache-Control", "stale-while-revalidate=100")],
                                      body: Array("old".utf8))
        #expect(put.status == 201)
        clock.advance(by: 15)
        let head = try service.request("HEAD", path)
        #expect(head.status == 200 && head.header("TeamCache-Lease") == nil)
        let first = try service.request("GET", path)
        #expect(first.status == 200 && first.body == Array("old".utf8))
        #expect(first.header("Cache-Status")?.hasPrefix("teamcache; hit; ttl=-") == true)
        let lease = try #require(first.header("TeamCache-Lease")?.split(separator: ";").first.map(String.init))
        #expect(first.header("TeamCache-Lease")?.hasSuffix("expires_in=30") == true)
        let second = try service.request("GET", path)
        #expect(second.status == 200 && second.header("TeamCache-Lease") == nil)
        #expect(try service.request("PUT", path + "?ttl=10", headers: [("TeamCache-Lease", lease)],
                                    body: Array("new".utf8)).status == 201)
        let fresh = try service.request("GET", path)
        #expect(fresh.body == Array("new".utf8) && fresh.header("Cache-Status") == "teamcache; hit; ttl=10")
        #expect(fresh.header("TeamCache-Lease") == nil)
    }

    /// A refresh lease that runs out unfilled: the next stale lookup gets a new one. Past the
    /// window the entry is a miss.
    @Test func anUnfilledRefreshLeaseIsGrantedAgainAndTheWindowEnds() throws {
        let clock = ManualClock()
        let service = try TestService(clock: clock) { $0.authEnabled = false }
        defer { service.stop() }
        let namespace = TestService.namespace("swr-again")
        let upsert = "{\(Self.descriptor),\"response\":\"old\",\"ttl\":10,\"stale_while_revalidate\":60}"
        #expect(try service.request("POST", "/v1/caches/\(namespace)/upsert", json: upsert).status == 201)
        clock.advance(by: 20)
        func lookup() throws -> [String: Any] {
            try object(try service.request("POST", "/v1/caches/\(namespace)/lookup",
                                           json: "{\(Self.descriptor),\"lease\":1}"))
        }
        let first = try lookup()
        let granted = try #require(first["revalidate"] as? [String: Any])
        #expect(granted["expires_in"] as? Int == 1 && first["stale"] as? Bool == true)
        #expect(try lookup()["revalidate"] == nil, "the lease is live")
        // The lease runs on the database's clock.
        Thread.sleep(forTimeInterval: 2.2)
        let again = try #require(try lookup()["revalidate"] as? [String: Any])
        #expect(again["lease"] as? String != granted["lease"] as? String)
        clock.advance(by: 60)
        let past = try lookup()
        #expect(past["hit"] as? Bool == false, "\(past)")
    }

    /// The eviction job keeps an entry through its window even when the window outlasts the
    /// stale retention, and removes it after.
    @Test func evictionHonoursAWindowLongerThanTheStaleRetention() throws {
        let database = try TestDatabase.shared.migratedDatabase(prefix: "swrev")
        let clock = ManualClock()
        let service = try TestService(clock: clock) {
            let base = TestDatabase.shared.url
            $0.databaseURL = base + (base.contains("?") ? "&" : "?") + "dbname=\(database)"
            $0.authEnabled = false
            $0.cache.staleRetention = 0
        }
        defer { service.stop() }
        let path = entryPath("ev", "k")
        #expect(try service.request("PUT", path + "?ttl=10", headers: [("Cache-Control", "stale-while-revalidate=100")],
                                    body: [1]).status == 201)
        clock.advance(by: 50)
        #expect(service.app.eviction.runCycle()?.entries[.expired, default: 0] == 0)
        #expect(try service.request("GET", path).status == 200)
        clock.advance(by: 100)
        #expect(service.app.eviction.runCycle()?.entries[.expired, default: 0] == 1)
        #expect(try service.request("GET", path).status == 404)
    }

    /// 2,500 entries kept by their window sit first in the expiry index, before 1,500 that are
    /// due: one cycle walks past the kept ones (more than a batch) and deletes exactly the due.
    @Test func evictionWalksPastManyKeptEntries() throws {
        let database = try TestDatabase.shared.migratedDatabase(prefix: "swrwalk")
        let pool = ConnectionPool(.init(url: TestDatabase.shared.url,
                                        overrides: TestDatabase.shared.overrides(database: database), maxConnections: 4))
        var policy = CachePolicy()
        policy.staleRetention = 3600
        let clock = ManualClock()
        let store = EntryStore(pool: pool, policy: policy, clock: clock)
        let now = clock.now()
        _ = try pool.withConnection { connection in
            // Kept: expired 3 to 2 hours ago (past the retention) with a day-long window. Due:
            // expired 90 to 70 minutes ago, no window. Same expiry for runs of keys (ties).
            try connection.query("""
                INSERT INTO entries (namespace, key, body, encoding, content_type, identity_size, stored_size, etag,
                                     created_at, updated_at, expires_at, stale_while_revalidate)
                SELECT 'walk', convert_to('k' || i, 'UTF8'), '\\x00', 'identity', 't', 1, 1, 'e', $1, $1,
                       CASE WHEN i <= 2500 THEN $1 - interval '3 hours' + (i / 10) * interval '1 second'
                            ELSE $1 - interval '90 minutes' + (i / 10) * interval '1 second' END,
                       CASE WHEN i <= 2500 THEN 86400 ELSE 0 END
                FROM generate_series(1, 4000) AS i
                """, [.timestamp(now)])
        }
        let report = try #require(EvictionJob(store: store).runCycle())
        #expect(report.entries[.expired] == 1500)
        let left = try pool.withConnection { try $0.query("SELECT count(*)::int8 AS n FROM entries").first?.int("n") }
        #expect(left == 2500)
    }

    /// Bad windows are refused and store nothing.
    @Test func badWindowsAreRefused() throws {
        let service = TestService.shared
        let namespace = TestService.namespace("swr-bad")
        let token = try writer(namespace)
        for value in ["abc", "-1", "", "99999999999"] {
            let put = try service.request("PUT", entryPath(namespace, "k"), token: token,
                                          headers: [("Cache-Control", "stale-while-revalidate=\(value)")], body: [1])
            #expect(put.status == 400, "stale-while-revalidate=\(value)")
            #expect(put.header("Content-Type") == "application/problem+json")
        }
        let bare = try service.request("PUT", entryPath(namespace, "k"), token: token,
                                       headers: [("Cache-Control", "stale-while-revalidate")], body: [1])
        #expect(bare.status == 400)
        for value in ["-1", "\"60\"", "1.5", "99999999999", "true"] {
            let body = "{\(Self.descriptor),\"response\":\"r\",\"stale_while_revalidate\":\(value)}"
            let upsert = try service.request("POST", "/v1/caches/\(namespace)/upsert", token: token, json: body)
            #expect(upsert.status == 422, "stale_while_revalidate: \(value)")
        }
        #expect(try service.request("GET", entryPath(namespace, "k"), token: token).status == 404)
        let lookup = try object(try service.request("POST", "/v1/caches/\(namespace)/lookup", token: token,
                                                    json: "{\(Self.descriptor)}"))
        #expect(lookup["hit"] as? Bool == false)
    }
}
