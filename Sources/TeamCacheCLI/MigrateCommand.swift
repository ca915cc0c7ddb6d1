import Foundation
import Postgres
import TeamCache

enum MigrateCommand {
    static let usage = """
        Usage: teamcache migrate [--status | --dry-run] [database options]

        Applies pending migrations, each in its own transaction under an advisory lock (safe
        when several replicas run it at once). --status lists applied and pending migrations;
        --dry-run prints what would be applied. A migration waits at most 5 s for a table lock
        per try (a queued lock request holds up every session behind it, older replicas'
        included), and tries 12 times.

        \(Help.database)
        """

    static func run(_ words: [String]) throws -> Int32 {
        let arguments = try Arguments(words, valued: databaseFlags, switches: ["--status", "--dry-run"])
        if arguments.switches.contains("--help") {
            print(usage)
            return 0
        }
        return try DatabaseSession.with(arguments, requireCurrent: false) { database, pool, _ in
            print("migrations from \(database.migrationsFolder.path)")
            return try pool.withConnection { connection in
                if arguments.switches.contains("--status") {
                    for status in try database.migrations.status(on: connection) {
                        let state = status.appliedAt.map { "applied \($0)" } ?? "pending"
                        print(String(format: "%04d %@  %@", status.migration.version, status.migration.name, state))
                    }
                    return 0
                }
                let dryRun = arguments.switches.contains("--dry-run")
                var runner = database.migrations
                let (timeout, tries) = (runner.lockTimeout, runner.lockTries)
                runner.onLockRetry = { migration, attempt in
                    printError(String(format: "migration %04d %@: a table lock was not free within %.0f s (try %d of %d); "
                        + "trying again", migration.version, migration.name, timeout, attempt, tries))
                }
                let migrations = try runner.apply(on: connection, dryRun: dryRun)
                for migration in migrations {
                    print(String(format: "%@ %04d %@", dryRun ? "would apply" : "applied", migration.version,
                                 migration.name))
                }
                if migrations.isEmpty { print("database is up to date") }
                return 0
            }
        }
    }
}
