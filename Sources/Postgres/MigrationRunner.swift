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

    /// How the database's schema stands against this build's migrations.
    public enum SchemaState: Sendable, Equatable {
        /// Exactly this build's migrations are applied.
        case current
        /// Some of this build's migrations are not applied yet.
        case behind(count: Int)
        /// Later builds applied migrations this build does not know, each declared to keep
        /// older builds working (expand/contract): this build serves, and says so.
        case aheadCompatible(versions: [Int])

        public var summary: String {
            switch self {
            case .current: "current"
            case .behind(let count): "\(count) migration(s) behind"
            case .aheadCompatible(let versions):
                "ahead by migration(s) \(versions.map(String.init).joined(separator: ", ")), "
                    + "declared compatible with older builds"
            }
        }
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
    /// Whether each migration keeps older builds working, for those older builds to read.
    static let addCompatibleColumn = """
        ALTER TABLE schema_migrations ADD COLUMN IF NOT EXISTS keeps_older_builds_working boolean NOT NULL DEFAULT false
        """
    /// Reads the flag whether or not a runner has added its column yet.
    static let selectApplied = """
        SELECT version, name, checksum, applied_at,
               coalesce((to_jsonb(m) ->> 'keeps_older_builds_working')::boolean, false) AS compatible
        FROM schema_migrations m ORDER BY version
        """
    static let insertApplied = """
        INSERT INTO schema_migrations (version, name, checksum, keeps_older_builds_working) VALUES ($1, $2, $3, $4)
        """
    static let tableExists = "SELECT to_regclass('schema_migrations') IS NOT NULL AS present"

    public let migrations: [Migration]
    /// How long each try of a migration waits for a lock (PostgreSQL's `lock_timeout`, set
    /// in its transaction): a migration queued for a table lock makes every later statement
    /// on that table queue behind it, so it must give up soon and try again rather than
    /// stall the running service (older pods included) for as long as a long transaction lasts.
    public var lockTimeout: TimeInterval = 5
    /// Tries per migration before `migrate` fails (the lock was never free for long enough).
    public var lockTries = 12
    /// The pause between tries.
    public var retryPause: TimeInterval = 1
    /// Told of each try that timed out waiting for a lock (the CLI prints it).
    public var onLockRetry: (@Sendable (Migration, Int) -> Void)?

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
        try connection.execute(Self.addCompatibleColumn)
        // Read again under the lock: another runner may have applied files meanwhile.
        let todo = try pending(on: connection)
        for migration in todo { try applyWithRetries(migration, on: connection) }
        return todo
    }

    /// One migration and its row in a transaction, under `lockTimeout`: a try that times out
    /// waiting for a lock, or is ended by a deadlock, rolls back whole and is made again, up to
    /// `lockTries` times.
    private func applyWithRetries(_ migration: Migration, on connection: PostgresConnection) throws {
        var attempt = 1
        while true {
            do {
                try connection.transaction { transaction in
                    try transaction.execute("SET LOCAL lock_timeout = '\(Int(max(0.001, lockTimeout) * 1000))ms'")
                    try transaction.execute(migration.sql)
                    try transaction.query(Self.insertApplied, [
                        .int(migration.version), .text(migration.name), .text(migration.checksum),
                        .bool(migration.keepsOlderBuildsWorking),
                    ])
                }
                return
            } catch let error as PostgresError
                        where (error.sqlState == .lockNotAvailable || error.sqlState == .deadlockDetected)
                        && attempt < lockTries {
                // A deadlock too: a step that takes two tables' locks in another order than a
                // transaction in flight is chosen as the victim (or makes that transaction one);
                // rolled back whole, it is as safe to try again as a lock timeout.
                onLockRetry?(migration, attempt)
                attempt += 1
                Thread.sleep(forTimeInterval: retryPause)
            }
        }
    }

    /// The schema's state; throws when this build cannot serve on it (an applied file
    /// changed, or a later build applied a migration that breaks older ones).
    public func schemaState(on connection: PostgresConnection) throws -> SchemaState {
        let applied = try appliedRows(on: connection)
        try verify(applied)
        let behind = migrations.filter { applied[$0.version] == nil }.count
        if behind > 0 { return .behind(count: behind) }
        let known = Set(migrations.map(\.version))
        let ahead = applied.keys.filter { !known.contains($0) }.sorted()
        return ahead.isEmpty ? .current : .aheadCompatible(versions: ahead)
    }

    /// The schema's state when this build can serve on it; throws `.pending` when the
    /// database is behind (for `serve` against an external database).
    @discardableResult
    public func requireCurrent(on connection: PostgresConnection) throws -> SchemaState {
        let state = try schemaState(on: connection)
        if case .behind(let count) = state { throw MigrationError.pending(count: count) }
        return state
    }

    private struct AppliedRow {
        let checksum: String
        let appliedAt: Date
        let keepsOlderBuildsWorking: Bool
    }

    private func appliedRows(on connection: PostgresConnection) throws -> [Int: AppliedRow] {
        guard try connection.query(Self.tableExists).first?.bool("present") == true else { return [:] }
        var rows: [Int: AppliedRow] = [:]
        for row in try connection.query(Self.selectApplied).rows {
            guard let version = try row.int("version"), let checksum = try row.string("checksum"),
                  let appliedAt = try row.date("applied_at") else { continue }
            rows[version] = AppliedRow(checksum: checksum, appliedAt: appliedAt,
                                       keepsOlderBuildsWorking: try row.bool("compatible") ?? false)
        }
        return rows
    }

    /// Every applied migration this build knows is unchanged; every one it does not know
    /// comes after all it knows (a later build's) and keeps older builds working.
    private func verify(_ applied: [Int: AppliedRow]) throws {
        let known = Dictionary(uniqueKeysWithValues: migrations.map { ($0.version, $0) })
        let newestKnown = migrations.last?.version ?? 0
        for (version, row) in applied.sorted(by: { $0.key < $1.key }) {
            guard let migration = known[version] else {
                guard version > newestKnown else { throw MigrationError.unknownApplied(version: version) }
                guard row.keepsOlderBuildsWorking else { throw MigrationError.incompatibleAhead(version: version) }
                continue
            }
            if migration.checksum != row.checksum {
                throw MigrationError.checksumChanged(version: version, name: migration.name)
            }
        }
    }
}
