import TeamCache

enum Help {
    static let overview = """
        teamcache — a shared cache for expensive API and LLM responses, on PostgreSQL.

        Usage: teamcache <command> [options]

        Commands:
          serve        run the HTTP service (no configuration: embedded PostgreSQL under ./.teamcache)
          migrate      apply database migrations (--status, --dry-run)
          tokens       create, list and revoke API tokens
          namespaces   show or set a namespace's default TTL, byte quota and encryption
          keys         generate a master key; rotate data keys (encryption at rest)
          evict        run one eviction cycle now (for cron)
          export       write every entry (of a namespace) to standard output as JSON lines
          import       store a dump read from standard input (idempotent; gzip detected)
          version      print the version
          help         this text

        Each command takes --help. Settings come from TEAMCACHE_* variables; flags win.
        """

    static let database = """
          --database-url URL     PostgreSQL URL or conninfo (TEAMCACHE_DATABASE_URL, DATABASE_URL);
                                 without it, the embedded cluster under --data-dir
          --data-dir DIR         embedded cluster folder (TEAMCACHE_DATA_DIR, default ./.teamcache)
          --migrations-dir DIR   migration files (TEAMCACHE_MIGRATIONS_DIR)
          --log-level LEVEL      debug, info, warn, error (TEAMCACHE_LOG_LEVEL)
        """

    static var settings: String {
        Setting.all.map { setting in
            let flag = setting.flag.map { " (\($0))" } ?? ""
            return "  \(setting.variable)\(flag)  default \(setting.defaultValue)\n      \(setting.help)"
        }.joined(separator: "\n")
    }
}

enum TeamCacheVersion {
    static let current = "0.1.0"
}
