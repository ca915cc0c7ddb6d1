import Foundation
import Observability
import TeamCache

enum ServeCommand {
    static let usage = """
        Usage: teamcache serve [--listen HOST:PORT] [database options]

        Serves the cache API. With no database configured it starts (and migrates) an embedded
        PostgreSQL under the data folder and stops it at shutdown. Against an external database
        it refuses to start while migrations are pending. SIGTERM/SIGINT stop it gracefully.

          --listen HOST:PORT     TEAMCACHE_LISTEN, default 127.0.0.1:8080
        \(Help.database)

        Settings:
        \(Help.settings)
        """

    static func run(_ words: [String]) throws -> Int32 {
        let arguments = try Arguments(words, valued: databaseFlags.union(["--listen"]), switches: [])
        if arguments.switches.contains("--help") {
            print(usage)
            return 0
        }
        let configuration = try Configuration.load(environment: ProcessInfo.processInfo.environment,
                                                   flags: arguments.values)
        LogSink.shared.configure(level: configuration.logLevel)
        let logger = Logger(component: "teamcache")
        if !configuration.authEnabled {
            logger.warn("AUTHENTICATION IS OFF: every client can read, write and evict every namespace. "
                + "Never run like this outside local development.")
        }
        let application = try Application(configuration: configuration)
        try application.start()
        if configuration.authEnabled, let tokens = try? application.tokens.list() {
            if tokens.isEmpty {
                logger.warn("auth is on and no token exists yet; create one with: teamcache tokens create --name admin "
                    + "--namespaces '*' --scopes admin")
            }
            warnOfNarrowMetricsTokens(tokens, logger: logger)
        }
        print("listening on http://\(configuration.http.host):\(application.server.port)")
        fflush(nil)
        application.runUntilSignalled()
        return 0
    }

    /// A metrics token whose pattern is narrower than `*` (made before `/metrics` required it)
    /// is refused `/metrics`: said at start, by name and id (never its secret), so a scraper
    /// that stopped after an upgrade is not a mystery.
    static func warnOfNarrowMetricsTokens(_ tokens: [APIToken], logger: Logger) {
        let now = Date()
        for token in tokens where token.isUsable(at: now) && token.scopes.contains(.metrics)
            && token.namespacePattern != "*" {
            logger.warn("token \(token.id) (\(token.name)) has the metrics scope for '\(token.namespacePattern)': "
                + "/metrics needs the pattern '*' and refuses it (403); make a metrics token for '*'")
        }
    }
}
