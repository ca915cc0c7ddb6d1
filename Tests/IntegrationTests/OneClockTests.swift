import CacheCore
import Foundation
import Postgres
import Testing
import TeamCache
import TestSupport

/// One clock for what is stored: writes are stamped by the database, and imports cannot date
/// an entry in the future, where no eviction (which keeps what was written after it began)
/// could reach it.
@Suite struct OneClockTests {
    /// The clock of a replica whose wall clock runs ahead; it stamps with the database's, as
    /// the system clock does.
    struct FastClock: Clock {
        let ahead: TimeInterval
        func now() -> Date { Date().addingTimeInterval(ahead) }
        var stampsWithDatabaseClock: Bool { true }
    }

    static func updatedAt(_ url: String, _ namespace: String) throws -> [Date] {
        let connection = try PostgresConnection(url: url, limits: .unbounded)
        return try connection.query("SELECT updated_at FROM entries WHERE namespace = $1", [.text(namespace)]).rows
            .compactMap { try $0.date("updated_at") }
    }

    /// A replica an hour ahead writes; another evicts everything: nothing is left behind.
    @Test func aFastReplicasWritesCanBeEvicted() throws {
        let url = try DumpTests.databaseURL(prefix: "fastclock")
        let fast = try TestService(clock: FastClock(ahead: 3600)) { $0.databaseURL = url; $0.authEnabled = false }
        defer { fast.stop() }
        let normal = try TestService { $0.databaseURL = url; $0.authEnabled = false }
        defer { normal.stop() }
        #expect(try fast.request("PUT", entryPath("skew", "raw") + "?ttl=86400", body: [1]).status == 201)
        #expect(try fast.request("POST", "/v1/caches/skew/upsert",
                                 json: "{\"model\":\"m\",\"prompt\":\"p\",\"response\":\"r\",\"ttl\":86400}").status == 201)
        let stamps = try Self.updatedAt(url, "skew")
        #expect(stamps.count == 2 && stamps.allSatisfy { $0 < Date().addingTimeInterval(60) }, "\(stamps)")
        let evicted = try object(try normal.request("POST", "/v1/caches/skew/evict", json: "{\"all\":true}"))
        #expect(evicted["evicted"] as? Int == 2)
        #expect(try Self.updatedAt(url, "skew").isEmpty)
    }

    /// A dump that dates its entry a month ahead is imported as of now, and can be evicted.
    @Test func importedTimestampsAreClampedToNow() throws {
        let (service, url) = try DumpTests.service(prefix: "futuredump")
        defer { service.stop() }
        let format = ISO8601DateFormatter()
        let ahead = format.string(from: Date().addingTimeInterval(30 * 86400))
        let expires = format.string(from: Date().addingTimeInterval(60 * 86400))
        let line = "{\"namespace\":\"future\",\"key\":\"k\",\"body\":\"v\",\"created_at\":\"\(ahead)\","
            + "\"updated_at\":\"\(ahead)\",\"expires_at\":\"\(expires)\",\"last_accessed_at\":\"\(ahead)\"}\n"
        let answer = try service.request("POST", "/v1/caches/future/import", body: Array(line.utf8))
        #expect(answer.status == 200 && answer.text.contains("\"imported\":1"), "\(answer.text)")
        let stamps = try Self.updatedAt(url, "future")
        #expect(stamps.count == 1 && stamps.allSatisfy { $0 < Date().addingTimeInterval(60) }, "\(stamps)")
        let connection = try PostgresConnection(url: url, limits: .unbounded)
        let accessed = try connection.query("SELECT max(last_accessed_at) AS at FROM entry_access").first?.date("at")
        #expect(accessed.map { $0 < Date().addingTimeInterval(60) } == true)
        let evicted = try object(try service.request("POST", "/v1/caches/future/evict", json: "{\"all\":true}"))
        #expect(evicted["evicted"] as? Int == 1)
    }
}
