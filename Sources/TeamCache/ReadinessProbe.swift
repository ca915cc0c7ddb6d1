import Foundation
import Locking
import Observability
import Postgres

/// Whether the service can serve, kept up to date in the background so `/readyz` answers
/// from memory: a probe cannot be turned into database load, and a stalled database makes
/// the service unready within `staleAfter` even though the probe itself is stuck.
///
/// Every `interval` the probe runs `SELECT 1` on a session of its own (beside the pool, so
/// a busy pool does not read as a dead database), with a one-second statement limit, and
/// checks the migrations every `migrationCheckEvery` probes.
final class ReadinessProbe: Sendable {
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
    private let limits: SessionLimits
    private let findings = Locked(Findings())
    /// The probe's own session: taken out for a probe and put back after it (probes run on
    /// one thread: the periodic service's, or start-up before that service starts).
    private let session = Locked<PostgresConnection?>(nil)

    private struct Findings {
        var lastSuccess: TimeInterval?
        /// The last probe found a standby.
        var onStandby = false
        /// PostgreSQL's notification queue in use (0 to 1) at the last probe; nil while unknown.
        var notificationQueue: Double?
        var migrationProblem: String?
        var aheadBy: [Int] = []
        var probes = 0
    }
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
        let now = monotonicSeconds()
        return findings.withLock { found in
            if let problem = found.migrationProblem { return .schema(problem) }
            guard let lastSuccess = found.lastSuccess, now - lastSuccess <= Self.staleAfter else {
                return found.onStandby ? .standby : .unreachable
            }
            return .ready(aheadBy: found.aheadBy)
        }
    }

    /// One probe (the periodic service's work); never throws, never waits past its limits.
    /// Success is stamped when the answer arrives, before the (slower) migration check.
    func probe() {
        var connection = session.withLock { $0.take() }
        defer { session.withLock { $0 = connection } }
        do {
            let open = try connection ?? open()
            connection = open
            let row = try open.query(
                "SELECT pg_is_in_recovery() AS standby, pg_notification_queue_usage()::text AS queue").first
            let standby = try row?.bool("standby") ?? true
            let queue = try row?.string("queue").flatMap(Double.init)
            findings.withLock { found in
                found.onStandby = standby
                found.notificationQueue = queue
            }
            guard !standby else {
                // Dropped, so the next probe connects afresh: a multi-host URL with
                // `target_session_attrs=read-write` then finds the promoted primary.
                connection = nil
                return
            }
            let now = monotonicSeconds()
            let probes = findings.withLock { found in
                found.lastSuccess = now
                return found.probes
            }
            // Counted after the check: a check that failed runs again at the next probe.
            if probes % Self.migrationCheckEvery == 0 { try checkMigrations(on: open) }
            findings.withLock { $0.probes += 1 }
        } catch let error as MigrationError {
            let first = findings.withLock { found in
                defer { found.migrationProblem = error.description }
                return found.migrationProblem != error.description
            }
            if first { logger.warn("not ready: schema", [("problem", .string(error.description))]) }
        } catch {
            findings.withLock { $0.onStandby = false }
            if connection?.isBroken ?? true { connection = nil }
        }
    }

    private func checkMigrations(on session: PostgresConnection) throws {
        let state = try migrations.requireCurrent(on: session)
        let ahead: [Int]
        if case .aheadCompatible(let versions) = state { ahead = versions } else { ahead = [] }
        let changed = findings.withLock { found in
            defer { (found.migrationProblem, found.aheadBy) = (nil, ahead) }
            return found.aheadBy != ahead
        }
        // Said once per change, not every check: a rollout can run for hours in this state.
        if changed && !ahead.isEmpty {
            logger.info("serving on a schema migrated ahead of this build", [("schema", .string(state.summary))])
        }
    }

    func close() { session.withLock { $0 = nil } }

    /// How full PostgreSQL's notification queue was at the last probe (nil: not known yet).
    /// A LISTEN session that stopped reading holds it back; full, every NOTIFY fails, and with
    /// it every write on every replica.
    var notificationQueueUsage: Double? { findings.withLock { $0.notificationQueue } }

    private func open() throws -> PostgresConnection {
        try PostgresConnection(url: url, overrides: ["application_name": "teamcache-readiness"], limits: limits)
    }

    private func monotonicSeconds() -> TimeInterval {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return TimeInterval(time.tv_sec) + TimeInterval(time.tv_nsec) / 1e9
    }
}
