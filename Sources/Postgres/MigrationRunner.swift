import Foundation

/// Applies migrations under a PostgreSQL advisory lock, each file with its
/// `schema_migrations` row in one transaction, so two replicas migrating at once apply
/// every file exactly once.
public struct MigrationRunner: Sendable {
    /// The state of one known migration in a database.
    public struct Status: Sendable {
        public let migration: Migration
        public let appliedAt: Date?
    }

    /// An arbitrary constant naming TeamCache's migration lock ("tcmigr" in ASCII).
    static let lockKey: Int64 = 0x7463_6d69_6772
    static let createTable = """
        CREATE TABLE IF NOT EXISTS schema_migrations (
            version integer PRIMARY KEY,
            name text NOT NULL,
            checksum text NOT NULL,
            applied_at timestamptz NOT NULL DEFAULT now()
        )
        """
    static let selectApplied = "SELECT version, name, checksum, applied_at FROM schema_migrations ORDER BY version"
    static let insertApplied = "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)"
    static let tableExists = "SELECT to_regclass('schema_migrations') IS NOT NULL AS present"

    public let migrations: [Migration]

    public init(migrations: [Migration]) {
        self.migrations = migrations
    }

    /// Applied and pending migrations; throws if an applied file changed or is unknown.
    public func status(on connection: PostgresConnection) throws -> [Status] {
        let applied = try appliedRows(on: connection)
        try verify(applied)
        return migrations.map { Status(migration: $0, appliedAt: applied[$0.version]?.appliedAt) }
    }

    /// Migrations not yet applied (without taking the lock).
    public func pending(on connection: PostgresConnection) throws -> [Migration] {
        try status(on: connection).filter { $0.appliedAt == nil }.map(\.migration)
    }

    /// Applies what is pending and returns it; `dryRun` only returns what would run.
    @discardableResult
    public func apply(on connection: PostgresConnection, dryRun: Bool = false) throws -> [Migration] {
        if dryRun { return try pending(on: connection) }
        try connection.query("SELECT pg_advisory_lock($1)", [.int(Self.lockKey)])
        defer { _ = try? connection.query("SELECT pg_advisory_unlock($1)", [.int(Self.lockKey)]) }
        try connection.execute(Self.createTable)
        // Read again under the lock: another runner may have applied files meanwhile.
        let todo = try pending(on: connection)
        for migration in todo {
            try connection.transaction { transaction in
                try transaction.execute(migration.sql)
                try transaction.query(Self.insertApplied,
                                      [.int(migration.version), .text(migration.name), .text(migration.checksum)])
            }
        }
        return todo
    }

    /// Throws `.pending` when the database is behind (for `serve` against an external database).
    public func requireCurrent(on connection: PostgresConnection) throws {
        let behind = try pending(on: connection).count
        if behind > 0 { throw MigrationError.pending(count: behind) }
    }

    private struct AppliedRow {
        let checksum: String
        let appliedAt: Date
    }

    private func appliedRows(on connection: PostgresConnection) throws -> [Int: AppliedRow] {
        guard try connection.query(Self.tableExists).first?.bool("present") == true else { return [:] }
        var rows: [Int: AppliedRow] = [:]
        for row in try connection.query(Self.selectApplied).rows {
            guard let version = try row.int("version"), let checksum = try row.string("checksum"),
                  let appliedAt = try row.date("applied_at") else { continue }
            rows[version] = AppliedRow(checksum: checksum, appliedAt: appliedAt)
        }
        return rows
    }

    private func verify(_ applied: [Int: AppliedRow]) throws {
        let known = Dictionary(uniqueKeysWithValues: migrations.map { ($0.version, $0) })
        for (version, row) in applied.sorted(by: { $0.key < $1.key }) {
            guard let migration = known[version] else { throw MigrationError.unknownApplied(version: version) }
            if migration.checksum != row.checksum {
                throw MigrationError.checksumChanged(version: version, name: migration.name)
            }
        }
    }
}
