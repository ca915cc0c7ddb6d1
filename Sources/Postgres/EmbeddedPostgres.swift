import Cryptography
import Foundation
import Locking
import Observability

/// A PostgreSQL cluster an application runs itself under a data folder: for TeamCache the zero-configuration
/// default of `teamcache serve`, the CLI's way to reach that same data, and the test suite's
/// throwaway database.
///
/// Layout under `root`: `postgres/` (the cluster), `postgres.log`, and a private socket folder.
/// PostgreSQL refuses to run as root, so as root every command runs as the `postgres` user.
///
/// Private to the service's user: the cluster listens on a Unix socket only (nothing on
/// the network), in a folder of mode 0700 with `unix_socket_permissions = 0700`, and
/// `pg_hba.conf` admits only that socket. Trust authentication is therefore limited to
/// processes that can already open the folder: the `postgres` user, and root. The log is
/// 0600. Every process that uses the cluster is counted by a lock (`ClusterUsers`) and the
/// last one out stops it, if a TeamCache process started it (`owner.pid`): a CLI command
/// never stops it under a server, and a cluster left by a `serve` killed with SIGKILL is
/// stopped by the next process to use it and leave.
public final class EmbeddedPostgres: Sendable {
    public struct Options: Sendable {
        /// Tests trade durability for speed (fsync off); a served cache keeps it on.
        public var durable = true
        /// The application's name: the database it creates, and the names of its settings
        /// files and (for a long data path) its socket folder. TeamCache's is `teamcache`; a
        /// cluster keeps the names it was made with, so an application must not change its own.
        public var name = "embedded"
        public var database: String { name }
        public var port = 5432
        /// The service's pools, listeners and loop readers fit in 200 with room to spare; a
        /// test process runs dozens of services on one cluster at once (the whole suite
        /// reached 200 and tests failed to connect).
        public var maxConnections = 200

        public init(durable: Bool = true, name: String = "embedded", maxConnections: Int = 200) {
            self.durable = durable
            self.name = name
            self.maxConnections = maxConnections
        }
    }

    public let root: URL
    public let options: Options
    private let logger = Logger(component: "embedded-postgres")
    /// This process's use of the cluster. Its lock is held through a whole start or stop
    /// (seconds, at start-up and shutdown only): two at once in one process are run in turn.
    private let users: Locked<ClusterUsers>

    public var clusterDirectory: URL { root.appendingPathComponent("postgres") }
    public var logFile: URL { root.appendingPathComponent("postgres.log") }

    public init(root: URL, options: Options = Options()) {
        self.root = root.standardizedFileURL
        self.options = options
        users = Locked(ClusterUsers(folder: self.root))
    }

    /// Initialises the cluster if new, starts it unless it already runs (a server or another
    /// CLI command may use it), creates the database, and returns its connection URL. This
    /// process uses the cluster until `stop()`.
    public func start() throws -> String {
        try prepareDirectories()
        try users.withLock { users in try users.join {
            if !FileManager.default.fileExists(atPath: clusterDirectory.appendingPathComponent("PG_VERSION").path) {
                logger.info("initialising embedded PostgreSQL", [("data", .string(clusterDirectory.path))])
                try initialise()
            }
            try writeSettings()
            if try isRunning() {
                logger.info("embedded PostgreSQL already running", [("data", .string(clusterDirectory.path))])
                // A reload picks up what a running cluster can change; the socket permissions and
                // pg_hba file take effect at its next start (its socket folder is 0700 already).
                try run("pg_ctl", ["-D", clusterDirectory.path, "reload"], what: "reload PostgreSQL", tolerate: true)
            } else {
                try run("pg_ctl", ["-D", clusterDirectory.path, "-l", logFile.path, "-w", "-t", "60", "start"],
                        what: "start PostgreSQL (see \(logFile.path))")
                recordStarter()
                logger.info("embedded PostgreSQL started", [("data", .string(clusterDirectory.path))])
            }
            try createDatabase()
        } }
        return url(database: options.database)
    }

    /// Stops using the cluster, and stops the cluster if no other process uses it and a
    /// TeamCache process started it (one started by hand is left alone). `discarding`: the
    /// cluster is deleted next (a test's), so it stops at once, with no shutdown checkpoint and
    /// no wait for its sessions to end (`-m immediate`; a fast stop of a test cluster was seen
    /// to hold the test process's exit for pg_ctl's whole minute).
    public func stop(discarding: Bool = false) {
        users.withLock { users in users.leave {
            guard FileManager.default.fileExists(atPath: starterFile.path) else { return }
            _ = try? run("pg_ctl", ["-D", clusterDirectory.path, "-m", discarding ? "immediate" : "fast", "-w", "stop"],
                         what: "stop PostgreSQL")
            try? FileManager.default.removeItem(at: starterFile)
            logger.info("embedded PostgreSQL stopped", [("data", .string(clusterDirectory.path))])
        } }
    }

