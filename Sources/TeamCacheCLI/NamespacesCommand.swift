import CacheCore
import CacheStore
import Foundation
import Postgres
import TeamCache

enum NamespacesCommand {
    static let usage = """
        Usage:
          teamcache namespaces show NS
          teamcache namespaces set NS [--default-ttl DURATION] [--max-bytes N] [--encrypt [--rewrite]]
          teamcache namespaces create NS [--default-ttl DURATION] [--max-bytes N] [--encrypt]

        --default-ttl applies to writes without ?ttl=; --max-bytes is the namespace's soft byte
        cap (LRU eviction keeps under it; writes past it times TEAMCACHE_HARD_CAP_RATIO get 507).
        An option left out is cleared.

        --encrypt stores the namespace's bodies and metadata AES-256-GCM encrypted under a data
        key of its own, wrapped by the first key of TEAMCACHE_MASTER_KEY_FILE (which every
        replica then needs). It then seals the entries stored before, 200 to a transaction,
        while the service runs. Running services learn of the key within 10 seconds, so a
        second pass follows after --settle seconds (15) for what they wrote plain meanwhile.
        It stays on (leaving it out does not decrypt). Encrypt only once every replica runs a
        build that knows encryption. An encrypted namespace keeps no prompt prefix either.

        The plaintext of entries stored before --encrypt outlives their sealing: in the old row
        versions (a VACUUM of the entries table follows the sealing, but PostgreSQL leaves freed
        space in a page as it was until it is reused), and in WAL archives, base backups and
        standbys taken before. --rewrite also runs VACUUM FULL, which rewrites the table and
        leaves no old bytes in its files, but holds an exclusive lock on every namespace's
        entries while it runs (seconds per GB: every request waits, or answers 503). Backups
        and archives taken before must be replaced or destroyed. `create` encrypts a namespace
        before its first write, so none of this arises: it refuses a namespace that holds entries.

        \(Help.database)
        """

