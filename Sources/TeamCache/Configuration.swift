import CacheCore
import Foundation
import HTTPClient
import HTTPServer
import Observability
import Postgres

/// The whole service's configuration, read once at start from `TEAMCACHE_*` variables and
/// flags (flags win) and validated then.
public struct Configuration: Sendable {
    /// The HTTP server's settings, under TeamCache's name: its `Server` header and the
    /// `teamcache_` prefix of the server's metrics.
    public var http: HTTPServerConfiguration = {
        var http = HTTPServerConfiguration()
        http.serverName = Configuration.applicationName
        http.metricPrefix = Configuration.metricPrefix
        http.problemTypeBase = Configuration.problemTypeBase
        // The gateway relays streams as quiet as the default upstreams may be (see `gateway`).
        http.streamIdleTimeout = max(http.streamIdleTimeout, ClientDeadlines().idle + 5)
        return http
    }()
    /// What the lower layers (the HTTP server, the database pool) are named by here.
    public static let applicationName = "teamcache"
    public static let metricPrefix = "teamcache_"
    /// Where every problem type of the service points (`…/problems/not-found`).
    public static let problemTypeBase = "https://teamcache.dev/problems/"
    public var cache = CachePolicy()
    /// nil: the embedded cluster under `dataDirectory`.
    public var databaseURL: String?
    /// A direct session with the primary, for what a transaction pooler cannot carry
    /// (LISTEN, session advisory locks, migrations); nil: `databaseURL`.
    public var directDatabaseURL: String?
    /// A hot standby of the primary that serves fresh hits while it lags at most `readMaxLag`.
    public var readDatabaseURL: String?
    public var readMaxLag: TimeInterval = 1
    /// Master keys of encrypted namespaces (TEAMCACHE_MASTER_KEY_FILE); nil: none given, and
    /// the service refuses to start if any namespace is encrypted.
    public var masterKeys: MasterKeys?
    public var dataDirectory = URL(fileURLWithPath: ".teamcache")
    public var migrationsDirectory: URL?
    public var logLevel = LogLevel.info
    public var authEnabled = true
    public var poolSize = 16
    /// Write groups committed at once at most (`TEAMCACHE_WRITE_BATCHES`); nil: a quarter of
    /// the pool (the rest stays free for reads, flushes and eviction). One runs at a time
    /// while it keeps up (`EntryWriteBatcher`).
    public var writeBatchesSetting: Int?
    public var writeBatches: Int { writeBatchesSetting ?? min(64, max(1, poolSize / 4)) }
    public var acquireTimeout: TimeInterval = 2
    /// Statement, lock and idle-transaction limits of every serving connection, and the name
    /// its sessions show in `pg_stat_activity`.
    public var sessionLimits: SessionLimits = {
        var limits = SessionLimits()
        limits.applicationName = Configuration.applicationName
        return limits
    }()
    /// The same limits for sessions on the direct URL (never through the pooler).
    public var directSessionLimits: SessionLimits {
        var limits = sessionLimits
        limits.transactionPooler = false
        return limits
    }
    /// Most reads per batched statement from an event loop; 0 sends every read through the pool.
    public var readBatch = 256
    public var maxWaiters = 10_000
    /// Longest wait for a batched read's answer.
    public var readTimeout: TimeInterval = 2
    /// Memory for inflated bodies of gzip entries served to identity clients (0: none).
    public var inflateCacheBytes = 32 * 1024 * 1024
    /// Memory for hot entries answered without a database read (0: off; see `NearCache`).
    public var nearCacheBytes = 64 * 1024 * 1024
    public var evictionInterval: TimeInterval = 60
    public var accessFlushInterval: TimeInterval = 2
    public var accessFlushBatch = 100_000
    public var accessTracking = true
    public var metricsRequireAuth = true
    public var tokenCacheTTL: TimeInterval = 10
    public var rateLimit: Double = 0
    /// The gateway's upstreams (TEAMCACHE_UPSTREAMS_FILE over the defaults); nil: the defaults.
    public var upstreams: [String: Upstream]?
    public var gateway = GatewaySettings()
    /// What hits are priced at (TEAMCACHE_PRICES_FILE; none by default), and in which currency.
    public var prices = PriceTable()
    public var currency = "USD"

    public init() {}

