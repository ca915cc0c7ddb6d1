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
        if configuration.authEnabled, (try? application.tokens.list().isEmpty) == true {
            logger.warn("auth is on and no token exists yet; create one with: teamcache tokens create --name admin "
                + "--namespaces '*' --scopes admin")
        }
        print("listening on http://\(configuration.http.host):\(application.server.port)")
        fflush(nil)
        application.runUntilSignalled()
        return 0
    }
}