    static func run(_ words: [String]) throws -> Int32 {
        let arguments = try Arguments(words, valued: databaseFlags.union(["--default-ttl", "--max-bytes", "--settle"]),
                                      switches: ["--encrypt", "--rewrite"], positional: 2)
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
            let action = arguments.positional[0]
            guard ["set", "create", "show"].contains(action) else {
                throw Arguments.Failure(description: "unknown action '\(action)' (show, set or create)")
            }
            if action == "create", try store.namespaceTotals()[namespace.name].map({ $0.entries > 0 }) == true {
                throw Arguments.Failure(description: "\(namespace.name) already holds entries; `namespaces set` changes it "
                    + "(and --encrypt seals what it holds)")
            }
            if action == "set" || action == "create" {
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
                    try encrypt(namespace, store, settle: action == "create" ? 0 : try KeysCommand.settle(arguments),
                                rewrite: arguments.switches.contains("--rewrite"))
                }
            }
            let settings = try store.settings(namespace)
            let encrypted = try Keyring.isEncrypted(namespace.name, pool)
            print("namespace \(namespace.name): default_ttl=\(settings.defaultTTL.map(String.init) ?? "server default")"
                + " max_bytes=\(settings.maxBytes.map(String.init) ?? "none") encrypted=\(encrypted)")
            return 0
        }
    }

    /// VACUUM (FULL) of `entries`, waiting at most 5 s a try for its lock (12 tries): while an
    /// exclusive lock request waits, every session behind it waits too, as for migrations.
    private static func vacuum(_ store: EntryStore, full: Bool) throws {
        for attempt in 1...12 {
            do {
                try store.pool.withConnection { connection in
                    try connection.execute("SET lock_timeout = '5s'")
                    defer { try? connection.execute("RESET lock_timeout") }
                    try connection.execute(full ? "VACUUM (FULL) entries" : "VACUUM entries")
                }
                return
            } catch let error as PostgresError where error.sqlState == .lockNotAvailable && attempt < 12 {
                printError("teamcache namespaces: the entries table was busy for 5 s (try \(attempt) of 12); trying again")
                Thread.sleep(forTimeInterval: 1)
            }
        }
    }

    /// Whether anything older than `$1` (the sealing's end, an `xid8`) still holds the vacuum
    /// horizon of this database back, so that VACUUM FULL would copy plain versions the sealing
    /// replaced into the new files:
    /// - a transaction with an xid from before it running anywhere in the cluster, in any
    ///   database: every snapshot taken meanwhile, VACUUM FULL's own among them, counts it as
    ///   running, and VACUUM FULL (unlike a plain VACUUM) counts its own snapshot in the
    ///   horizon (PostgreSQL 15's ComputeXidHorizons and vacuum_rel). Read from the snapshot's
    ///   xmin, which needs no privilege to see other roles' sessions. This was the flaky
    ///   EncryptionResidueTests: another test's transaction in another database;
    /// - a session of this database (or of none: a standby's walsender with
    ///   hot_standby_feedback holds every database's) with a snapshot from before it, even
    ///   without an xid (a repeatable-read reader). An autovacuum worker's ANALYZE of another
    ///   table holds one; its VACUUM without ANALYZE shows one but does not hold the horizon:
    ///   not waited for (sealing a namespace rewrites its rows, which often starts one on
    ///   `entries` itself).
    static let olderSnapshots = """
        SELECT (pg_snapshot_xmin(pg_current_snapshot()) <= $1::text::xid8
                OR EXISTS (SELECT 1 FROM pg_stat_activity
                           WHERE (datname = current_database() OR datname IS NULL) AND pid <> pg_backend_pid()
                             AND NOT (backend_type = 'autovacuum worker' AND query LIKE 'autovacuum: VACUUM %'
                                      AND query NOT LIKE '%ANALYZE%')
                             AND ((backend_xmin IS NOT NULL AND age(backend_xmin) > age(($1::text::xid8)::xid))
                                  OR (backend_xid IS NOT NULL AND age(backend_xid) > age(($1::text::xid8)::xid))))) AS older
        """

    /// A VACUUM (FULL too) keeps every row version a running transaction may still see: while
    /// one that began before the sealing runs (an access flush, a counter fold, a long read),
    /// the plain versions the sealing replaced would be copied into the rewritten files. Waits,
    /// up to a minute, until nothing from before now holds the horizon (`olderSnapshots`).
    /// Whether none was left when it returned (false: it gave up after a minute, and said so).
    @discardableResult
    private static func waitForOlderSnapshots(_ store: EntryStore) throws -> Bool {
        let horizon = try store.pool.withConnection { connection in
            try connection.query("SELECT pg_current_xact_id()::text AS xid").first?.string("xid")
        }
        guard let horizon else { return true }
        let deadline = Date().addingTimeInterval(60)
        while true {
            let older = try store.pool.withConnection { connection in
                try connection.query(olderSnapshots, [.text(horizon)]).first?.bool("older") ?? false
            }
            if !older { return true }
            guard Date() < deadline else {
                printError("teamcache namespaces: a transaction older than the sealing still runs (in this database "
                    + "or another of the cluster); the rewrite may keep plain versions it can see: run --rewrite "
                    + "again once it ends")
                return false
            }
            Thread.sleep(forTimeInterval: 0.1)
        }
    }

    /// Gives the namespace its first data key (if it has none) and seals what is stored;
    /// then vacuums the entries table so the plain row versions it replaced are removed.
    private static func encrypt(_ namespace: Namespace, _ store: EntryStore, settle: TimeInterval,
                                rewrite: Bool) throws {
        if try store.keyring.sealingKey(for: namespace.name, store.pool, fresh: true) == nil {
            try store.keyring.createKey(for: namespace.name, store.pool)
        }
        let report = try KeysCommand.sealAll(namespace, store, settle: settle, verb: "namespaces")
        printError("teamcache namespaces: \(namespace.name) is encrypted; sealed \(report.rewritten) entries"
            + " (\(report.unchanged) already sealed or rewritten meanwhile, \(report.broken) did not open)")
        guard report.rewritten > 0 else { return }
        // VACUUM cannot run inside a transaction: a statement of its own on a pooled session.
        let waited = rewrite ? try waitForOlderSnapshots(store) : true
        try vacuum(store, full: rewrite)
        if rewrite && !waited {
            printError("teamcache namespaces: rewrote the entries table (VACUUM FULL), but with an older transaction "
                + "still running it may have kept plain versions: run --rewrite again once it ends")
        } else if rewrite {
            printError("teamcache namespaces: rewrote the entries table (VACUUM FULL): its files hold no plain body now")
        } else {
            printError("teamcache namespaces: vacuumed the entries table; freed space in its pages may still hold old "
                + "plain bytes until reused (--rewrite runs VACUUM FULL, under an exclusive lock)")
        }
        printError("teamcache namespaces: WAL archives, base backups and standbys taken before this still hold the "
            + "plain entries: take a new base backup, then delete older backups and archived WAL")
    }
}
