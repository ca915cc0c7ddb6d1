import CacheCore
import Foundation
import TeamCache

enum TokensCommand {
    static let usage = """
        Usage:
          teamcache tokens create --name NAME --namespaces PATTERN --scopes SCOPES [--expires-in DURATION]
          teamcache tokens list
          teamcache tokens revoke ID
          teamcache tokens import --name NAME --namespaces PATTERN --scopes SCOPES
                                  [--secret-env VAR | --secret-file PATH [--generate]]
          teamcache tokens secret

        PATTERN is a namespace glob ('team-a*', '*'); SCOPES a comma list of read, write, admin,
        metrics. Every scope applies to the namespaces PATTERN matches (admin there also reads
        and writes); the store-wide routes (global stats) need admin with PATTERN '*'; metrics
        reads /metrics only (for Prometheus). DURATION like 90d, 12h.
        `create` prints the secret once, alone on the last line; only its SHA-256 is stored.
        `import` registers a secret you chose (for deployments: compose, Kubernetes), read from
        the variable VAR (default TEAMCACHE_BOOTSTRAP_TOKEN) or from the file PATH, never from
        the command line; with --generate a missing PATH is created (mode 0600, or --file-mode)
        holding a new secret. Running it again is a no-op. The secret must be tc_ and 64 random hex digits:
        `secret` prints a new one; placeholders and patterns are refused.

        \(Help.database)
        """

    static func run(_ words: [String]) throws -> Int32 {
        let arguments = try Arguments(words, valued: databaseFlags.union(["--name", "--namespaces", "--scopes",
                                                                          "--expires-in", "--secret-env", "--secret-file", "--file-mode"]),
                                      switches: ["--generate"], positional: 2)
        guard let action = arguments.positional.first, !arguments.switches.contains("--help") else {
            print(usage)
            return arguments.switches.contains("--help") ? 0 : 2
        }
        // Only `revoke` takes a second word (the id): anywhere else it was a value gone astray.
        if action != "revoke", arguments.positional.count > 1 {
            throw Arguments.Failure(description: "unexpected argument '\(arguments.positional[1])'")
        }
        // An imported token's lifetime is its secret's, managed where the secret is: a
        // --expires-in here once made a token that never expired, silently.
        if action == "import", arguments.values["--expires-in"] != nil {
            throw Arguments.Failure(description: "import does not take --expires-in (revoke the token to end it)")
        }
        switch action {
        case "create": return try create(arguments)
        case "list": return try list(arguments)
        case "revoke": return try revoke(arguments)
        case "import": return try importSecret(arguments)
        case "secret":
            print(APIToken.newSecret())
            return 0
        default: throw Arguments.Failure(description: "unknown action '\(action)'")
        }
    }

    /// --name, --namespaces and --scopes, shared by create and import.
    private static func grant(_ arguments: Arguments, _ action: String) throws -> (String, String, Set<Scope>) {
        guard let name = arguments.values["--name"], !name.isEmpty,
              let pattern = arguments.values["--namespaces"], !pattern.isEmpty,
              let scopeList = arguments.values["--scopes"] else {
            throw Arguments.Failure(description: "\(action) needs --name, --namespaces and --scopes")
        }
        var scopes = Set<Scope>()
        for word in scopeList.split(separator: ",") {
            guard let scope = Scope(rawValue: word.trimmingCharacters(in: .whitespaces)) else {
                throw Arguments.Failure(description: "--scopes takes read, write, admin, metrics (got '\(word)')")
            }
            scopes.insert(scope)
        }
        // /metrics shows every namespace: a metrics token narrower than the store would read
        // other teams' series.
        if scopes.contains(.metrics) && pattern != "*" {
            throw Arguments.Failure(description: "the metrics scope reads /metrics, which shows every namespace: "
                + "give it --namespaces '*', in a token of its own")
        }
        return (name, pattern, scopes)
    }

    private static func importSecret(_ arguments: Arguments) throws -> Int32 {
        let (name, pattern, scopes) = try grant(arguments, "import")
        let secret = try bootstrapSecret(arguments)
        return try DatabaseSession.with(arguments) { _, pool, _ in
            let added: Bool
            do {
                added = try TokenStore(pool: pool).importSecret(secret, name: name, namespacePattern: pattern,
                                                                scopes: scopes)
            } catch let weak as TokenStore.WeakSecret {
                throw Arguments.Failure(description: weak.description)
            }
            if !added && !APIToken.isStrongSecret(secret) {
                printError("teamcache tokens: this secret was registered before secrets had to be tc_ and 64 random hex "
                    + "digits; replace it (teamcache tokens secret) and revoke the old token")
            }
            print(added ? "imported token '\(name)'" : "token already registered; nothing changed")
            return 0
        }
    }

