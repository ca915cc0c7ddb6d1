import CacheCore
import CacheStore
import Foundation
import Observability
import Postgres
import TeamCache

/// Opens the configured database for a one-off command: an external URL, or the embedded
/// cluster (reused if a server is running on it, else started for the command and stopped after).
enum DatabaseSession {
    static func with<T>(_ arguments: Arguments, requireCurrent: Bool = true,
                        _ body: (Database, ConnectionPool, Configuration) throws -> T) throws -> T {
        let configuration = try Configuration.load(environment: ProcessInfo.processInfo.environment,
                                                   flags: arguments.values)
        // Commands print their results; only warnings go to the log.
        LogSink.shared.configure(level: arguments.values["--log-level"].flatMap(LogLevel.init(name:)) ?? .warn)
        let database = try Database(configuration: configuration, requireCurrent: requireCurrent)
        defer {
            database.close()
            LogSink.shared.flush()
        }
        var session = ConnectionPool.Configuration(url: database.directURL, maxConnections: 2, acquireTimeout: 10)
        // A command may rightly run long (a migration building an index, a large evict), but
        // it never waits without end for a lock a live server holds.
        session.limits = configuration.sessionLimits.withoutStatementLimits
        session.limits.lockTimeout = 60
        let pool = ConnectionPool(session)
        return try body(database, pool, configuration)
    }

    /// The store a command reads and writes entries through: its keyring holds every data
    /// key, unwrapped by TEAMCACHE_MASTER_KEY_FILE (or the command stops, naming it).
    static func store(_ pool: ConnectionPool, _ configuration: Configuration) throws -> EntryStore {
        let keyring = Keyring(master: configuration.masterKeys)
        try keyring.loadAll(pool)
        return EntryStore(pool: pool, policy: configuration.cache, keyring: keyring)
    }
}
