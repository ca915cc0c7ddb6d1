import Foundation
import Glibc
import Postgres
import Testing
import TestSupport

/// A metrics token made for a pattern narrower than `*` (before `/metrics` required it) is
/// refused `/metrics`; `serve` says so when it starts, naming the token (never its secret), so
/// a scraper that stopped after an upgrade is explained in the log.
@Suite struct NarrowMetricsTokenTests {
    @Test func serveWarnsOfAMetricsTokenNarrowerThanEveryNamespace() throws {
        let database = try TestDatabase.shared.migratedDatabase(prefix: "narrowmetrics")
        let connection = try TestDatabase.shared.connect(database: database)
        try connection.execute("""
            INSERT INTO api_tokens (name, secret_hash, namespace_pattern, scopes)
            VALUES ('old-scraper', '\\x01'::bytea, 'team-a*', ARRAY['metrics']),
                   ('scraper', '\\x02'::bytea, '*', ARRAY['metrics']),
                   ('gone', '\\x03'::bytea, 'team-b*', ARRAY['metrics'])
            """)
        try connection.execute("UPDATE api_tokens SET revoked_at = now() WHERE name = 'gone'")
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("narrow-\(UUID().uuidString).log")
        #expect(FileManager.default.createFile(atPath: log.path, contents: nil))
        defer { try? FileManager.default.removeItem(at: log) }
        let stderr = try FileHandle(forWritingTo: log)
        let serve = try ServeProcess(database: database, environment: ["TEAMCACHE_AUTH": "on",
                                                                       "TEAMCACHE_LOG_LEVEL": "warn"], stderr: stderr)
        #expect(serve.waitUntilListening(seconds: 30))
        serve.stop(SIGTERM)
        try stderr.close()
        let text = try String(contentsOf: log, encoding: .utf8)
        #expect(text.contains("old-scraper") && text.contains("team-a*"), "\(text)")
        #expect(!text.contains("(scraper)"), "a token for '*' is not named")
        #expect(!text.contains("gone"), "a revoked token is not named")
    }
}
