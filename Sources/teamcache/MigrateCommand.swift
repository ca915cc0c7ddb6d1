import Foundation
import Postgres
import TeamCache

enum MigrateCommand {
    static let usage = """
        Usage: teamcache migrate [--status | --dry-run] [database options]

        Applies pending migrations, each in its own transaction under an advisory lock (safe
        when several replicas run it at once). --status lists applied and pending migrations;
        --dry-run prints what would be applied.

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
                let migrations = try database.migrations.apply(on: connection, dryRun: dryRun)
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
