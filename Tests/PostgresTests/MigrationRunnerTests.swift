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

/// Migrations that need a table lock wait for it a bounded time per try, so they never queue
/// the running service (older replicas included) behind a long transaction.
@Suite struct MigrationLockTests {
    static let shipped = (try? Migration.load(from: TestPaths.migrations)) ?? []

    /// From migration 14 on (earlier files cannot change: they are applied), a file with a
    /// statement that locks a table says so on a line of its own.
    @Test func migrationsThatLockTablesSaySo() throws {
        #expect(Self.shipped.count >= 14)
        for migration in Self.shipped where migration.version >= 14 && migration.takesTableLocks {
            #expect(migration.declaresTableLocks, "\(migration.version) \(migration.name) locks a table silently")
        }
        #expect(Migration(version: 1, name: "a", sql: "alter  table entries add column x int").takesTableLocks)
        #expect(Migration(version: 1, name: "a", sql: "CREATE INDEX CONCURRENTLY i ON t (a)").takesTableLocks == false)
        #expect(Migration(version: 1, name: "a", sql: "-- LOCK TABLE entries\nSELECT 1").takesTableLocks == false)
        #expect(Self.shipped.first { $0.version == 12 }?.takesTableLocks == true)
    }

    /// A write transaction holds `entries`; the migration that needs it (0014's trigger) waits
    /// its lock timeout, rolls back, and tries again; a write queued behind it meanwhile waits
    /// no longer than that; once the holder commits, the migration goes through.
    @Test func aMigrationWaitingForATableLockGivesWayAndRetries() throws {
        let name = try TestDatabase.shared.freshDatabase(prefix: "mlock")
        let connection = try TestDatabase.shared.connect(database: name)
        try MigrationRunner(migrations: Array(Self.shipped.prefix(13))).apply(on: connection)
        let holder = try TestDatabase.shared.connect(database: name)
        try holder.execute("BEGIN")
        try holder.execute("LOCK TABLE entries IN ROW EXCLUSIVE MODE")
        var runner = MigrationRunner(migrations: Array(Self.shipped.prefix(14)))
        runner.lockTimeout = 0.3
        runner.retryPause = 0.2
        runner.lockTries = 100
        let retries = Locked(0)
        runner.onLockRetry = { _, _ in retries.withLock { $0 += 1 } }
        let done = DispatchSemaphore(value: 0)
        let failure = Locked<String?>(nil)
        let migrating = try TestDatabase.shared.connect(database: name)
        let configured = runner
        Thread.detachNewThread {
            do { try configured.apply(on: migrating) } catch { failure.withLock { $0 = "\(error)" } }
            done.signal()
        }
        Thread.sleep(forTimeInterval: 0.5)
        // A writer arriving now queues behind the migration's lock request, at most its timeout.
        let writer = try TestDatabase.shared.connect(database: name)
        let started = ProcessInfo.processInfo.systemUptime
        try writer.execute("BEGIN")
        try writer.execute("LOCK TABLE entries IN ROW EXCLUSIVE MODE")
        let waited = ProcessInfo.processInfo.systemUptime - started
        try writer.execute("COMMIT")
        #expect(waited < 1.0, "a writer waited \(waited) s behind the migration")
        #expect(done.wait(timeout: .now() + 0.5) == .timedOut, "the migration cannot finish while the lock is held")
        try holder.execute("COMMIT")
        #expect(done.wait(timeout: .now() + 10) == .success)
        #expect(failure.value == nil, "\(failure.value ?? "")")
        #expect(retries.value >= 1)
        #expect(try runner.pending(on: connection).isEmpty)
    }
}
