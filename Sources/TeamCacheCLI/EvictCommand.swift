import CacheCore
import CacheStore
import Foundation
import TeamCache

enum EvictCommand {
    static let usage = """
        Usage: teamcache evict [database options]

        Runs one eviction cycle (expired past stale retention, idle, over byte caps) and prints
        what it removed. Skips when another replica's cycle holds the lock. Suits cron.

        \(Help.database)
        """

    static func run(_ words: [String]) throws -> Int32 {
        let arguments = try Arguments(words, valued: databaseFlags, switches: [])
        if arguments.switches.contains("--help") {
            print(usage)
            return 0
        }
        return try DatabaseSession.with(arguments) { _, pool, configuration in
            let store = EntryStore(pool: pool, policy: configuration.cache)
            guard let report = EvictionJob(store: store).runCycle() else {
                print("skipped: another eviction cycle holds the lock (or the database is unreachable)")
                return 1
            }
            for reason in EvictionJob.Reason.allCases where reason != .manual {
                print("\(reason.rawValue): \(report.entries[reason] ?? 0) entries, \(report.bytes[reason] ?? 0) bytes")
            }
            return 0
        }
    }
}
