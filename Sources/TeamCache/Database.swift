import Foundation
import Observability
import Postgres

/// The database the service runs on: a configured URL, or the embedded cluster under the
/// data folder (started, and migrated, on demand).
public final class Database: Sendable {
    public let url: String
    /// The primary without a pooler between: LISTEN, session advisory locks, migrations
    /// and the CLI's commands (the same as `url` unless a pooler is configured).
    public let directURL: String
    public let embedded: EmbeddedPostgres?
    public let migrations: MigrationRunner
    /// Where the migration files were read from (said by `teamcache migrate`).
    public let migrationsFolder: URL

    /// Opens the database. The embedded default migrates itself; an external database must
    /// be current when `requireCurrent` (serve), else serve refuses and names the command.
    public init(configuration: Configuration, requireCurrent: Bool) throws {
        let logger = Logger(component: "database")
        guard let folder = configuration.migrationsDirectory ?? ResourceLocator.find("migrations") else {
            throw MigrationError.unreadable("migrations (set TEAMCACHE_MIGRATIONS_DIR)")
        }
        migrations = MigrationRunner(migrations: try Migration.load(from: folder))
        migrationsFolder = folder
        logger.info("migrations", [("folder", .string(folder.path)), ("known", .int(migrations.migrations.count))])
        if let external = configuration.databaseURL {
            url = external
            directURL = configuration.directDatabaseURL ?? external
            embedded = nil
            if requireCurrent {
                try migrations.requireCurrent(on: try PostgresConnection(url: directURL,
                                                                         limits: configuration.directSessionLimits))
            }
        } else {
            let cluster = EmbeddedPostgres(root: configuration.dataDirectory.standardizedFileURL,
                                           options: .init(name: Configuration.applicationName))
            url = try cluster.start()
            directURL = url
            embedded = cluster
            logger.info("using embedded PostgreSQL", [("data", .string(cluster.clusterDirectory.path))])
            if requireCurrent {
                // A migration may build an index for minutes: no statement limit on its session.
                let applied = try migrations.apply(on: try PostgresConnection(url: url, limits: configuration.sessionLimits.withoutStatementLimits))
                if !applied.isEmpty {
                    logger.info("migrated embedded database", [("applied", .int(applied.count))])
                }
            }
        }
    }

    /// Stops the embedded cluster if this process started it.
    public func close() {
        embedded?.stop()
    }
}
