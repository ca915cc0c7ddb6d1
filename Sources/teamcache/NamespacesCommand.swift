import CacheCore
import Foundation
import TeamCache

enum NamespacesCommand {
    static let usage = """
        Usage:
          teamcache namespaces show NS
          teamcache namespaces set NS [--default-ttl DURATION] [--max-bytes N]

        --default-ttl applies to writes without ?ttl=; --max-bytes is the namespace's soft byte
        cap (LRU eviction keeps under it; writes past it times TEAMCACHE_HARD_CAP_RATIO get 507).
        An option left out is cleared.

        \(Help.database)
        """

    static func run(_ words: [String]) throws -> Int32 {
        let arguments = try Arguments(words, valued: databaseFlags.union(["--default-ttl", "--max-bytes"]),
                                      switches: [])
        guard arguments.positional.count == 2, !arguments.switches.contains("--help") else {
            print(usage)
            return arguments.switches.contains("--help") ? 0 : 2
        }
        guard let namespace = Namespace(arguments.positional[1]) else {
            throw Arguments.Failure(description: "namespace must match ^[a-z0-9][a-z0-9._-]{0,63}$")
        }
        return try DatabaseSession.with(arguments) { _, pool, configuration in
            let store = EntryStore(pool: pool, policy: configuration.cache)
            if arguments.positional[0] == "set" {
                let ttl = try arguments.values["--default-ttl"].map { text -> Int in
                    guard let seconds = Duration.seconds(text) else {
                        throw Arguments.Failure(description: "--default-ttl takes a duration such as 1h or 7d (at most 100 years)")
                    }
                    return Int(seconds)
                }
                let maxBytes = try arguments.values["--max-bytes"].map { text -> Int in
                    guard let bytes = Int(text), bytes > 0 else {
                        throw Arguments.Failure(description: "--max-bytes takes a positive integer")
                    }
                    return bytes
                }
                try store.setSettings(namespace, NamespaceSettings(defaultTTL: ttl, maxBytes: maxBytes))
            }
            let settings = try store.settings(namespace)
            print("namespace \(namespace.name): default_ttl=\(settings.defaultTTL.map(String.init) ?? "server default")"
                + " max_bytes=\(settings.maxBytes.map(String.init) ?? "none")")
            return 0
        }
    }
}
