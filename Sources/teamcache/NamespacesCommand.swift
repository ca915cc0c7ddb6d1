import CacheCore
import Foundation
import TeamCache

enum NamespacesCommand {
    static let usage = """
        Usage:
          teamcache namespaces show NS
          teamcache namespaces set NS [--default-ttl DURATION] [--max-bytes N] [--encrypt]

        --default-ttl applies to writes without ?ttl=; --max-bytes is the namespace's soft byte
        cap (LRU eviction keeps under it; writes past it times TEAMCACHE_HARD_CAP_RATIO get 507).
        An option left out is cleared.

        --encrypt stores the namespace's bodies and metadata AES-256-GCM encrypted under a data
        key of its own, wrapped by the first key of TEAMCACHE_MASTER_KEY_FILE (which every
        replica then needs). It then seals the entries stored before, 200 to a transaction,
        while the service runs. Running services learn of the key within 10 seconds, so a
        second pass follows after --settle seconds (15) for what they wrote plain meanwhile.
        It stays on (leaving it out does not decrypt). Encrypt only once every replica runs a
        build that knows encryption.

        \(Help.database)
        """

    static func run(_ words: [String]) throws -> Int32 {
        let arguments = try Arguments(words, valued: databaseFlags.union(["--default-ttl", "--max-bytes", "--settle"]),
                                      switches: ["--encrypt"])
        guard arguments.positional.count == 2, !arguments.switches.contains("--help") else {
            print(usage)
            return arguments.switches.contains("--help") ? 0 : 2
        }
        guard let namespace = Namespace(arguments.positional[1]) else {
            throw Arguments.Failure(description: "namespace must match ^[a-z0-9][a-z0-9._-]{0,63}$")
        }
        return try DatabaseSession.with(arguments) { _, pool, configuration in
            // Keys are needed (and checked) only to encrypt: showing or setting a quota works
            // without the master key file.
            let store = arguments.switches.contains("--encrypt") ? try DatabaseSession.store(pool, configuration)
                : EntryStore(pool: pool, policy: configuration.cache)
            if arguments.positional[0] == "set" {
                // One rule with the settings route: 1 second to TEAMCACHE_MAX_TTL.
                let maxTTL = configuration.cache.maxTTL
                let ttl = try arguments.values["--default-ttl"].map { text -> Int in
                    guard let seconds = Duration.seconds(text), seconds >= 1, seconds <= Double(maxTTL) else {
                        throw Arguments.Failure(description: "--default-ttl takes a duration from 1s to TEAMCACHE_MAX_TTL "
                            + "(\(maxTTL) s), such as 1h or 7d")
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
                if arguments.switches.contains("--encrypt") {
                    try encrypt(namespace, store, settle: try KeysCommand.settle(arguments))
                }
            }
            let settings = try store.settings(namespace)
            let encrypted = try Keyring.isEncrypted(namespace.name, pool)
            print("namespace \(namespace.name): default_ttl=\(settings.defaultTTL.map(String.init) ?? "server default")"
                + " max_bytes=\(settings.maxBytes.map(String.init) ?? "none") encrypted=\(encrypted)")
            return 0
        }
    }

    /// Gives the namespace its first data key (if it has none) and seals what is stored.
    private static func encrypt(_ namespace: Namespace, _ store: EntryStore, settle: TimeInterval) throws {
        if try store.keyring.sealingKey(for: namespace.name, store.pool, fresh: true) == nil {
            try store.keyring.createKey(for: namespace.name, store.pool)
        }
        let report = try KeysCommand.sealAll(namespace, store, settle: settle, verb: "namespaces")
        printError("teamcache namespaces: \(namespace.name) is encrypted; sealed \(report.rewritten) entries"
            + " (\(report.unchanged) already sealed or rewritten meanwhile, \(report.broken) did not open)")
    }
}