    /// Reads `environment` with `flags` (flag → value) taking precedence.
    public static func load(environment: [String: String], flags: [String: String] = [:]) throws -> Configuration {
        var values = environment
        if values["TEAMCACHE_DATABASE_URL"] == nil, let url = environment["DATABASE_URL"] {
            values["TEAMCACHE_DATABASE_URL"] = url
        }
        for setting in Setting.all {
            if let flag = setting.flag, let value = flags[flag] { values[setting.variable] = value }
        }
        var reader = SettingReader(values: values)
        return try reader.configuration()
    }
}

/// Parses each variable with its range, so an error names the variable and what it accepts.
struct SettingReader {
    let values: [String: String]

    mutating func configuration() throws -> Configuration {
        var config = Configuration()
        let (host, port) = try listen("TEAMCACHE_LISTEN")
        config.http.host = host
        config.http.port = port
        config.databaseURL = values["TEAMCACHE_DATABASE_URL"].flatMap { $0.isEmpty ? nil : $0 }
        config.directDatabaseURL = values["TEAMCACHE_DIRECT_DATABASE_URL"].flatMap { $0.isEmpty ? nil : $0 }
        config.sessionLimits.transactionPooler = try pooler(config)
        config.readDatabaseURL = values["TEAMCACHE_READ_DATABASE_URL"].flatMap { $0.isEmpty ? nil : $0 }
        if let path = values["TEAMCACHE_MASTER_KEY_FILE"], !path.isEmpty {
            do {
                config.masterKeys = try MasterKeys.load(path: path)
            } catch {
                throw ConfigurationError(variable: "TEAMCACHE_MASTER_KEY_FILE", value: path,
                                         allowed: "a readable file of keys, one a line (64 hex digits): \(error)")
            }
        }
        // At least what 100 ms sampling and probing can tell apart; at most the minute of WAL
        // history kept (older is unknown, so too far behind).
        config.readMaxLag = try duration("TEAMCACHE_READ_MAX_LAG", 0.3...60)
        if let folder = values["TEAMCACHE_DATA_DIR"], !folder.isEmpty {
            config.dataDirectory = URL(fileURLWithPath: folder)
        }
        if let folder = values["TEAMCACHE_MIGRATIONS_DIR"], !folder.isEmpty {
            config.migrationsDirectory = URL(fileURLWithPath: folder)
        }
        let level = text("TEAMCACHE_LOG_LEVEL")
        guard let parsed = LogLevel(name: level) else {
            throw ConfigurationError(variable: "TEAMCACHE_LOG_LEVEL", value: level, allowed: "debug, info, warn or error")
        }
        config.logLevel = parsed
        config.authEnabled = try flag("TEAMCACHE_AUTH")
        if !config.authEnabled && !host.hasPrefix("127.") {
            throw ConfigurationError(variable: "TEAMCACHE_AUTH", value: "off",
                                     allowed: "on when listening beyond loopback (\(host)): off is for local development")
        }
        config.metricsRequireAuth = try flag("TEAMCACHE_METRICS_AUTH")
        config.poolSize = try integer("TEAMCACHE_DB_POOL_SIZE", 1...500)
        config.acquireTimeout = try duration("TEAMCACHE_DB_ACQUIRE_TIMEOUT", 0.01...60)
        if !(values["TEAMCACHE_WRITE_BATCHES"]?.isEmpty ?? true) {
            // Never every connection: reads, flushes and eviction must still find one.
            config.writeBatchesSetting = try integer("TEAMCACHE_WRITE_BATCHES", 1...min(64, max(1, config.poolSize - 1)))
        }
        config.readBatch = try integer("TEAMCACHE_READ_BATCH", 0...10_000)
        config.maxWaiters = try integer("TEAMCACHE_MAX_WAITERS", 0...1_000_000)
        config.readTimeout = try duration("TEAMCACHE_DB_READ_TIMEOUT", 0.01...60)
        config.sessionLimits.statementTimeout = try duration("TEAMCACHE_DB_STATEMENT_TIMEOUT", 0.01...3600)
        config.sessionLimits.lockTimeout = try duration("TEAMCACHE_DB_LOCK_TIMEOUT", 0.01...3600)
        config.sessionLimits.idleInTransactionTimeout = try duration("TEAMCACHE_DB_IDLE_IN_TRANSACTION_TIMEOUT",
                                                                     0.01...3600)
        config.http.requestTimeout = try duration("TEAMCACHE_REQUEST_TIMEOUT", 0.1...3600)
        config.inflateCacheBytes = try integer("TEAMCACHE_INFLATE_CACHE_BYTES", 0...Int(Int32.max))
        config.nearCacheBytes = try integer("TEAMCACHE_NEAR_CACHE_BYTES", 0...(1 << 40))
        // A worker without a database connection only waits for one: match the pool by default.
        config.http.workerThreads = try integer("TEAMCACHE_WORKERS", 1...1024, default: config.poolSize)
        config.http.eventLoops = try integer("TEAMCACHE_EVENT_LOOPS", 1...64,
                                             default: ProcessInfo.processInfo.activeProcessorCount)
        config.http.maxConnections = try integer("TEAMCACHE_MAX_CONNECTIONS", 1...1_000_000)
        config.http.maxConnectionsPerClient = try integer("TEAMCACHE_MAX_CONNECTIONS_PER_CLIENT", 0...1_000_000)
        config.cache.maxBodyBytes = try integer("TEAMCACHE_MAX_BODY_BYTES", 1...1_073_741_824)
        config.http.bodyBudgetBytes = try integer("TEAMCACHE_BODY_BUDGET_BYTES", 1...(1 << 40),
                                                  default: max(256 * 1024 * 1024, 4 * config.cache.maxBodyBytes))
        config.http.headerTimeout = try duration("TEAMCACHE_HEADER_TIMEOUT", 0.1...3600)
        config.http.bodyTimeout = try duration("TEAMCACHE_BODY_TIMEOUT", 0.1...3600)
        config.http.idleTimeout = try duration("TEAMCACHE_IDLE_TIMEOUT", 0.1...86400)
        config.http.writeTimeout = try duration("TEAMCACHE_WRITE_TIMEOUT", 0.1...3600)
        config.cache.maxTTL = Int(try duration("TEAMCACHE_MAX_TTL", 1...3_153_600_000))
        // Unset, the documented default, but never past TEAMCACHE_MAX_TTL (a user who lowered
        // the cap did not ask for an error about a variable they did not set).
        config.cache.defaultTTL = values["TEAMCACHE_DEFAULT_TTL"]?.isEmpty ?? true
            ? min(Int(try duration("TEAMCACHE_DEFAULT_TTL", 1...3_153_600_000)), config.cache.maxTTL)
            : Int(try duration("TEAMCACHE_DEFAULT_TTL", 1...Double(config.cache.maxTTL)))
        config.cache.staleRetention = Int(try duration("TEAMCACHE_STALE_RETENTION", 0...3_153_600_000))
        config.cache.compressionLevel = Int32(try integer("TEAMCACHE_COMPRESSION_LEVEL", 1...9))
        config.cache.storeMaxBytes = Int64(try integer("TEAMCACHE_MAX_BYTES", 0...(1 << 60)))
        config.cache.hardCapRatio = try number("TEAMCACHE_HARD_CAP_RATIO", 1...10)
        config.cache.idleTTL = Int(try duration("TEAMCACHE_IDLE_TTL", 60...3_153_600_000))
        config.cache.changeRetention = Int(try duration("TEAMCACHE_CHANGE_RETENTION", 60...3_153_600_000))
        config.cache.minutePointRetention = Int(try duration("TEAMCACHE_HISTORY_MINUTES", 3600...3_153_600_000))
        config.cache.hourPointRetention = Int(try duration("TEAMCACHE_HISTORY_HOURS", 86400...3_153_600_000))
        try prices(&config)
        config.evictionInterval = try duration("TEAMCACHE_EVICTION_INTERVAL", 1...86400)
        config.accessFlushInterval = try duration("TEAMCACHE_ACCESS_FLUSH_INTERVAL", 0.05...3600)
        config.accessTracking = try flag("TEAMCACHE_ACCESS_TRACKING")
        config.accessFlushBatch = try integer("TEAMCACHE_ACCESS_FLUSH_BATCH", 1...1_000_000)
        config.tokenCacheTTL = try duration("TEAMCACHE_TOKEN_CACHE_TTL", 0...3600)
        config.rateLimit = try number("TEAMCACHE_RATE_LIMIT", 0...1_000_000)
        try gateway(&config)
        return config
    }

