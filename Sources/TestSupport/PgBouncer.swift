import Foundation
import Glibc
import Postgres

/// A real PgBouncer (Debian's package) in front of the suite's PostgreSQL, in transaction
/// pooling mode: each transaction may meet another server connection, as in production
/// deployments that share a primary among many clients.
///
/// Listens on a free loopback port; `*` forwards every database name to the suite's
/// cluster, so a test's own database is reached by naming it. Runs as `postgres` when the
/// suite runs as root (PgBouncer refuses root). `stop` ends it and removes its folder.
public final class PgBouncer: Sendable {
    public let port: Int
    private let folder: URL

    /// `serverConnections`: server connections per database and user; fewer than clients
    /// makes clients share them, which is what breaks session state.
    public init(serverConnections: Int = 4, ignoring startupParameters: [String] = ["extra_float_digits"]) throws {
        guard let binary = ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"]
            .first(where: FileManager.default.isExecutableFile(atPath:)) else {
            throw PgBouncerError.missing
        }
        port = try ServeProcess.freePort()
        folder = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("pgbouncer-\(getpid())-\(port)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        chmod(folder.path, 0o755)
        // PgBouncer writes its log and pid file here, as `postgres` when the suite is root.
        if getuid() == 0, let account = SystemAccount.postgres {
            chown(folder.path, account.uid, account.gid)
        }
        let server = PostgresConnection.keywords(in: TestDatabase.shared.url)
        let settings = """
            [databases]
            * = host=\(server["host"] ?? "/tmp") port=\(server["port"] ?? "5432") user=\(server["user"] ?? "postgres")

            [pgbouncer]
            listen_addr = 127.0.0.1
            listen_port = \(port)
            unix_socket_dir =
            auth_type = trust
            auth_file = \(folder.path)/users.txt
            pool_mode = transaction
            default_pool_size = \(serverConnections)
            max_client_conn = 2000
            query_wait_timeout = 10
            ignore_startup_parameters = \(startupParameters.joined(separator: ","))
            logfile = \(folder.path)/pgbouncer.log
            pidfile = \(folder.path)/pgbouncer.pid

            """
        try settings.write(to: folder.appendingPathComponent("pgbouncer.ini"), atomically: true, encoding: .utf8)
        try "\"postgres\" \"\"\n".write(to: folder.appendingPathComponent("users.txt"), atomically: true,
                                        encoding: .utf8)
        try EmbeddedPostgres.runAsOwner([binary, "-d", folder.appendingPathComponent("pgbouncer.ini").path],
                                        what: "start pgbouncer")
        // `-d` returns once daemonised; wait until it accepts connections.
        for _ in 0..<100 where (try? RawClient(port: port, timeout: 1)) == nil {
            Thread.sleep(forTimeInterval: 0.05)
        }
        guard (try? RawClient(port: port, timeout: 1)) != nil else { throw PgBouncerError.failed(log) }
    }

    /// PgBouncer's own log (why a login failed, say).
    public var log: String {
        (try? String(contentsOf: folder.appendingPathComponent("pgbouncer.log"), encoding: .utf8)) ?? "(no log)"
    }

    /// A URL that reaches `database` through the pooler.
    public func url(database: String) -> String {
        "postgresql://postgres@127.0.0.1:\(port)/\(database)"
    }

    public func stop() {
        let pidFile = folder.appendingPathComponent("pgbouncer.pid")
        if let text = try? String(contentsOf: pidFile, encoding: .utf8),
           let pid = Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)) {
            kill(pid, SIGTERM)
            for _ in 0..<100 where kill(pid, 0) == 0 { Thread.sleep(forTimeInterval: 0.02) }
        }
        try? FileManager.default.removeItem(at: folder)
    }
}

public enum PgBouncerError: Error, CustomStringConvertible {
    case missing
    case failed(String)

    public var description: String {
        switch self {
        case .missing: "pgbouncer not found: apt-get install pgbouncer"
        case .failed(let output): "pgbouncer did not start: \(output)"
        }
    }
}