    /// The socket folder: inside the data folder when the path fits a Unix socket name
    /// (108 bytes), otherwise a private folder under /tmp named by a digest of the data
    /// folder's path: the same in every process (a server and a CLI command must agree).
    public var socketDirectory: URL {
        let inside = root.appendingPathComponent("run")
        if inside.path.utf8.count + 20 < 100 { return inside }
        let tag = Bytes.hex(SHA256.hash(root.path).prefix(8))
        return URL(fileURLWithPath: "/tmp/\(options.name)-\(tag)")
    }

    /// Present while a TeamCache process's start of the cluster stands (holds its pid).
    var starterFile: URL { root.appendingPathComponent("owner.pid") }

    private func recordStarter() {
        try? String(getpid()).write(to: starterFile, atomically: true, encoding: .utf8)
    }

    /// A `postgres://` URL that reaches `database` through the private socket.
    public func url(database: String) -> String {
        let host = socketDirectory.path.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
        return "postgresql://postgres@\(host):\(options.port)/\(database)"
    }

    private var runsAsRoot: Bool { getuid() == 0 }

    private func prepareDirectories() throws {
        let manager = FileManager.default
        try manager.createDirectory(at: root, withIntermediateDirectories: true)
        if !manager.fileExists(atPath: logFile.path) { _ = manager.createFile(atPath: logFile.path, contents: nil) }
        // Only the cluster's user (and root) may read the log.
        chmod(logFile.path, 0o600)
        guard runsAsRoot else {
            try prepareSocketFolder(owner: getuid(), group: nil)
            return
        }
        guard let account = SystemAccount.postgres else {
            throw EmbeddedPostgresError.noPostgresUser
        }
        chmod(root.path, 0o755)
        try prepareSocketFolder(owner: account.uid, group: account.gid)
        if manager.fileExists(atPath: clusterDirectory.path) {
            chown(clusterDirectory.path, account.uid, account.gid)
        }
        chown(logFile.path, account.uid, account.gid)
        // postgres must be able to reach the folder: a data dir under /root is not reachable.
        let probe = try run("test", ["-w", root.path, "-o", "-x", root.path], what: "check access", tolerate: true)
        if probe != 0 { throw EmbeddedPostgresError.unreachable(root.path) }
    }

    /// Creates the socket folder 0700, or takes an existing one only if it is a real folder
    /// (not a symlink) that this process's user or the cluster's owns. A folder under /tmp
    /// has a name anyone can predict: a planted symlink or folder is refused before anything
    /// is changed through it, and the changes go through a descriptor that follows no link.
    private func prepareSocketFolder(owner: uid_t, group: gid_t?) throws {
        let path = socketDirectory.path
        let unsafe = EmbeddedPostgresError.unsafeSocketFolder(path)
        var info = stat()
        if lstat(path, &info) != 0 {
            guard mkdir(path, 0o700) == 0 || errno == EEXIST, lstat(path, &info) == 0 else { throw unsafe }
        }
        guard info.st_mode & 0o170000 == 0o040000, info.st_uid == getuid() || info.st_uid == owner else { throw unsafe }
        let folder = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
        guard folder >= 0 else { throw unsafe }
        defer { close(folder) }
        guard fchmod(folder, 0o700) == 0 else { throw unsafe }
        if let group, fchown(folder, owner, group) != 0 { throw unsafe }
    }