    /// The price table: a bad file stops the service, naming the file and the problem (a
    /// typo must not price every hit at zero unnoticed).
    private func prices(_ config: inout Configuration) throws {
        let name = "TEAMCACHE_PRICES_FILE"
        guard let path = values[name], !path.isEmpty else { return }
        do {
            (config.prices, config.currency) = try PricesFile.load(path: path)
        } catch {
            throw ConfigurationError(variable: name, value: path, allowed: "a JSON price table; this one \(error)")
        }
    }

    /// The gateway: its upstreams (a bad file stops the service, naming it and the problem)
    /// and how long its calls wait and hold their leases.
    private func gateway(_ config: inout Configuration) throws {
        let name = "TEAMCACHE_UPSTREAMS_FILE"
        if let path = values[name], !path.isEmpty {
            do {
                config.upstreams = try UpstreamsFile.load(path: path)
            } catch {
                throw ConfigurationError(variable: name, value: path, allowed: "a JSON file of upstreams; this one \(error)")
            }
        }
        config.gateway.wait = try duration("TEAMCACHE_GATEWAY_WAIT", 0...3600)
        config.gateway.lease = Int(try duration("TEAMCACHE_GATEWAY_LEASE", 1...86400))
        config.gateway.maxResponseBytes = try integer("TEAMCACHE_GATEWAY_MAX_RESPONSE_BYTES", 1024...(1 << 34))
        // A relayed stream may be as quiet as its upstream is allowed to be: the server keeps
        // a silent stream open that long (and a little more, so the upstream's deadline is
        // the one that decides, with a 504 or a cut the gateway can report).
        let quietest = config.upstreams?.values.map(\.deadlines.idle).max() ?? ClientDeadlines().idle
        config.http.streamIdleTimeout = max(config.http.streamIdleTimeout, quietest + 5)
    }

