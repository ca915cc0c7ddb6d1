import Foundation
import Postgres
import TeamCache

/// The PostgreSQL the test suite runs against: `TEAMCACHE_TEST_DATABASE_URL` when set,
/// otherwise a throwaway embedded cluster (fsync off) started once per test process and
/// removed at exit. Each test asks for a database or namespace of its own.
public final class TestDatabase: Sendable {
    public static let shared: TestDatabase = {
        do { return try TestDatabase() } catch { fatalError("test database: \(error)") }
    }()

    /// The server-level URL; combine with `overrides(database:)` to reach one database.
    public let url: String
    private let cluster: EmbeddedPostgres?

    private init() throws {
        if let external = ProcessInfo.processInfo.environment["TEAMCACHE_TEST_DATABASE_URL"], !external.isEmpty {
            url = external
            cluster = nil
            return
        }
        let root = URL(fileURLWithPath: NSTemporaryDirectory())
            .appendingPathComponent("teamcache-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        // The suite runs dozens of services at once, each with its pool, listener and loop
        // readers: at 200 connections it reached the ceiling and tests failed to connect.
        let embedded = EmbeddedPostgres(root: root, options: .init(durable: false, name: Configuration.applicationName,
                                                                   maxConnections: 600))
        TestDatabaseCleanup.register(embedded)
        url = try embedded.start()
        cluster = embedded
    }

    public func overrides(database: String) -> [String: String] { ["dbname": database] }

    /// A new empty database with a unique name.
    public func freshDatabase(prefix: String = "t") throws -> String {
        let name = "\(prefix)_\(UInt64.random(in: 0...UInt64.max) % 1_000_000_000_000)"
        let admin = try PostgresConnection(url: url)
        try admin.execute("CREATE DATABASE \(name)")
        return name
    }

    /// A connection to `database`.
    public func connect(database: String) throws -> PostgresConnection {
        try PostgresConnection(url: url, overrides: overrides(database: database))
    }

    /// A new database with every migration applied (the schema the service runs on).
    public func migratedDatabase(prefix: String = "m") throws -> String {
        let name = try freshDatabase(prefix: prefix)
        let runner = MigrationRunner(migrations: try Migration.load(from: TestPaths.migrations))
        try runner.apply(on: try connect(database: name))
        return name
    }

    /// A pool of up to `maxConnections` on a new migrated database.
    public func migratedPool(prefix: String = "m", maxConnections: Int) throws -> ConnectionPool {
        pool(on: try migratedDatabase(prefix: prefix), maxConnections: maxConnections)
    }

    /// A pool of up to `maxConnections` on `database` (a test that also connects to it by name).
    public func pool(on database: String, maxConnections: Int) -> ConnectionPool {
        ConnectionPool(.init(url: url, overrides: overrides(database: database), maxConnections: maxConnections))
    }
}

/// Stops and deletes the throwaway cluster when the test process exits.
enum TestDatabaseCleanup {
    nonisolated(unsafe) static var cluster: EmbeddedPostgres?

    static func register(_ embedded: EmbeddedPostgres) {
        cluster = embedded
        atexit {
            guard let cluster = TestDatabaseCleanup.cluster else { return }
            cluster.stop(discarding: true)
            try? FileManager.default.removeItem(at: cluster.root)
        }
    }
}

/// Paths in the source tree the tests read.
public enum TestPaths {
    public static let repository = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    public static let migrations = repository.appendingPathComponent("migrations")
}
