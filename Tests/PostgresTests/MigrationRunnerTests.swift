import Locking
import Foundation
import Postgres
import Testing
import TestSupport

@Suite struct MigrationRunnerTests {
    let migrations = [
        Migration(version: 1, name: "create_a", sql: "CREATE TABLE a (id int PRIMARY KEY);"),
        Migration(version: 2, name: "create_b", sql: "CREATE TABLE b (id int); INSERT INTO b VALUES (1);"),
    ]

    @Test func appliesOnEmptyDatabaseThenIsNoOp() throws {
        let connection = try TestDatabase.shared.connect(database: try TestDatabase.shared.freshDatabase())
        let runner = MigrationRunner(migrations: migrations)
        #expect(try runner.apply(on: connection, dryRun: true).map(\.version) == [1, 2])
        #expect(try runner.apply(on: connection).map(\.version) == [1, 2])
        #expect(try runner.apply(on: connection).isEmpty)
        #expect(try connection.query("SELECT count(*)::int AS n FROM b").first?.int("n") == 1)
        try runner.requireCurrent(on: connection)
        #expect(try runner.status(on: connection).allSatisfy { $0.appliedAt != nil })
    }

    @Test func refusesEditedAppliedFile() throws {
        let connection = try TestDatabase.shared.connect(database: try TestDatabase.shared.freshDatabase())
        try MigrationRunner(migrations: migrations).apply(on: connection)
        let edited = [migrations[0], Migration(version: 2, name: "create_b", sql: "CREATE TABLE b (id bigint);")]
        #expect(throws: MigrationError.checksumChanged(version: 2, name: "create_b")) {
            try MigrationRunner(migrations: edited).apply(on: connection)
        }
    }

    @Test func reportsPendingForServe() throws {
        let connection = try TestDatabase.shared.connect(database: try TestDatabase.shared.freshDatabase())
        try MigrationRunner(migrations: [migrations[0]]).apply(on: connection)
        #expect(throws: MigrationError.pending(count: 1)) {
            try MigrationRunner(migrations: migrations).requireCurrent(on: connection)
        }
    }

    @Test func refusesGapsAndDuplicatesInFolder() throws {
        let folder = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("mig-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        try "SELECT 1;".write(to: folder.appendingPathComponent("0001_first.sql"), atomically: true, encoding: .utf8)
        try "SELECT 1;".write(to: folder.appendingPathComponent("0003_third.sql"), atomically: true, encoding: .utf8)
        #expect(throws: MigrationError.gap(expected: 2, found: 3)) { try Migration.load(from: folder) }
        try "SELECT 1;".write(to: folder.appendingPathComponent("0001_again.sql"), atomically: true, encoding: .utf8)
        #expect(throws: MigrationError.duplicate(1)) { try Migration.load(from: folder) }
    }

    @Test func concurrentRunnersApplyEachFileOnce() throws {
        let database = try TestDatabase.shared.freshDatabase()
        // A slow first file widens the race window.
        let slow = [Migration(version: 1, name: "slow", sql: "SELECT pg_sleep(0.3); CREATE TABLE once (id int);")]
            + [Migration(version: 2, name: "count", sql: "CREATE TABLE twice (id int);")]
        let results = Locked<[Int]>([])
        let group = DispatchGroup()
        for _ in 0..<3 {
            DispatchQueue.global().async(group: group) {
                do {
                    let connection = try TestDatabase.shared.connect(database: database)
                    let applied = try MigrationRunner(migrations: slow).apply(on: connection).count
                    results.withLock { $0.append(applied) }
                } catch {
                    results.withLock { $0.append(-1) }
                }
            }
        }
        group.wait()
        #expect(results.value.sorted() == [0, 0, 2])
        let connection = try TestDatabase.shared.connect(database: database)
        #expect(try connection.query("SELECT count(*)::int AS n FROM schema_migrations").first?.int("n") == 2)
    }

    @Test func repositoryMigrationsApply() throws {
        let connection = try TestDatabase.shared.connect(database: try TestDatabase.shared.freshDatabase())
        let runner = MigrationRunner(migrations: try Migration.load(from: TestPaths.migrations))
        #expect(try runner.apply(on: connection).count == runner.migrations.count)
        try runner.requireCurrent(on: connection)
    }
}
