import Foundation
import Glibc
import Locking

/// `teamcache serve` as a child process on a database of its own under the suite's
/// PostgreSQL: for tests that kill the process, or starve its standard error.
public final class ServeProcess {
    public let process = Process()
    public let port: Int
    public let database: String

    /// Starts the debug binary on a fresh database; `stderr` receives its log (nil: discarded).
    public convenience init(prefix: String, environment extra: [String: String] = [:], stderr: FileHandle? = nil) throws {
        try self.init(database: try TestDatabase.shared.migratedDatabase(prefix: prefix), environment: extra,
                      stderr: stderr)
    }

    /// Starts the debug binary on `database` (under the suite's server): several replicas
    /// of one service share it.
    /// `port`: the one to listen on (a service restarted where its clients look for it).
    public convenience init(database: String, environment extra: [String: String] = [:], stderr: FileHandle? = nil,
                            port: Int? = nil) throws {
        // A dbname query parameter makes libpq use this test's database under the suite's server.
        let base = TestDatabase.shared.url
        let url = base + (base.contains("?") ? "&" : "?") + "dbname=\(database)"
        try self.init(arguments: ["--database-url", url], database: database, environment: extra, stderr: stderr,
                      port: port)
    }

    /// Starts the debug binary with its embedded cluster under `dataDirectory`.
    public convenience init(dataDirectory: URL, port: Int? = nil) throws {
        try self.init(arguments: ["--data-dir", dataDirectory.path], database: "", environment: [:], stderr: nil,
                      port: port)
    }

    init(arguments: [String], database: String, environment extra: [String: String], stderr: FileHandle?,
         port chosen: Int? = nil) throws {
        let binary = TestPaths.repository.appendingPathComponent(".build/debug/teamcache").path
        guard FileManager.default.isExecutableFile(atPath: binary) else {
            throw RawClient.Failure.malformed("build the teamcache binary first")
        }
        self.database = database
        port = try chosen ?? Self.freePort()
        var environment = ProcessInfo.processInfo.environment
        environment["TEAMCACHE_AUTH"] = "off"
        environment["TEAMCACHE_LOG_LEVEL"] = "error"
        environment.merge(extra) { $1 }
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = ["serve", "--listen", "127.0.0.1:\(port)"] + arguments
        process.environment = environment
        process.standardOutput = FileHandle.nullDevice
        process.standardError = stderr ?? FileHandle.nullDevice
        try process.run()
    }

    /// A port free on loopback right now (the kernel's pick), for a child to listen on.
    public static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        defer { Glibc.close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(fd, pointer, length) == 0 && getsockname(fd, pointer, &length) == 0
            }
        }
        guard bound else { throw RawClient.Failure.connect(errno) }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    /// Waits until the server accepts connections (`seconds` at most).
    public func waitUntilListening(seconds: Int = 10) -> Bool {
        for _ in 0..<seconds * 10 {
            if acceptsConnections { return true }
            Thread.sleep(forTimeInterval: 0.1)
        }
        return false
    }

    /// `waitUntilListening` for async tests: it sleeps with `Task.sleep`, so the cooperative
    /// pool stays free for the client under test meanwhile (see `offThePool`).
    public func listening(seconds: Int = 10) async -> Bool {
        for _ in 0..<seconds * 10 {
            if acceptsConnections { return true }
            try? await Task.sleep(nanoseconds: 100_000_000)
        }
        return false
    }

    private var acceptsConnections: Bool { (try? RawClient(port: port, timeout: 1)) != nil }

    /// Set once `stop` reaped the child: its pid may then be another process's, so nothing is
    /// sent to it again (Foundation's `isRunning` does not know of a `waitpid` of ours).
    private let reaped = Locked(false)

    public func kill(_ signal: Int32 = SIGKILL) {
        if !reaped.value && process.isRunning { Glibc.kill(process.processIdentifier, signal) }
    }

    /// Sends `signal` and reaps the process; a second call does nothing. `waitpid`, not
    /// `Process.waitUntilExit`, which was seen here never to return for a child killed off the
    /// main thread.
    public func stop(_ signal: Int32) {
        guard reaped.withLock({ done in defer { done = true }; return !done }) else { return }
        let pid = process.processIdentifier
        Glibc.kill(pid, signal)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    }

    deinit { kill() }
}