    /// The secret `import` registers: from a file (made first with --generate when absent),
    /// else from a variable. Surrounding whitespace (a file's newline) is not part of it.
    private static func bootstrapSecret(_ arguments: Arguments) throws -> String {
        guard let path = arguments.values["--secret-file"] else {
            let variable = arguments.values["--secret-env"] ?? "TEAMCACHE_BOOTSTRAP_TOKEN"
            guard let secret = ProcessInfo.processInfo.environment[variable], !secret.isEmpty else {
                throw Arguments.Failure(description: "import reads the secret from \(variable) (or --secret-file)")
            }
            return secret.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        if arguments.switches.contains("--generate") && !FileManager.default.fileExists(atPath: path) {
            // Created exclusively, owner-only: two bootstraps racing leave one secret, never a mix.
            guard let mode = mode_t(arguments.values["--file-mode"] ?? "600", radix: 8), mode & ~0o644 == 0 else {
                throw Arguments.Failure(description: "--file-mode takes an octal mode of at most 644 (default 600)")
            }
            // Written whole to a file of its own, then linked into place: two bootstraps racing
            // leave one secret, and a write cut short never leaves a partial file behind.
            let partial = path + ".\(getpid()).partial"
            let fd = open(partial, O_WRONLY | O_CREAT | O_EXCL, mode)
            guard fd >= 0 else { throw Arguments.Failure(description: "cannot create \(partial)") }
            let line = Array((APIToken.newSecret() + "\n").utf8)
            let written = line.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            let synced = fsync(fd) == 0
            close(fd)
            defer { unlink(partial) }
            guard written == line.count, synced else { throw Arguments.Failure(description: "cannot write \(partial)") }
            if link(partial, path) == 0 { printError("teamcache tokens: wrote a new secret to \(path)") }
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw Arguments.Failure(description: "cannot read the secret file \(path)"
                + (arguments.switches.contains("--generate") ? "" : " (--generate creates it)"))
        }
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    private static func create(_ arguments: Arguments) throws -> Int32 {
        let (name, pattern, scopes) = try grant(arguments, "create")
        let expiresAt = try arguments.values["--expires-in"].map { text -> Date in
            guard let seconds = Duration.seconds(text) else {
                throw Arguments.Failure(description: "--expires-in takes a duration such as 90d or 12h")
            }
            return Date().addingTimeInterval(seconds)
        }
        return try DatabaseSession.with(arguments) { _, pool, _ in
            let (token, secret) = try TokenStore(pool: pool).create(name: name, namespacePattern: pattern,
                                                                    scopes: scopes, expiresAt: expiresAt)
            print("created token \(token.id) '\(token.name)' for namespaces '\(pattern)' with scopes "
                + scopes.map(\.rawValue).sorted().joined(separator: ","))
            print("store this secret now; it is not shown again:")
            print(secret)
            return 0
        }
    }

    private static func list(_ arguments: Arguments) throws -> Int32 {
        try DatabaseSession.with(arguments) { _, pool, _ in
            print("ID\tNAME\tNAMESPACES\tSCOPES\tEXPIRES\tSTATE")
            for token in try TokenStore(pool: pool).list() {
                let state = token.revokedAt != nil ? "revoked" : token.isUsable(at: Date()) ? "active" : "expired"
                let expires = token.expiresAt.map { "\($0)" } ?? "never"
                print("\(token.id)\t\(token.name)\t\(token.namespacePattern)\t"
                    + "\(token.scopes.map(\.rawValue).sorted().joined(separator: ","))\t\(expires)\t\(state)")
            }
            return 0
        }
    }

    private static func revoke(_ arguments: Arguments) throws -> Int32 {
        guard arguments.positional.count == 2, let id = Int64(arguments.positional[1]) else {
            throw Arguments.Failure(description: "revoke takes the token's numeric ID")
        }
        return try DatabaseSession.with(arguments) { _, pool, _ in
            guard try TokenStore(pool: pool).revoke(id: id) else {
                printError("no active token with ID \(id)")
                return 1
            }
            print("revoked token \(id) (servers notice within TEAMCACHE_TOKEN_CACHE_TTL)")
            return 0
        }
    }
}

enum Duration {
    /// `90d`, `12h`, `30m`, `45s`, `500ms`, or plain seconds (`DurationText`, as settings).
    /// Above zero and at most 100 years: `inf`, `1e300d` and the like are refused, not trapped on.
    static func seconds(_ text: String) -> Double? {
        guard let seconds = DurationText.seconds(text), seconds > 0, seconds <= maximum else { return nil }
        return seconds
    }

    static let maximum: Double = 3_153_600_000
}
