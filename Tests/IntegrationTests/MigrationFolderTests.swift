import Foundation
import Glibc
import Postgres
import Testing
import TeamCache
import TestSupport

/// `teamcache migrate` run from a folder that holds some other `migrations/` applies the
/// ones shipped with the binary, and says which folder it read.
@Suite struct MigrationFolderTests {
    @Test func migrateFromAFolderWithItsOwnMigrationsUsesTheShippedOnes() throws {
        let folder = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("tc-cwd-\(getpid())")
        let planted = folder.appendingPathComponent("migrations")
        try FileManager.default.createDirectory(at: planted, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        try "DROP TABLE entries;\n".write(to: planted.appendingPathComponent("0001_drop_everything.sql"),
                                          atomically: true, encoding: .utf8)
        let name = try TestDatabase.shared.freshDatabase(prefix: "cwd")
        let base = TestDatabase.shared.url
        let url = base + (base.contains("?") ? "&" : "?") + "dbname=\(name)"
        let binary = TestPaths.repository.appendingPathComponent(".build/debug/teamcache").path
        let output = folder.appendingPathComponent("out.txt")
        let status = try Subprocess.run(["/bin/sh", "-c", "cd '\(folder.path)' && exec '\(binary)' migrate --database-url '\(url)'"],
                                        output: output)
        let printed = try String(contentsOf: output, encoding: .utf8)
        #expect(status == 0, "\(printed)")
        #expect(printed.contains("migrations from \(TestPaths.migrations.standardizedFileURL.path)"), "\(printed)")
        #expect(!printed.contains("drop_everything"), "\(printed)")
        let tables = try TestDatabase.shared.connect(database: name)
            .query("SELECT to_regclass('entries') IS NOT NULL AS present").first?.bool("present")
        #expect(tables == true)
    }
}
