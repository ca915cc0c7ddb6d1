import CacheCore
import CacheStore
import Foundation
import TeamCache

/// `teamcache keys`: master keys and the namespaces' data keys (encryption at rest).
enum KeysCommand {
    static let usage = """
        Usage:
          teamcache keys generate
          teamcache keys rotate [--reencrypt NS [--settle SECONDS]]

        generate prints a new master key line (64 hex digits) for TEAMCACHE_MASTER_KEY_FILE.

        rotate re-wraps every namespace's data key under the first key of
        TEAMCACHE_MASTER_KEY_FILE, in one transaction; bodies are not touched. To rotate the
        master key: put the new key on the file's first line with the old one after it (on
        every replica: each line unwraps, the first wraps), run rotate, then drop the old line.

        --reencrypt NS also gives NS a new data key and seals every entry of NS again under it,
        200 to a transaction, while the service runs (running services seal new writes with
        the new key within 10 seconds, so a second pass follows after --settle seconds, 15).
        Entries not yet rewritten still open with the old key.

        \(Help.database)
        """

    static func run(_ words: [String]) throws -> Int32 {
        let arguments = try Arguments(words, valued: databaseFlags.union(["--reencrypt", "--settle"]), switches: [],
                                      positional: 1)
        guard arguments.positional.count == 1, let verb = arguments.positional.first,
              !arguments.switches.contains("--help") else {
            print(usage)
            return arguments.switches.contains("--help") ? 0 : 2
        }
        switch verb {
        case "generate":
            print(MasterKeys.generateLine())
            return 0
        case "rotate":
            let namespace = try arguments.values["--reencrypt"].map { text -> Namespace in
                guard let namespace = Namespace(text) else {
                    throw Arguments.Failure(description: "--reencrypt takes a namespace (^[a-z0-9][a-z0-9._-]{0,63}$)")
                }
                return namespace
            }
            return try DatabaseSession.with(arguments) { _, pool, configuration in
                guard configuration.masterKeys != nil else {
                    throw Arguments.Failure(description: "set TEAMCACHE_MASTER_KEY_FILE to the file of master keys")
                }
                let store = try DatabaseSession.store(pool, configuration)
                let count = try store.keyring.rewrapAll(pool)
                printError("teamcache keys: re-wrapped \(count) data keys under master key "
                    + "\(configuration.masterKeys?.sealing.id ?? "?")")
                guard let namespace else { return 0 }
                guard try store.keyring.sealingKey(for: namespace.name, pool, fresh: true) != nil else {
                    throw Arguments.Failure(description: "namespace \(namespace.name) is not encrypted (namespaces set --encrypt)")
                }
                try store.keyring.createKey(for: namespace.name, pool)
                let report = try sealAll(namespace, store, settle: try settle(arguments), verb: "keys")
                printError("teamcache keys: \(namespace.name) sealed again under a new data key: \(report.rewritten) "
                    + "rewritten, \(report.unchanged) already current or rewritten meanwhile, \(report.broken) did not open")
                return report.broken == 0 ? 0 : 1
            }
        default:
            print(usage)
            return 2
        }
    }

    /// `--settle`: seconds before the second pass (at least the services' key refresh).
    static func settle(_ arguments: Arguments) throws -> TimeInterval {
        guard let text = arguments.values["--settle"] else { return Keyring.currentFor + 5 }
        guard let seconds = Double(text), seconds.isFinite, (0...3600).contains(seconds) else {
            throw Arguments.Failure(description: "--settle takes seconds from 0 to 3600")
        }
        return seconds
    }

    /// Seals the namespace's entries under its newest key, twice: running services keep
    /// sealing with what they knew for up to `Keyring.currentFor`, so what they wrote in that
    /// time is caught by a second pass after `settle` seconds.
    static func sealAll(_ namespace: Namespace, _ store: EntryStore, settle: TimeInterval,
                        verb: String) throws -> EntryStore.Reencryption {
        var report = try store.reencrypt(namespace) { progress in
            printError("teamcache \(verb): sealed \(progress.rewritten) entries so far")
        }
        if settle > 0 {
            printError("teamcache \(verb): waiting \(Int(settle)) s for running services to use the key, then a second pass")
            Thread.sleep(forTimeInterval: settle)
        }
        let second = try store.reencrypt(namespace)
        report.rewritten += second.rewritten
        report.broken = second.broken
        return report
    }
}
