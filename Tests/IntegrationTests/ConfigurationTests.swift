import Foundation
import Testing
import TeamCache
import TestSupport

@Suite struct ConfigurationTests {
    @Test func defaultsAndFlagsOverEnvironment() throws {
        let configuration = try Configuration.load(environment: ["TEAMCACHE_LISTEN": "127.0.0.1:9000"],
                                                   flags: ["--listen": "127.0.0.1:9001"])
        #expect(configuration.http.port == 9001)
        #expect(configuration.cache.defaultTTL == 7 * 86400)
        #expect(configuration.cache.maxBodyBytes == 8 * 1024 * 1024)
        #expect(configuration.databaseURL == nil)
        #expect(try Configuration.load(environment: ["DATABASE_URL": "postgres://x/y"]).databaseURL == "postgres://x/y")
    }

    /// A transaction pooler needs the direct URL beside it; the pooled sessions send no
    /// startup options, the direct ones keep them.
    @Test func aTransactionPoolerNeedsADirectURL() throws {
        let pooled = ["TEAMCACHE_DATABASE_URL": "postgresql://h:6432/tc", "TEAMCACHE_DB_POOLER": "transaction"]
        do {
            _ = try Configuration.load(environment: pooled)
            Issue.record("a pooler without a direct URL was accepted")
        } catch let error as ConfigurationError {
            #expect(error.description.contains("TEAMCACHE_DIRECT_DATABASE_URL"))
        }
        #expect(throws: ConfigurationError.self) {
            try Configuration.load(environment: ["TEAMCACHE_DB_POOLER": "session"])
        }
        var environment = pooled
        environment["TEAMCACHE_DIRECT_DATABASE_URL"] = "postgresql://h:5432/tc"
        let configuration = try Configuration.load(environment: environment)
        #expect(configuration.sessionLimits.transactionPooler && !configuration.directSessionLimits.transactionPooler)
        #expect(try Configuration.load(environment: [:]).sessionLimits.transactionPooler == false)
    }

    @Test func errorsNameTheVariableAndTheRange() {
        let cases = [("TEAMCACHE_DB_POOL_SIZE", "0"), ("TEAMCACHE_LISTEN", "localhost"), ("TEAMCACHE_DEFAULT_TTL", "7x"),
                     ("TEAMCACHE_LOG_LEVEL", "loud"), ("TEAMCACHE_COMPRESSION_LEVEL", "10"), ("TEAMCACHE_AUTH", "maybe")]
        for (variable, value) in cases {
            do {
                _ = try Configuration.load(environment: [variable: value])
                Issue.record("\(variable)=\(value) was accepted")
            } catch let error as ConfigurationError {
                #expect(error.description.contains(variable) && error.description.contains("expected"))
            } catch {
                Issue.record("unexpected \(error)")
            }
        }
    }

    /// The shipped example reads; a file that cannot be read, or prices that cannot be, stop
    /// the start with the variable, the file and the problem (never a silent price of zero).
    @Test func aPricesFileIsReadOrRefusedByName() throws {
        let example = TestPaths.repository.appendingPathComponent("deploy/prices.example.json").path
        let configuration = try Configuration.load(environment: ["TEAMCACHE_PRICES_FILE": example])
        #expect(configuration.currency == "USD" && configuration.prices.prices.count == 2)
        #expect(configuration.prices.price(for: "example-large-model-2")?.output == 10)
        #expect(try Configuration.load(environment: [:]).prices.isEmpty)
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("prices-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let cases = [("[]", "prices"), ("{\"prices\":[{\"model\":\"m\",\"input\":-1,\"output\":1}]}", "prices[0].input"),
                     ("{\"currency\":\"dollars\",\"prices\":[]}", "currency"), ("{\"prices\":[],\"rates\":1}", "rates"),
                     ("not json", "JSON")]
        for (index, (text, named)) in cases.enumerated() {
            let file = folder.appendingPathComponent("\(index).json")
            try Data(text.utf8).write(to: file)
            do {
                _ = try Configuration.load(environment: ["TEAMCACHE_PRICES_FILE": file.path])
                Issue.record("\(text) was accepted")
            } catch let error as ConfigurationError {
                #expect(error.description.contains("TEAMCACHE_PRICES_FILE") && error.description.contains(named),
                        "\(error.description)")
            }
        }
        #expect(throws: ConfigurationError.self) {
            try Configuration.load(environment: ["TEAMCACHE_PRICES_FILE": folder.appendingPathComponent("none").path])
        }
    }

    @Test func theDocumentationListsEverySetting() throws {
        let page = try String(contentsOf: TestPaths.repository.appendingPathComponent("docs/configuration.md"),
                              encoding: .utf8)
        for setting in Setting.all {
            #expect(page.contains("| `\(setting.variable)` |"), "docs/configuration.md lacks \(setting.variable)")
            #expect(page.contains(setting.documentationRow + "\n"),
                    "docs/configuration.md's row of \(setting.variable) is not \(setting.documentationRow)")
        }
    }

    /// Each literal default is written once, in `Setting.all` (what the docs and `--help`
    /// show), and the loader reads it from there; `Configuration()`'s initial values, which
    /// tests and embedders start from, must be the same.
    @Test func theDefaultsAreTheDocumentedOnes() throws {
        let loaded = try Configuration.load(environment: [:])
        var built = Configuration()
        // Computed from the machine or other settings, not literals: the same by construction.
        built.http.eventLoops = loaded.http.eventLoops
        built.http.workerThreads = loaded.http.workerThreads
        built.http.bodyBudgetBytes = loaded.http.bodyBudgetBytes
        #expect(String(reflecting: built) == String(reflecting: loaded))
        let mirror = zip(Mirror(reflecting: built).children, Mirror(reflecting: loaded).children)
        for (one, other) in mirror where String(reflecting: one.value) != String(reflecting: other.value) {
            Issue.record("Configuration().\(one.label ?? "?") is \(one.value), the documented default is \(other.value)")
        }
    }

    /// The HTTP server and the pool are generic; the service names them: its `Server` header
    /// and the `teamcache_` prefix of their metrics.
    @Test func theServiceNamesItsLowerLayers() throws {
        let health = try TestService.shared.request("GET", "/healthz")
        #expect(health.header("Server") == "teamcache")
        let metrics = try TestService.shared.metrics()
        #expect(metrics.contains("teamcache_http_requests_total{") && metrics.contains("teamcache_db_pool_connections_max "))
    }

    /// A lowered TEAMCACHE_MAX_TTL lowers the default TTL with it, rather than refusing a
    /// default nobody set.
    @Test func aLowerMaxTTLCapsTheDefaultTTL() throws {
        let configuration = try Configuration.load(environment: ["TEAMCACHE_MAX_TTL": "1h"])
        #expect(configuration.cache.defaultTTL == 3600 && configuration.cache.maxTTL == 3600)
        #expect(throws: ConfigurationError.self) {
            try Configuration.load(environment: ["TEAMCACHE_MAX_TTL": "1h", "TEAMCACHE_DEFAULT_TTL": "2h"])
        }
    }

    @Test func durationsTakeUnits() throws {
        let configuration = try Configuration.load(environment: ["TEAMCACHE_DEFAULT_TTL": "12h",
                                                                 "TEAMCACHE_DB_ACQUIRE_TIMEOUT": "250ms"])
        #expect(configuration.cache.defaultTTL == 43200 && configuration.acquireTimeout == 0.25)
    }
}
