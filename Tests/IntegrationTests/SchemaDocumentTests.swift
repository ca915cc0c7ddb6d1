import Foundation
import Postgres
import Testing
import TestSupport

/// `docs/schema.sql` is the schema the migrations make, as `pg_dump --schema-only` prints it:
/// the one place a reader sees every table, index, trigger and function as they are now
/// (`tc_put_entry` alone is redefined in five migrations). It fails when a migration changes
/// the schema and the page was not regenerated.
@Suite struct SchemaDocumentTests {
    static let page = TestPaths.repository.appendingPathComponent("docs/schema.sql")
    static let header = """
        -- The schema the migrations in migrations/ make, as `pg_dump --schema-only --no-owner
        -- --no-privileges` prints it (PostgreSQL 15). Generated, not edited: a test
        -- (SchemaDocumentTests) fails when it is not current. To regenerate:
        --   TEAMCACHE_UPDATE_SCHEMA=1 swift test --filter SchemaDocumentTests

        """

    @Test func docsSchemaIsWhatTheMigrationsMake() throws {
        let database = try TestDatabase.shared.migratedDatabase(prefix: "schema")
        let dumped = Self.header + Self.normalised(try Self.dump(database: database))
        if ProcessInfo.processInfo.environment["TEAMCACHE_UPDATE_SCHEMA"] == "1" {
            try Data(dumped.utf8).write(to: Self.page)
            return
        }
        let checkedIn = (try? String(contentsOf: Self.page, encoding: .utf8)) ?? ""
        let firstDifference = zip(checkedIn.split(separator: "\n", omittingEmptySubsequences: false),
                                  dumped.split(separator: "\n", omittingEmptySubsequences: false))
            .enumerated().first { $0.element.0 != $0.element.1 }
        #expect(checkedIn == dumped, """
            docs/schema.sql is not what the migrations make (first difference at line \
            \((firstDifference?.offset ?? 0) + 1): \(firstDifference.map { "\"\($0.element.0)\" vs \"\($0.element.1)\"" } ?? "length")). \
            Regenerate it: TEAMCACHE_UPDATE_SCHEMA=1 swift test --filter SchemaDocumentTests
            """)
    }

    /// The dump without what differs between otherwise equal runs: the server's and pg_dump's
    /// minor versions, and the random key of the `\restrict` lines newer pg_dumps print.
    static func normalised(_ dump: String) -> String {
        let kept = dump.split(separator: "\n", omittingEmptySubsequences: false).filter { line in
            !line.hasPrefix("-- Dumped from database version") && !line.hasPrefix("-- Dumped by pg_dump version")
                && !line.hasPrefix("\\restrict") && !line.hasPrefix("\\unrestrict")
        }
        // Runs of blank lines (left where the dropped lines were) as one.
        var lines: [Substring] = []
        for line in kept where !(line.isEmpty && lines.last?.isEmpty == true) { lines.append(line) }
        return lines.joined(separator: "\n")
    }

    static func dump(database: String) throws -> String {
        guard var url = URLComponents(string: TestDatabase.shared.url), url.scheme?.hasPrefix("postgres") == true else {
            throw DumpError.notAURL
        }
        url.path = "/" + database
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("schema-\(UUID().uuidString).sql")
        defer { try? FileManager.default.removeItem(at: output) }
        let owner = getuid() == 0 ? ["/usr/sbin/runuser", "-u", "postgres", "--"] : []
        let status = try Subprocess.run(owner + [try EmbeddedPostgres.locate("pg_dump"), "--schema-only", "--no-owner",
                                                 "--no-privileges", "--dbname", url.string ?? ""], output: output)
        let text = try String(contentsOf: output, encoding: .utf8)
        guard status == 0 else { throw DumpError.failed(status, String(text.suffix(2000))) }
        return text
    }

    enum DumpError: Error {
        case notAURL
        case failed(Int32, String)
    }
}
