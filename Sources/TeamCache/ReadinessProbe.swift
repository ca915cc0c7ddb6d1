import Foundation
import Observability
import Postgres

/// Whether the service can serve, kept up to date in the background so `/readyz` answers
/// from memory: a probe cannot be turned into database load, and a stalled database makes
/// the service unready within `staleAfter` even though the probe itself is stuck.
///
/// Every `interval` the probe runs `SELECT 1` on a session of its own (beside the pool, so
/// a busy pool does not read as a dead database), with a one-second statement limit, and
/// checks the migrations every `migrationCheckEvery` probes.
final class ReadinessProbe: @unchecked Sendable {
    // @unchecked: `lastSuccess` and `migrationProblem` are guarded by `lock`; `connection`
    // and `probes` are touched only by the one thread that runs `probe` (the periodic
    // service's, or start-up before that service starts).
    enum State: Equatable {
        /// Ready; the later migrations (if any) this build serves with.
        case ready(aheadBy: [Int])
        case unreachable
        /// Reachable, but a read-only standby (a failover in progress, or a URL naming a
        /// standby): writes cannot commit.
        case standby
        case schema(String)
    }

    static let interval: TimeInterval = 0.5
    static let staleAfter: TimeInterval = 1
    private static let migrationCheckEvery = 4

    private let url: String
    private let migrations: MigrationRunner
    private let lock = NSLock()
    private var lastSuccess: TimeInterval?
    /// The last probe found a standby (guarded by `lock`).
    private var onStandby = false
    /// PostgreSQL's notification queue in use (0 to 1) at the last probe; nil while unknown.
    private var notificationQueue: Double?
    private let limits: SessionLimits
    private var migrationProblem: String?
    private var aheadBy: [Int] = []
    private var probes = 0
    private var connection: PostgresConnection?
    private let logger = Logger(component: "readiness")

    init(url: String, migrations: MigrationRunner, limits: SessionLimits = SessionLimits()) {
        self.url = url
        self.migrations = migrations
        var probeLimits = limits
        probeLimits.statementTimeout = 1
        probeLimits.lockTimeout = 1
        self.limits = probeLimits
    }

    var state: State {
        lock.withLock {
            if let problem = migrationProblem { return .schema(problem) }
            guard let lastSuccess, monotonicSeconds() - lastSuccess <= Self.staleAfter else {
                return onStandby ? .standby : .unreachable
            }
            return .ready(aheadBy: aheadBy)
        }
    }

    /// One probe (the periodic service's work); never throws, never waits past its limits.
    /// Success is stamped when the answer arrives, before the (slower) migration check.
    func probe() {
        do {
            let session = try connection ?? open()
            connection = session
            let row = try session.query(
                "SELECT pg_is_in_recovery() AS standby, pg_notification_queue_usage()::text AS queue").first
            let standby = try row?.bool("standby") ?? true
            let queue = try row?.string("queue").flatMap(Double.init)
            lock.withLock {
                onStandby = standby
                notificationQueue = queue
            }
            guard !standby else {
                // Dropped, so the next probe connects afresh: a multi-host URL with
                // `target_session_attrs=read-write` then finds the promoted primary.
                connection = nil
                return
            }
            lock.withLock { lastSuccess = monotonicSeconds() }
            if probes % Self.migrationCheckEvery == 0 { try checkMigrations(on: session) }
            probes += 1
        } catch let error as MigrationError {
            let first = lock.withLock {
                defer { migrationProblem = error.description }
                return migrationProblem != error.description
            }
            if first { logger.warn("not ready: schema", [("problem", .string(error.description))]) }
        } catch {
            lock.withLock { onStandby = false }
            if connection?.isBroken ?? true { connection = nil }
        }
    }

    private func checkMigrations(on session: PostgresConnection) throws {
        let state = try migrations.requireCurrent(on: session)
        let ahead: [Int]
        if case .aheadCompatible(let versions) = state { ahead = versions } else { ahead = [] }
        let changed = lock.withLock {
            defer { (migrationProblem, aheadBy) = (nil, ahead) }
            return aheadBy != ahead
        }
        // Said once per change, not every check: a rollout can run for hours in this state.
        if changed && !ahead.isEmpty {
            logger.info("serving on a schema migrated ahead of this build", [("schema", .string(state.summary))])
        }
    }

    func close() { connection = nil }

    /// How full PostgreSQL's notification queue was at the last probe (nil: not known yet).
    /// A LISTEN session that stopped reading holds it back; full, every NOTIFY fails, and with
    /// it every write on every replica.
    var notificationQueueUsage: Double? { lock.withLock { notificationQueue } }

    private func open() throws -> PostgresConnection {
        try PostgresConnection(url: url, overrides: ["application_name": "teamcache-readiness"], limits: limits)
    }

    private func monotonicSeconds() -> TimeInterval {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return TimeInterval(time.tv_sec) + TimeInterval(time.tv_nsec) / 1e9
    }
}
