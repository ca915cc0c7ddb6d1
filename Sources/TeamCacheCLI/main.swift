import Foundation
import Observability
import TeamCache

/// `teamcache <command>`: serve, migrate, tokens, namespaces, keys, evict, export, import, version, help.
func main() -> Int32 {
    var words = Array(CommandLine.arguments.dropFirst())
    let command = words.isEmpty ? "help" : words.removeFirst()
    let commands: [String: ([String]) throws -> Int32] = [
        "serve": ServeCommand.run, "migrate": MigrateCommand.run, "tokens": TokensCommand.run,
        "namespaces": NamespacesCommand.run, "evict": EvictCommand.run,
        "export": ExportCommand.run, "import": ImportCommand.run, "keys": KeysCommand.run,
        "version": { _ in print("teamcache \(TeamCacheVersion.current)"); return 0 },
        "help": { _ in print(Help.overview); return 0 }, "--help": { _ in print(Help.overview); return 0 },
    ]
    guard let run = commands[command] else {
        printError("teamcache: unknown command '\(command)'\n\n\(Help.overview)")
        return 2
    }
    do {
        return try run(words)
    } catch let failure as Arguments.Failure {
        printError("teamcache \(command): \(failure.description) (see teamcache \(command) --help)")
        return 2
    } catch {
        printError("teamcache \(command): \(error)")
        LogSink.shared.flush()
        return 1
    }
}

exit(main())
