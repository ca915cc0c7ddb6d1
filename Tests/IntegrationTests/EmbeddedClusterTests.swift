import Foundation
import Glibc
import Postgres
import Testing
import TestSupport

/// The embedded PostgreSQL is private to the service, and survives the service being killed.
@Suite(.serialized) struct EmbeddedClusterTests {
    private func mode(_ path: String) -> mode_t {
        var info = stat()
        return stat(path, &info) == 0 ? info.st_mode & 0o777 : 0o7777
    }

    @Test func onlyTheServiceUserAndPostgresCanReachTheCluster() throws {
        let database = try PrivateCluster("tc-private")
        defer { database.remove() }
        let cluster = database.cluster
        #expect(mode(cluster.socketDirectory.path) == 0o700)
        #expect(mode(cluster.logFile.path) == 0o600)
        let socket = try FileManager.default.contentsOfDirectory(atPath: cluster.socketDirectory.path)
            .first { $0.hasPrefix(".s.PGSQL.") && !$0.hasSuffix(".lock") }
        #expect(mode(cluster.socketDirectory.appendingPathComponent(try #require(socket)).path) == 0o700)
        // The service itself still connects.
        #expect(try PostgresConnection(url: database.url).query("SELECT 1 AS one").rows.first?.int("one") == 1)
        // Another local user cannot, not even with trust authentication on the socket.
        guard getuid() == 0, let psql = try? EmbeddedPostgres.locate("psql") else { return }
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("psql-\(getpid())")
        defer { try? FileManager.default.removeItem(at: output) }
        let status = try Self.run(["/usr/sbin/runuser", "-u", "nobody", "--", psql, "-h", cluster.socketDirectory.path,
                                   "-p", "5432", "-U", "postgres", "-d", "postgres", "-c", "SELECT 1"], output: output)
        #expect(status != 0, "user nobody reached the embedded cluster")
        // Nor over TCP: it listens on no address.
        let tcp = try Self.run([psql, "-h", "127.0.0.1", "-p", "5432", "-U", "postgres", "-c", "SELECT 1"],
                               output: output)
        #expect(tcp != 0 || !FileManager.default.fileExists(atPath: cluster.clusterDirectory.path))
    }

    /// A CLI command that started the cluster, and ends while a server joined it, leaves it
    /// running for the server; the last process out stops it, whichever it is.
    @Test func theLastProcessOutStopsTheClusterAndNoOneStopsItUnderAnother() throws {
        let root = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("tc-users-\(getpid())")
        defer { try? FileManager.default.removeItem(at: root) }
        let command = EmbeddedPostgres(root: root, options: .init(durable: false))
        let server = EmbeddedPostgres(root: root, options: .init(durable: false))
        let url = try command.start()
        _ = try server.start()
        command.stop()
        #expect(try PostgresConnection(url: url).query("SELECT 1 AS one").rows.first?.int("one") == 1,
                "the command stopped the cluster under the server")
        server.stop()
        #expect((try? PostgresConnection(url: url)) == nil, "the last one out left the cluster running")
        // The other way round: the starter stays, the one that joined leaves first.
        let first = EmbeddedPostgres(root: root, options: .init(durable: false))
        let second = EmbeddedPostgres(root: root, options: .init(durable: false))
        let again = try first.start()
        _ = try second.start()
        second.stop()
        #expect(try PostgresConnection(url: again).query("SELECT 1 AS one").rows.first?.int("one") == 1)
        first.stop()
        #expect((try? PostgresConnection(url: again)) == nil)
    }

    @Test func aPlantedSymlinkForTheSocketFolderIsRefused() throws {
        // A long data path puts the socket folder under /tmp, at a name anyone can compute.
        let root = URL(fileURLWithPath: "/tmp").appendingPathComponent("tc-plant-" + String(repeating: "y", count: 90)
            + "-\(getpid())")
        let cluster = EmbeddedPostgres(root: root, options: .init(durable: false))
        let target = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("tc-target-\(getpid())")
        try FileManager.default.createDirectory(at: target, withIntermediateDirectories: true)
        chmod(target.path, 0o755)
        defer {
            try? FileManager.default.removeItem(atPath: cluster.socketDirectory.path)
            try? FileManager.default.removeItem(at: target)
            try? FileManager.default.removeItem(at: root)
        }
        #expect(cluster.socketDirectory.path.hasPrefix("/tmp/\(cluster.options.name)-"))
        try FileManager.default.createSymbolicLink(atPath: cluster.socketDirectory.path,
                                                   withDestinationPath: target.path)
        #expect(throws: EmbeddedPostgresError.self) { _ = try cluster.start() }
        // Nothing was changed through the link.
        #expect(mode(target.path) == 0o755)
        var info = stat()
        #expect(stat(target.path, &info) == 0 && info.st_uid == getuid())
    }

    @Test func serveKilledThenServedAgainOnTheSameDataFolderWorks() throws {
        let binary = TestPaths.repository.appendingPathComponent(".build/debug/teamcache").path
        try #require(FileManager.default.isExecutableFile(atPath: binary))
        // A long path: the socket then lives under /tmp, named the same in every process.
        let long = "tc-kill-" + String(repeating: "x", count: 90) + "-\(getpid())"
        let folder = URL(fileURLWithPath: "/tmp").appendingPathComponent(long)
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        chmod(folder.path, 0o755)
        defer {
            let cluster = folder.appendingPathComponent("data/postgres").path
            if let pgctl = try? EmbeddedPostgres.locate("pg_ctl") {
                let command = getuid() == 0 ? ["/usr/sbin/runuser", "-u", "postgres", "--", pgctl] : [pgctl]
                _ = try? Self.run(command + ["-D", cluster, "-m", "immediate", "stop"],
                                  output: folder.appendingPathComponent("stop.log"))
            }
            try? FileManager.default.removeItem(at: folder)
        }
        let data = folder.appendingPathComponent("data")
        let port = try ServeProcess.freePort()
        func request(_ method: String, _ body: [UInt8] = []) throws -> Int {
            let client = try RawClient(port: port, timeout: 10)
            try client.send(Array("\(method) /v1/caches/kill/entries/k HTTP/1.1\r\nHost: t\r\n".utf8)
                + Array("Content-Length: \(body.count)\r\n\r\n".utf8) + body)
            return try client.readResponse().status
        }
        let first = try ServeProcess(dataDirectory: data, port: port)
        try #require(first.waitUntilListening(seconds: 30))
        #expect(try request("PUT", [1, 2, 3]) == 201)
        // The service's cluster keeps the names data folders made by earlier builds have.
        #expect(FileManager.default.fileExists(atPath: data.appendingPathComponent("postgres/teamcache.conf").path))
        first.stop(SIGKILL)
        let second = try ServeProcess(dataDirectory: data, port: port)
        try #require(second.waitUntilListening(seconds: 30), "serve did not start again on the data folder of a killed one")
        #expect(try request("GET") == 200)
        // It adopted the cluster the killed one left, so a clean stop stops it too.
        second.stop(SIGTERM)
        let pidFile = data.appendingPathComponent("postgres/postmaster.pid").path
        var stopped = false
        for _ in 0..<50 where !stopped {
            stopped = !FileManager.default.fileExists(atPath: pidFile)
            if !stopped { Thread.sleep(forTimeInterval: 0.1) }
        }
        #expect(stopped, "the adopted cluster was left running")
    }

    static func run(_ arguments: [String], output: URL) throws -> Int32 {
        try Subprocess.run(arguments, output: output)
    }
}