    /// `TEAMCACHE_DB_POOLER`: `none`, or `transaction` (PgBouncer's transaction pooling in
    /// front of `TEAMCACHE_DATABASE_URL`), which needs a direct URL beside it.
    private func pooler(_ config: Configuration) throws -> Bool {
        let name = "TEAMCACHE_DB_POOLER"
        switch values[name]?.lowercased() ?? "" {
        case "", "none": return false
        case "transaction":
            guard config.databaseURL != nil, config.directDatabaseURL != nil else {
                throw ConfigurationError(variable: "TEAMCACHE_DIRECT_DATABASE_URL", value: "",
                                         allowed: "a direct URL of the primary (beside TEAMCACHE_DATABASE_URL) when "
                                             + "\(name)=transaction: LISTEN and migrations cannot pass a transaction pooler")
            }
            return true
        case let other: throw ConfigurationError(variable: name, value: other, allowed: "none or transaction")
        }
    }

    private func listen(_ name: String) throws -> (String, Int) {
        let text = self.text(name)
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, let port = Int(parts[1]), (0...65535).contains(port),
              parts[0].split(separator: ".").count == 4,
              parts[0].split(separator: ".").allSatisfy({ Int($0).map { (0...255).contains($0) } ?? false }) else {
            throw ConfigurationError(variable: name, value: text, allowed: "IPV4:PORT, e.g. 0.0.0.0:8080")
        }
        return (String(parts[0]), port)
    }

    /// The value of `name`, else its documented default (`Setting.all`: the one place a
    /// literal default is written; docs/configuration.md and `--help` show the same text).
    private func text(_ name: String) -> String {
        if let text = values[name], !text.isEmpty { return text }
        guard let setting = Setting.all.first(where: { $0.variable == name }) else {
            preconditionFailure("\(name) is not in Setting.all")
        }
        return setting.defaultValue
    }

    private func flag(_ name: String) throws -> Bool {
        let text = self.text(name).lowercased()
        switch text {
        case "on", "true", "1", "yes": return true
        case "off", "false", "0", "no": return false
        default: throw ConfigurationError(variable: name, value: text, allowed: "on or off")
        }
    }

    /// `fallback`: a default computed from other settings (the documented one is a description).
    private func integer(_ name: String, _ range: ClosedRange<Int>, default fallback: Int? = nil) throws -> Int {
        if let fallback, values[name]?.isEmpty ?? true { return fallback }
        let text = self.text(name)
        guard let value = Int(text), range.contains(value) else {
            throw ConfigurationError(variable: name, value: text, allowed: "an integer in \(range)")
        }
        return value
    }

    private func number(_ name: String, _ range: ClosedRange<Double>) throws -> Double {
        let text = self.text(name)
        guard let value = Double(text), range.contains(value) else {
            throw ConfigurationError(variable: name, value: text, allowed: "a number in \(range)")
        }
        return value
    }

    /// Seconds, or a number with a unit: `250ms`, `10s`, `5m`, `12h`, `30d`.
    private func duration(_ name: String, _ range: ClosedRange<Double>) throws -> Double {
        let text = self.text(name)
        let seconds = DurationText.seconds(text)
        guard let seconds, range.contains(seconds) else {
            throw ConfigurationError(variable: name, value: text,
                                     allowed: "a duration (e.g. 30s, 5m, 12h, 7d) from \(range.lowerBound)s to \(range.upperBound)s")
        }
        return seconds
    }
}
