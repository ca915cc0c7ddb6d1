import Foundation
import Glibc
import Locking

/// `teamcache serve` as a child process on a database of its own under the suite's
/// PostgreSQL: for tests that kill the process, or starve its standard error.
public final class ServeProcess {
    public let process = Process()
    public let port: Int
    public let database: String
    /// Whether the child said it listens (its own bind succeeded).
    private let announcement: Announcement

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
        // Made close-on-exec at once (Foundation's `Pipe` is not, and Glibc's module hides
        // pipe2): a PostgreSQL that another test spawns meanwhile (`Subprocess` closes nothing)
        // would otherwise inherit the write end and keep it open, and this child's exit would
        // never end its output.
        var ends: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &ends) == 0 else {
            throw RawClient.Failure.connect(errno)
        }
        // Closed here once the child has its copy (or did not start).
        let writing = FileHandle(fileDescriptor: ends[1], closeOnDealloc: true)
        process.standardOutput = writing  // the child's dup2 to 1 clears close-on-exec there
        process.standardError = stderr ?? FileHandle.nullDevice
        do {
            try process.run()
        } catch {
            Glibc.close(ends[0])
            throw error
        }
        try? writing.close()
        announcement = Announcement(reading: ends[0])
    }

    /// A port free on loopback right now, for a child to listen on (`ChildPort`).
    public static func freePort() throws -> Int { try ChildPort.next() }

    /// Waits until the server accepts connections (`seconds` at most); false at once when the
    /// child exited without listening.
    public func waitUntilListening(seconds: Int = 10) -> Bool {
        for _ in 0..<seconds * 10 {
            if acceptsConnections { return true }
            if announcement.gaveUp { return false }
            Thread.sleep(forTimeInterval: 0.1)
        }
        return false
    }

    /// `waitUntilListening` for async tests: it sleeps with `Task.sleep`, so the cooperative
    /// pool stays free for the client under test meanwhile (see `offThePool`).
    public func listening(seconds: Int = 10) async -> Bool {
        for _ in 0..<seconds * 10 {
            if acceptsConnections { return true }
            if announcement.gaveUp { return false }
            try? await Task.sleep(nanoseconds: 100_000_000)
        }
        return false
    }

    /// The child said it listens: it prints so after its own listening sockets are bound, so
    /// the kernel queues a connection from then on. (A connection alone proved nothing: another
    /// socket may hold the port, see `ChildPort`.)
    private var acceptsConnections: Bool { announcement.listening }

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

/// Reads a child's standard output to its end (so the child never blocks on a full pipe) and
/// notes the line `teamcache serve` prints once its listening sockets are bound. Total: a read
/// error ends the reading as the output's end does (Foundation's `availableData` traps on one).
final class Announcement: Sendable {
    private let state = Locked((listening: false, ended: false))

    /// Takes `fd` over: it is closed when the reading ends.
    init(reading fd: Int32) {
        let thread = Thread { [state] in
            var seen: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
                if count < 0 && errno == EINTR { continue }
                if count <= 0 { break }
                // Only the start matters: the line comes first, and a chatty child is not kept.
                guard seen.count < 65536, !state.withLock({ $0.listening }) else { continue }
                seen += chunk[0..<count]
                if String(decoding: seen, as: UTF8.self).contains("listening on ") {
                    state.withLock { $0.listening = true }
                }
            }
            state.withLock { $0.ended = true }
            Glibc.close(fd)
        }
        thread.name = "child stdout"
        thread.start()
    }

    var listening: Bool { state.withLock { $0.listening } }
    /// The output ended (the child exited) without the line.
    var gaveUp: Bool { state.withLock { $0.ended && !$0.listening } }
    var ended: Bool { state.withLock { $0.ended } }
}
