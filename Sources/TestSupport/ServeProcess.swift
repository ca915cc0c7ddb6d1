import Foundation
import Glibc

/// `teamcache serve` as a child process on a database of its own under the suite's
/// PostgreSQL: for tests that kill the process, or starve its standard error.
public final class ServeProcess {
    public let process = Process()
    public let port: Int
    public let database: String

    /// Starts the debug binary; `stderr` receives its log (nil: discarded).
    public init(prefix: String, environment extra: [String: String] = [:], stderr: FileHandle? = nil) throws {
        let binary = TestPaths.repository.appendingPathComponent(".build/debug/teamcache").path
        guard FileManager.default.isExecutableFile(atPath: binary) else {
            throw RawClient.Failure.malformed("build the teamcache binary first")
        }
        database = try TestDatabase.shared.migratedDatabase(prefix: prefix)
        port = 20000 + Int(UInt16.random(in: 0...9999))
        var environment = ProcessInfo.processInfo.environment
        environment["TEAMCACHE_AUTH"] = "off"
        environment["TEAMCACHE_LOG_LEVEL"] = "error"
        environment.merge(extra) { $1 }
        // A dbname query parameter makes libpq use this test's database under the suite's server.
        let base = TestDatabase.shared.url
        let url = base + (base.contains("?") ? "&" : "?") + "dbname=\(database)"
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = ["serve", "--listen", "127.0.0.1:\(port)", "--database-url", url]
        process.environment = environment
        process.standardOutput = FileHandle.nullDevice
        process.standardError = stderr ?? FileHandle.nullDevice
        try process.run()
    }

    /// Waits until the server accepts connections (10 s at most).
    public func waitUntilListening() -> Bool {
        for _ in 0..<100 {
            if (try? RawClient(port: port, timeout: 1)) != nil { return true }
            Thread.sleep(forTimeInterval: 0.1)
        }
        return false
    }

    public func kill(_ signal: Int32 = SIGKILL) {
        if process.isRunning { Glibc.kill(process.processIdentifier, signal) }
    }

    deinit { kill() }
}
