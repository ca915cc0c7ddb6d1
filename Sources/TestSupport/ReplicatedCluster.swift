import Foundation
import Glibc
import Postgres

/// A primary and a streaming hot standby (made with `pg_basebackup`) on loopback TCP, for
/// failover and read-replica tests: the standby is synchronous, so a write the primary
/// acknowledged is on the standby too. Runs the tools as `postgres` when the suite is root.
/// `remove` stops both and deletes their folder.
public final class ReplicatedCluster: Sendable {
    public let primaryPort: Int
    public let standbyPort: Int
    public let database = "teamcache"
    private let root: URL
    private var primary: URL { root.appendingPathComponent("primary") }
    private var standby: URL { root.appendingPathComponent("standby") }
    /// The name the primary waits for (its `synchronous_standby_names`).
    private static let standbyName = "standby1"

    /// `synchronous`: the primary waits for the standby's flush before acknowledging a commit.
    public init(_ name: String, synchronous: Bool = true) throws {
        root = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("\(name)-\(getpid())")
        try? FileManager.default.removeItem(at: root)
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        chmod(root.path, 0o755)
        try Self.giveToPostgres(root)
        primaryPort = try ServeProcess.freePort()
        standbyPort = try ServeProcess.freePort()
        try tool("initdb", ["-D", primary.path, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"])
        let settings = """
            listen_addresses = '127.0.0.1'
            unix_socket_directories = '\(root.path)'
            wal_level = replica
            max_wal_senders = 5
            hot_standby = on
            fsync = off
            full_page_writes = off
            max_connections = 200
            wal_receiver_status_interval = 1s

            """
        try append(settings, to: primary.appendingPathComponent("postgresql.conf"))
        try append("host all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n",
                   to: primary.appendingPathComponent("pg_hba.conf"))
        try tool("pg_ctl", ["-D", primary.path, "-l", root.appendingPathComponent("primary.log").path,
                            "-o", "-p \(primaryPort)", "-w", "start"])
        let admin = try PostgresConnection(url: url(port: primaryPort, database: "postgres"))
        try admin.execute("CREATE DATABASE \(database)")
        try MigrationRunner(migrations: try Migration.load(from: TestPaths.migrations))
            .apply(on: try PostgresConnection(url: url(port: primaryPort, database: database)))
        try tool("pg_basebackup", ["-h", "127.0.0.1", "-p", String(primaryPort), "-U", "postgres", "-D", standby.path,
                                   "-X", "stream", "-R", "--no-sync", "--checkpoint=fast"])
        try append("primary_conninfo = 'host=127.0.0.1 port=\(primaryPort) user=postgres application_name=\(Self.standbyName)'\n",
                   to: standby.appendingPathComponent("postgresql.auto.conf"))
        try tool("pg_ctl", ["-D", standby.path, "-l", root.appendingPathComponent("standby.log").path,
                            "-o", "-p \(standbyPort)", "-w", "start"])
        if synchronous { try waitForSynchronousStandby(admin) }
    }

    /// Only the first primary waits for the standby: set after the base backup, so the copy
    /// (which becomes the primary on promotion) does not wait for a standby it lacks.
    private func waitForSynchronousStandby(_ admin: PostgresConnection) throws {
        try admin.execute("ALTER SYSTEM SET synchronous_standby_names = '\(Self.standbyName)'")
        try admin.query("SELECT pg_reload_conf()")
        for _ in 0..<200 {
            let state = try admin.query("SELECT sync_state FROM pg_stat_replication WHERE application_name = $1",
                                        [.text(Self.standbyName)]).first?.string("sync_state")
            if state == "sync" { return }
            Thread.sleep(forTimeInterval: 0.05)
        }
        throw EmbeddedPostgresError.commandFailed(what: "wait for the synchronous standby", status: 1, output: "")
    }

    /// A URL of one server.
    public func url(port: Int, database: String? = nil) -> String {
        "postgresql://postgres@127.0.0.1:\(port)/\(database ?? self.database)"
    }

    /// The multi-host URL a service uses to follow the primary across a failover.
    public var failoverURL: String {
        "postgresql://postgres@127.0.0.1:\(primaryPort),127.0.0.1:\(standbyPort)/\(database)"
            + "?target_session_attrs=read-write"
    }

    /// Kills the primary as a machine failure would: no shutdown checkpoint, sessions cut.
    public func killPrimary() throws {
        try tool("pg_ctl", ["-D", primary.path, "-m", "immediate", "-w", "stop"])
    }

    /// Makes the standby the primary (what Patroni or CloudNativePG do after a failure).
    public func promoteStandby() throws {
        try tool("pg_ctl", ["-D", standby.path, "-w", "promote"])
    }

    /// Pauses or resumes the standby's WAL replay (its lag grows while paused). A pause is
    /// only a request: replay stops at its next record, so this waits until it has (what is
    /// written after this returns is not replayed until the resume).
    public func setStandbyReplay(paused: Bool) throws {
        let connection = try PostgresConnection(url: url(port: standbyPort))
        try connection.query(paused ? "SELECT pg_wal_replay_pause()" : "SELECT pg_wal_replay_resume()")
        guard paused else { return }
        for _ in 0..<200 {
            let state = try connection.query("SELECT pg_get_wal_replay_pause_state() AS state").first?.string("state")
            if state == "paused" { return }
            Thread.sleep(forTimeInterval: 0.02)
        }
        throw EmbeddedPostgresError.commandFailed(what: "pause the standby's replay", status: 1, output: "")
    }

    public func remove() {
        for folder in [standby, primary] {
            _ = try? tool("pg_ctl", ["-D", folder.path, "-m", "immediate", "-w", "stop"], tolerate: true)
        }
        try? FileManager.default.removeItem(at: root)
    }

    private func append(_ text: String, to file: URL) throws {
        let handle = try FileHandle(forWritingTo: file)
        try handle.seekToEnd()
        try handle.write(contentsOf: Data(text.utf8))
        try handle.close()
    }

    private static func giveToPostgres(_ folder: URL) throws {
        guard getuid() == 0 else { return }
        guard let account = SystemAccount.postgres else { throw EmbeddedPostgresError.noPostgresUser }
        chown(folder.path, account.uid, account.gid)
    }

    private func tool(_ name: String, _ arguments: [String], tolerate: Bool = false) throws {
        try EmbeddedPostgres.runAsOwner([try EmbeddedPostgres.locate(name)] + arguments, what: name, tolerate: tolerate)
    }
}