    private func initialise() throws {
        var arguments = ["-D", clusterDirectory.path, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C"]
        if !options.durable { arguments.append("--no-sync") }
        if runsAsRoot, let account = SystemAccount.postgres {
            try FileManager.default.createDirectory(at: clusterDirectory, withIntermediateDirectories: true)
            chown(clusterDirectory.path, account.uid, account.gid)
        }
        try run("initdb", arguments, what: "initialise PostgreSQL")
        let include = "\ninclude_if_exists = '\(options.name).conf'\n"
        let handle = try FileHandle(forWritingTo: clusterDirectory.appendingPathComponent("postgresql.conf"))
        try handle.seekToEnd()
        try handle.write(contentsOf: Data(include.utf8))
        try handle.close()
    }

    /// Settings rewritten at each start, so a moved data folder still finds its socket.
    private func writeSettings() throws {
        var lines = [
            "listen_addresses = ''",
            "port = \(options.port)",
            "unix_socket_directories = '\(socketDirectory.path.replacingOccurrences(of: "'", with: "''"))'",
            "unix_socket_permissions = 0700",
            "hba_file = '\(hbaFile.path.replacingOccurrences(of: "'", with: "''"))'",
            "max_connections = \(options.maxConnections)",
            "shared_buffers = '256MB'",
        ]
        if !options.durable {
            lines += ["fsync = off", "synchronous_commit = off", "full_page_writes = off"]
        }
        let file = clusterDirectory.appendingPathComponent("\(options.name).conf")
        try (lines.joined(separator: "\n") + "\n").write(to: file, atomically: false, encoding: .utf8)
        // The socket only: initdb's default also trusts TCP from 127.0.0.1 and ::1.
        let hba = "# Written at each start: the private Unix socket only.\nlocal all all trust\n"
        try hba.write(to: hbaFile, atomically: false, encoding: .utf8)
        chmod(hbaFile.path, 0o600)
        if runsAsRoot, let account = SystemAccount.postgres {
            for path in [file.path, hbaFile.path] { chown(path, account.uid, account.gid) }
        }
    }

    private var hbaFile: URL { clusterDirectory.appendingPathComponent("\(options.name)_hba.conf") }

    private func isRunning() throws -> Bool {
        try run("pg_ctl", ["-D", clusterDirectory.path, "status"], what: "query PostgreSQL", tolerate: true) == 0
    }

    private func createDatabase() throws {
        let admin = try PostgresConnection(url: url(database: "postgres"))
        let exists = try admin.query("SELECT 1 FROM pg_database WHERE datname = $1", [.text(options.database)])
        if exists.rowCount == 0 {
            // CREATE DATABASE takes no bind parameters; the name is ours and quoted as an identifier.
            let quoted = "\"" + options.database.replacingOccurrences(of: "\"", with: "\"\"") + "\""
            do {
                try admin.execute("CREATE DATABASE \(quoted)")
            } catch let error as PostgresError where error.sqlState == SQLState("42P04") {
                // Created concurrently by another process: fine.
            }
        }
    }

    /// Runs a PostgreSQL tool (as `postgres` when root); returns its status.
    @discardableResult
    private func run(_ tool: String, _ arguments: [String], what: String, tolerate: Bool = false) throws -> Int32 {
        let executable = tool == "test" ? "/usr/bin/test" : try Self.locate(tool)
        return try Self.runAsOwner([executable] + arguments, what: what, tolerate: tolerate)
    }

    /// Runs `command` as a cluster's owner: `postgres` when this process is root (PostgreSQL
    /// and PgBouncer refuse to run as root), else this user. Its status; unless `tolerate`, a
    /// failure throws with the end of what it printed.
    @discardableResult
    public static func runAsOwner(_ command: [String], what: String, tolerate: Bool = false) throws -> Int32 {
        let owner = getuid() == 0 ? ["/usr/sbin/runuser", "-u", "postgres", "--"] : []
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("postgres-command-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: output) }
        let status = try Subprocess.run(owner + command, output: output)
        if status != 0 && !tolerate {
            let text = (try? String(contentsOf: output, encoding: .utf8)) ?? ""
            throw EmbeddedPostgresError.commandFailed(what: what, status: status, output: String(text.suffix(2000)))
        }
        return status
    }

    /// Finds a PostgreSQL server binary on PATH or in Debian's versioned folders.
    public static func locate(_ tool: String) throws -> String {
        let manager = FileManager.default
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        for folder in path.split(separator: ":") where manager.isExecutableFile(atPath: "\(folder)/\(tool)") {
            return "\(folder)/\(tool)"
        }
        let versions = (try? manager.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []
        for version in versions.sorted(by: { (Int($0) ?? 0) > (Int($1) ?? 0) }) {
            let candidate = "/usr/lib/postgresql/\(version)/bin/\(tool)"
            if manager.isExecutableFile(atPath: candidate) { return candidate }
        }
        throw EmbeddedPostgresError.missingBinary(tool)
    }
}

/// Why the embedded database could not start.
public enum EmbeddedPostgresError: Error, CustomStringConvertible {
    case missingBinary(String)
    case noPostgresUser
    case unreachable(String)
    case unsafeSocketFolder(String)
    case commandFailed(what: String, status: Int32, output: String)
    case lockFailed(String)

    public var description: String {
        switch self {
        case .missingBinary(let tool):
            "\(tool) not found: install the PostgreSQL server (Debian: apt-get install postgresql)"
        case .noPostgresUser:
            "running as root needs a 'postgres' system user to own the embedded database (apt-get install postgresql)"
        case .unreachable(let path):
            "the postgres user cannot reach \(path); choose a --data-dir outside a private home folder"
        case .unsafeSocketFolder(let path):
            "the socket folder \(path) belongs to another user or is open to others; remove it or choose another --data-dir"
        case .commandFailed(let what, let status, let output):
            "could not \(what) (exit \(status)): \(output)"
        case .lockFailed(let path):
            "could not lock \(path) (another process is starting or stopping the embedded database)"
        }
    }
}
