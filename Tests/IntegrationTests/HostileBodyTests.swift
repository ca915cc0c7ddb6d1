import Foundation
import Testing
import TeamCache
import TestSupport

/// Query parameters, JSON members and settings at and past every limit, against the live
/// server: each answers a 4xx problem (or a sensible 2xx), never a 5xx, and stores nothing
/// it refused.
@Suite struct HostileBodyTests {
    let service = TestService.shared
    let namespace = TestService.namespace("hostile-body")
    let admin: String

    init() throws { admin = try service.token([.read, .write, .admin], namespaces: namespace) }

    private func post(_ route: String, _ json: String) throws -> RawClient.Response {
        try service.request("POST", "/v1/caches/\(namespace)/\(route)", token: admin, json: json)
    }

    private func expectRefused(_ response: RawClient.Response, _ label: String) {
        #expect((400...499).contains(response.status), "\(label) → \(response.status) \(response.text)")
        #expect(response.header("Content-Type") == "application/problem+json", "\(label)")
    }

    @Test func queryParametersPastTheirRangesAreRefused() throws {
        for query in ["ttl=99999999999999999999999", "ttl=-1", "ttl=0", "ttl=", "ttl=1e3", "ttl=%00", "ttl=0x10",
                      "ttl=１", "ttl=%zz", "ttl=1&ttl=2&ttl=abc", "ttl=9223372036854775808"] {
            let put = try service.request("PUT", entryPath(namespace, "q") + "?" + query, token: admin, body: [1])
            expectRefused(put, "PUT ?\(query)")
        }
        #expect(try service.request("GET", entryPath(namespace, "q"), token: admin).status == 404)
        for query in ["top=-1", "top=1001", "top=99999999999999999999", "top=", "top=a"] {
            expectRefused(try service.request("GET", "/v1/caches/\(namespace)/stats?\(query)", token: admin),
                          "stats ?\(query)")
        }
    }

    @Test func jsonMembersPastTheirRangesAreRefused() throws {
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        let descriptor = "\"model\":\"m\",\"prompt\":\"p\""
        let cases: [(String, String)] = [
            ("lookup", "{\(descriptor),\"max_stale\":1e400}"),
            ("lookup", "{\(descriptor),\"max_stale\":-1}"),
            ("lookup", "{\(descriptor),\"max_stale\":99999999999999999999999}"),
            ("lookup", "{\(descriptor),\"max_stale\":1.5}"),
            ("lookup", "{\(descriptor),\"params\":\(deep)}"),
            ("lookup", "{\"model\":\(deep)}"),
            ("lookup", "{\(descriptor),\"refresh\":\"yes\"}"),
            ("upsert", "{\(descriptor),\"response\":\"r\",\"ttl\":9223372036854775808}"),
            ("upsert", "{\(descriptor),\"response\":\"r\",\"ttl\":-9223372036854775809}"),
            ("upsert", "{\(descriptor),\"response\":\"r\",\"ttl\":1e308}"),
            ("upsert", "{\(descriptor),\"response\":\"r\",\"metadata\":{\"input_tokens\":1e30}}"),
            ("upsert", "{\(descriptor),\"response\":\"r\",\"metadata\":{\"output_tokens\":-5}}"),
            ("upsert", "{\(descriptor),\"response\":\"r\",\"tags\":[\"\(String(repeating: "t", count: 200))\"]}"),
            ("upsert", "{\(descriptor),\"response\":\"\"}"),
            ("evict", "{\"created_before\":\"300000-01-01T00:00:00Z\"}"),
            ("evict", "{\"accessed_before\":\"-300000-01-01T00:00:00Z\"}"),
            ("evict", "{\"created_before\":\"99999999-01-01T00:00:00Z\"}"),
            ("evict", "{\"older_than\":1e400}"),
            ("evict", "{\"idle_for\":-1}"),
            ("evict", "{\"older_than\":99999999999999999999999}"),
            ("evict", "{\"keys\":\(deep)}"),
            ("evict", "{}"),
            ("evict", "{\"all\":\"true\"}"),
        ]
        for (route, json) in cases {
            expectRefused(try post(route, json), "\(route) \(json.prefix(80))")
        }
        // Nothing the refused upserts carried was stored.
        let lookup = try object(try post("lookup", "{\(descriptor)}"))
        #expect(lookup["hit"] as? Bool == false)
    }

    @Test func settingsPastTheirRangesAreRefused() throws {
        let path = "/v1/caches/\(namespace)/settings"
        for json in ["{\"default_ttl\":99999999999999999999999}", "{\"default_ttl\":0}", "{\"default_ttl\":1e400}",
                     "{\"max_bytes\":-1}", "{\"max_bytes\":1e30}", "{\"max_bytes\":\"10\"}", "{\"default_ttl\":null,\"x\":1}",
                     "[]", "\"\"", "{\"default_ttl\":", String(repeating: "{\"a\":", count: 10_000)] {
            expectRefused(try service.request("PUT", path, token: admin, json: json), "settings \(json.prefix(60))")
        }
        #expect(try service.request("GET", path, token: admin).status == 200)
    }

    @Test func extremeConfigurationValuesAreRefusedOrClamped() throws {
        for (variable, value) in [("TEAMCACHE_MAX_BYTES", "9223372036854775807"), ("TEAMCACHE_RATE_LIMIT", "nan"),
                                  ("TEAMCACHE_DEFAULT_TTL", "inf"), ("TEAMCACHE_REQUEST_TIMEOUT", "1e400"),
                                  ("TEAMCACHE_DB_STATEMENT_TIMEOUT", "-1s"), ("TEAMCACHE_WORKERS", "99999999999999999999")] {
            #expect(throws: ConfigurationError.self, "\(variable)=\(value)") {
                _ = try Configuration.load(environment: [variable: value])
            }
        }
        // The largest accepted cap times the largest ratio saturates instead of trapping.
        let configuration = try Configuration.load(environment: ["TEAMCACHE_MAX_BYTES": String(1 << 60),
                                                                 "TEAMCACHE_HARD_CAP_RATIO": "10"])
        #expect(configuration.cache.storeHardCap == Int64.max)
    }
}
