import Locking
import CacheCore
import Foundation
import Observability
import Postgres
import TeamCache

/// A running TeamCache (real server on a free loopback port, real PostgreSQL) for
/// integration tests. Tests share the migrated test database and keep apart by namespace.
public final class TestService: Sendable {
    public let app: Application
    public var port: Int { app.server.port }

    /// The shared instance: auth on, default limits.
    public static let shared: TestService = {
        do { return try TestService() } catch { fatalError("test service: \(error)") }
    }()

    public init(clock: any Clock = SystemClock(), _ tune: (inout Configuration) -> Void = { _ in }) throws {
        let level = ProcessInfo.processInfo.environment["TEAMCACHE_TEST_LOG_LEVEL"].flatMap(LogLevel.init(name:))
        LogSink.shared.configure(level: level ?? .warn)
        var configuration = Configuration()
        configuration.databaseURL = try TestDatabase.shared.migratedDefault()
        configuration.migrationsDirectory = TestPaths.migrations
        configuration.http.port = 0
        configuration.http.workerThreads = 16
        configuration.accessFlushInterval = 3600
        configuration.evictionInterval = 3600
        // CI runs the suite once more with the near-cache off (TEAMCACHE_NEAR_CACHE_BYTES=0).
        if let bytes = ProcessInfo.processInfo.environment["TEAMCACHE_NEAR_CACHE_BYTES"].flatMap(Int.init) {
            configuration.nearCacheBytes = bytes
        }
        tune(&configuration)
        // CI runs the entry suites once more behind a real PgBouncer in transaction pooling mode.
        // Tests that chose a database of their own keep reaching it directly.
        let shared = try TestDatabase.shared.migratedDefault()
        if ProcessInfo.processInfo.environment["TEAMCACHE_TEST_POOLER"] == "transaction",
           configuration.databaseURL == shared, configuration.directDatabaseURL == nil {
            let direct = shared
            let name = PostgresConnection.keywords(in: direct)["dbname"] ?? "teamcache"
            configuration.databaseURL = try SharedPgBouncer.instance.get().url(database: name)
            configuration.directDatabaseURL = direct
            configuration.sessionLimits.transactionPooler = true
        }
        app = try Application(configuration: configuration, clock: clock)
        try app.start()
    }

    public func stop() { app.stop() }

    private let metricsSecret = Locked<String?>(nil)

    /// `/metrics` as Prometheus reads it: with a token of the metrics scope when auth is on.
    public func metrics() throws -> String {
        var secret = metricsSecret.value
        if secret == nil, app.configuration.authEnabled {
            let made = try token([.metrics], namespaces: "*")
            metricsSecret.withLock { $0 = made }
            secret = made
        }
        let answer = try request("GET", "/metrics", token: secret)
        guard answer.status == 200 else { throw RawClient.Failure.malformed("GET /metrics answered \(answer.status)") }
        return answer.text
    }

    /// A unique namespace for one test.
    public static func namespace(_ prefix: String = "t") -> String {
        "\(prefix)-\(UInt32.random(in: 0...UInt32.max))"
    }

    /// A new token's secret.
    public func token(_ scopes: Set<Scope>, namespaces: String, expiresAt: Date? = nil) throws -> String {
        try app.tokens.create(name: "test", namespacePattern: namespaces, scopes: scopes, expiresAt: expiresAt).1
    }

    /// One request on a new connection.
    @discardableResult
    public func request(_ method: String, _ path: String, token: String? = nil, headers: [(String, String)] = [],
                        body: [UInt8] = []) throws -> RawClient.Response {
        let client = try RawClient(port: port, timeout: 30)
        var head = "\(method) \(path) HTTP/1.1\r\nHost: test\r\nConnection: close\r\n"
        if let token { head += "Authorization: Bearer \(token)\r\n" }
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if !body.isEmpty || method == "PUT" || method == "POST" { head += "Content-Length: \(body.count)\r\n" }
        try client.send(Array((head + "\r\n").utf8) + body)
        return try client.readResponse(head: method == "HEAD")
    }

    public func request(_ method: String, _ path: String, token: String? = nil, headers: [(String, String)] = [],
                        json: String) throws -> RawClient.Response {
        try request(method, path, token: token, headers: [("Content-Type", "application/json")] + headers,
                    body: Array(json.utf8))
    }
}

extension TestDatabase {
    /// The suite's default database, migrated once, as a URL the service can use.
    public func migratedDefault() throws -> String {
        try TestDatabaseMigration.once(self)
        return url
    }
}

enum TestDatabaseMigration {
    nonisolated(unsafe) static var done = false
    static let lock = NSLock()

    static func once(_ database: TestDatabase) throws {
        try lock.withLock {
            guard !done else { return }
            let runner = MigrationRunner(migrations: try Migration.load(from: TestPaths.migrations))
            try runner.apply(on: try PostgresConnection(url: database.url))
            done = true
        }
    }
}

/// One PgBouncer for every service of a test process run with TEAMCACHE_TEST_POOLER,
/// stopped when the process exits (it is a daemon: nothing else would stop it).
enum SharedPgBouncer {
    static let instance: Result<PgBouncer, any Error> = {
        let started = Result { try PgBouncer(serverConnections: 8) }
        atexit { if case .success(let bouncer) = SharedPgBouncer.instance { bouncer.stop() } }
        return started
    }()
}
