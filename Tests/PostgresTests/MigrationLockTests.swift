import Locking
import Foundation
import Postgres
import Testing
import TestSupport

/// Migrations that need a table lock wait for it a bounded time per try, so they never queue
/// the running service (older replicas included) behind a long transaction.
@Suite struct MigrationLockTests {
    static let shipped = (try? Migration.load(from: TestPaths.migrations)) ?? []

    /// Applies `runner`'s migrations to `database` on a thread of its own, over a connection of
    /// its own: the tries it made again, a signal when it is done, and its error's text if any.
    static func applying(_ runner: MigrationRunner, database: String) throws
        -> (retries: Locked<Int>, done: DispatchSemaphore, failure: Locked<String?>) {
        var runner = runner
        let retries = Locked(0)
        runner.onLockRetry = { _, _ in retries.withLock { $0 += 1 } }
        let done = DispatchSemaphore(value: 0)
        let failure = Locked<String?>(nil)
        let migrating = try TestDatabase.shared.connect(database: database)
        let configured = runner
        Thread.detachNewThread {
            do { try configured.apply(on: migrating) } catch { failure.withLock { $0 = "\(error)" } }
            done.signal()
        }
        return (retries, done, failure)
    }

    /// The markers count on a line of their own only: indented, with a CR (a file saved with
    /// CRLF endings), first or last; not inside another comment, nor as part of a longer word.
    @Test func markersAreRecognizedOnLinesOfTheirOwn() {
        func flags(_ sql: String) -> (Bool, Bool) {
            let migration = Migration(version: 1, name: "m", sql: sql)
            return (migration.keepsOlderBuildsWorking, migration.declaresTableLocks)
        }
        let compatible = Migration.compatibleMarker, locks = Migration.tableLockMarker
        #expect(flags("\(compatible)\n\(locks)\nSELECT 1;") == (true, true))
        #expect(flags("SELECT 1;\r\n  \t\(compatible) \r\n\t\(locks)") == (true, true))
        #expect(flags("SELECT 1; \(compatible)\n-- see \(locks)\n") == (false, false))
        #expect(flags("\(compatible)s\n\(locks)-ish\n") == (false, false))
        #expect(flags("") == (false, false))
        #expect(flags("\n \n\t\n") == (false, false))
        // The shipped files read as before: each marked exactly where the marker is a whole line.
        func marked(_ marker: String) -> [Int] {
            Self.shipped.filter { $0.sql.hasPrefix(marker + "\n") || $0.sql.contains("\n" + marker + "\n") }.map(\.version)
        }
        #expect(!Self.shipped.isEmpty)
        #expect(Self.shipped.filter(\.keepsOlderBuildsWorking).map(\.version) == marked(compatible))
        #expect(Self.shipped.filter(\.declaresTableLocks).map(\.version) == marked(locks))
    }

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
        let (retries, done, failure) = try Self.applying(runner, database: name)
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

    /// A migration ended by a deadlock (it locks two tables in another order than a transaction
    /// in flight, and PostgreSQL chooses it as the victim) rolls back whole and is tried again,
    /// as one that timed out waiting: it goes through once the other transaction is done.
    @Test func aMigrationEndedByADeadlockIsTriedAgain() throws {
        let name = try TestDatabase.shared.freshDatabase(prefix: "mdeadlock")
        let connection = try TestDatabase.shared.connect(database: name)
        try connection.execute("CREATE TABLE lock_a (x int); CREATE TABLE lock_b (x int)")
        // Takes b, then (after the holder has asked for b) a: the cycle is complete when the
        // migration waits, and its short deadlock_timeout makes it the one that finds it.
        let crossed = Migration(version: 1, name: "crossed", sql: """
            SET LOCAL deadlock_timeout = '50ms';
            LOCK TABLE lock_b IN ACCESS EXCLUSIVE MODE;
            SELECT pg_sleep(0.5);
            LOCK TABLE lock_a IN ACCESS EXCLUSIVE MODE;
            """)
        var runner = MigrationRunner(migrations: [crossed])
        runner.lockTimeout = 5
        runner.retryPause = 0.2
        let holder = try TestDatabase.shared.connect(database: name)
        try holder.execute("BEGIN; SET LOCAL deadlock_timeout = '10s'; LOCK TABLE lock_a IN ROW EXCLUSIVE MODE")
        let (retries, done, failure) = try Self.applying(runner, database: name)
        Thread.sleep(forTimeInterval: 0.2)
        // Waits for b until the migration, the deadlock's victim, rolls back.
        try holder.execute("LOCK TABLE lock_b IN ROW EXCLUSIVE MODE")
        try holder.execute("COMMIT")
        #expect(done.wait(timeout: .now() + 20) == .success)
        #expect(failure.value == nil, "\(failure.value ?? "")")
        #expect(retries.value >= 1)
        #expect(try runner.pending(on: connection).isEmpty)
    }
}
