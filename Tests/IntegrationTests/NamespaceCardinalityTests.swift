import CacheCore
import CacheStore
import Foundation
import Locking
import Postgres
import Testing
import TestSupport

/// A token cannot grow `/metrics` or the server's memory by asking for namespaces that
/// hold nothing: those lookups are counted under one `_other` series.
@Suite(.serialized) struct NamespaceCardinalityTests {
    @Test func tenThousandEmptyNamespacesLeaveMetricsBounded() throws {
        // A database of its own: the namespace gauges list every namespace of the database,
        // and other suites add theirs to the shared one while this counts lines.
        let name = try TestDatabase.shared.migratedDatabase(prefix: "card")
        let base = TestDatabase.shared.url
        let url = base + (base.contains("?") ? "&" : "?") + "dbname=\(name)"
        let service = try TestService { $0.databaseURL = url }
        defer { service.stop() }
        let token = try service.token([.read, .write], namespaces: "*")
        let reader = try service.token([.read], namespaces: "*")
        let held = TestService.namespace("held")
        #expect(try service.request("PUT", entryPath(held, "k"), token: token, body: [1]).status == 201)
        // Every route's and status's series exist before the count starts.
        #expect(try service.request("GET", entryPath(held, "k"), token: token).status == 200)
        #expect(try service.request("GET", entryPath(held, "nope"), token: token).status == 404)
        _ = try service.metrics()
        let before = try service.metrics().split(separator: "\n").count
        let client = try RawClient(port: service.port, timeout: 10)
        let prefix = TestService.namespace("empty")
        for batch in 0..<100 {
            var requests = ""
            for index in 0..<100 {
                requests += "GET /v1/caches/\(prefix)-\(batch * 100 + index)/entries/k HTTP/1.1\r\nHost: t\r\n"
                    + "Authorization: Bearer \(reader)\r\n\r\n"
            }
            try client.send(requests)
            for _ in 0..<100 { #expect(try client.readResponse().status == 404) }
        }
        let metrics = try service.metrics()
        let after = metrics.split(separator: "\n").count
        // No series names an empty namespace; they are all in `_other` (other new lines, a
        // status class or a histogram, do not depend on how many namespaces were asked for).
        #expect(!metrics.contains(prefix), "a series names an empty namespace")
        #expect(after - before < 40, "/metrics grew from \(before) to \(after) lines")
        #expect(metrics.contains("teamcache_lookups_total{namespace=\"_other\",result=\"miss\"} 10000"))
        #expect(metrics.contains("teamcache_lookups_total{namespace=\"\(held)\",result=\"miss\"} 1"))
        #expect(metrics.contains("teamcache_lookups_total{namespace=\"\(held)\",result=\"hit\"} 1"))
        // Nor do they get stats rows in the database; the store-wide totals still count them.
        try service.app.tracker.flush()
        let connection = try TestDatabase.shared.connect(database: name)
        let rows = try connection.query("SELECT count(*)::int8 AS n FROM namespace_counters WHERE namespace LIKE $1",
                                        [.text(prefix + "%")])
        #expect(try rows.rows.first?.int("n") == 0)
        // A token that may write them gets a namespace's first misses counted as its own, up to
        // the provisional cap (100): asking for 300 names labels 100, the rest go to `_other`.
        let written = TestService.namespace("written")
        var requests = ""
        for index in 0..<300 {
            requests += "GET /v1/caches/\(written)-\(index)/entries/k HTTP/1.1\r\nHost: t\r\n"
                + "Authorization: Bearer \(token)\r\n\r\n"
        }
        try client.send(requests)
        for _ in 0..<300 { #expect(try client.readResponse().status == 404) }
        let labelled = try service.metrics().split(separator: "\n")
            .filter { $0.hasPrefix("teamcache_lookups_total{namespace=\"\(written)-") }
        #expect(labelled.count == NamespaceLabels.defaultProvisionalCapacity, "\(labelled.count) labelled")
        #expect(try service.metrics().contains("teamcache_lookups_total{namespace=\"_other\",result=\"miss\"} 10200"))
    }

    /// A replica just started knows the namespaces the store holds before it listens: a
    /// namespace it has not been asked about yet gets its first lookups counted as its own
    /// (before, they went to `_other` until the first refresh, 15 s after every deploy).
    @Test func aServiceJustStartedCountsAHeldNamespaceAsItsOwn() throws {
        let name = try TestDatabase.shared.migratedDatabase(prefix: "card")
        let base = TestDatabase.shared.url
        let url = base + (base.contains("?") ? "&" : "?") + "dbname=\(name)"
        let held = TestService.namespace("held")
        let writer = try TestService { $0.databaseURL = url }
        let token = try writer.token([.read, .write], namespaces: "*")
        #expect(try writer.request("PUT", entryPath(held, "k"), token: token, body: [1]).status == 201)
        writer.stop()
        let started = try TestService { $0.databaseURL = url }
        defer { started.stop() }
        let reader = try started.token([.read], namespaces: "*")
        #expect(try started.request("GET", entryPath(held, "nope"), token: reader).status == 404)
        let metrics = try started.metrics()
        #expect(metrics.contains("teamcache_lookups_total{namespace=\"\(held)\",result=\"miss\"} 1"),
                "the first lookup went to `_other`")
    }
}
