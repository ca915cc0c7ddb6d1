import CacheCore
import Foundation
import Postgres
import Testing
import TeamCache
import TestSupport

/// Rules the CLI must share with the API, and secrets it must refuse, run through the real
/// `teamcache` binary against a database of the test's own.
@Suite struct CommandLineRuleTests {
    static func tokenCount(_ url: String) throws -> Int {
        let connection = try PostgresConnection(url: url, limits: .unbounded)
        return try connection.query("SELECT count(*)::int8 AS n FROM api_tokens").first?.int("n") ?? -1
    }

    /// The placeholders deployment files once shipped, and secrets that look made up, are
    /// refused and nothing is stored; a real one is stored once.
    @Test func tokenImportRefusesPlaceholderAndPatternedSecrets() throws {
        let url = try DumpTests.databaseURL(prefix: "secrets")
        let grant = "tokens import --name admin --namespaces '*' --scopes admin"
        let weak = ["tc_change-me-0123456789abcdef0123456789abcdef", "tc_CHANGE-ME-to-32-or-more-random-characters",
                    "tc_" + String(repeating: "0123456789abcdef", count: 4), "tc_" + String(repeating: "a", count: 64),
                    "tc_" + String(repeating: "ab12", count: 16), String(repeating: "f", count: 67),
                    "tc_" + String(APIToken.newSecret().dropFirst(3).prefix(63)),
                    "tc_" + APIToken.newSecret().dropFirst(3).uppercased()]
        for secret in weak {
            let (status, errors) = try DumpTests.cli(grant, url: url, environment: ["TEAMCACHE_BOOTSTRAP_TOKEN": secret])
            #expect(status != 0 && errors.contains("64 random hex digits"), "\(secret): \(status) \(errors)")
        }
        #expect(try Self.tokenCount(url) == 0)
        let strong = APIToken.newSecret()
        #expect(try DumpTests.cli(grant, url: url, environment: ["TEAMCACHE_BOOTSTRAP_TOKEN": strong]).0 == 0)
        #expect(try DumpTests.cli(grant, url: url, environment: ["TEAMCACHE_BOOTSTRAP_TOKEN": strong]).0 == 0)
        #expect(try Self.tokenCount(url) == 1)
        for _ in 0..<200 { #expect(APIToken.isStrongSecret(APIToken.newSecret())) }
        // A secret registered before the rule (a bootstrap restarting) stays a no-op, with a warning.
        let old = "tc_change-me-0123456789abcdef0123456789abcdef"
        let connection = try PostgresConnection(url: url, limits: .unbounded)
        _ = try connection.query("INSERT INTO api_tokens (name, secret_hash, namespace_pattern, scopes) VALUES ('old', $1, '*', '{admin}')",
                                 [.bytes(APIToken.hash(secret: old))])
        let (again, warning) = try DumpTests.cli(grant, url: url, environment: ["TEAMCACHE_BOOTSTRAP_TOKEN": old])
        #expect(again == 0 && warning.contains("replace it"), "\(warning)")
        #expect(try Self.tokenCount(url) == 2)
    }

    /// `--secret-file … --generate` makes an owner-only file with a new secret at first
    /// start and reuses it after (the compose bootstrap).
    @Test func tokenImportGeneratesItsSecretFileOnce() throws {
        let url = try DumpTests.databaseURL(prefix: "secretfile")
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("admin-\(UUID().uuidString).token").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let command = "tokens import --name admin --namespaces '*' --scopes admin --secret-file '\(path)' --generate"
        #expect(try DumpTests.cli(command, url: url).0 == 0)
        let secret = try String(contentsOfFile: path, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(APIToken.isStrongSecret(secret))
        let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        #expect(try DumpTests.cli(command, url: url).0 == 0)
        #expect(try String(contentsOfFile: path, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines) == secret)
        #expect(try Self.tokenCount(url) == 1)
        let service = try TestService { $0.databaseURL = url }
        defer { service.stop() }
        #expect(try service.request("GET", "/v1/stats", token: secret).status == 200)
    }

    /// The namespace default TTL follows one rule from the CLI and the API: 1 s to
    /// TEAMCACHE_MAX_TTL (the CLI once took up to 100 years).
    @Test func namespaceDefaultTTLIsCappedLikeTheAPI() throws {
        let url = try DumpTests.databaseURL(prefix: "ttlcap")
        let (refused, errors) = try DumpTests.cli("namespaces set capped --default-ttl 400d", url: url)
        #expect(refused != 0 && errors.contains("TEAMCACHE_MAX_TTL"), "\(errors)")
        #expect(try DumpTests.cli("namespaces set capped --default-ttl 2h", url: url,
                                  environment: ["TEAMCACHE_MAX_TTL": "1h"]).0 != 0)
        #expect(try DumpTests.cli("namespaces set capped --default-ttl 365d", url: url).0 == 0)
        let service = try TestService { $0.databaseURL = url; $0.authEnabled = false }
        defer { service.stop() }
        let api = try service.request("PUT", "/v1/caches/capped/settings", json: "{\"default_ttl\":\(400 * 86400)}")
        #expect(api.status == 422)
    }

    /// A word no command takes is refused, not ignored: `export team-a` once exported every
    /// namespace, `migrate status` migrated, `--scopes read, write` made a read-only token,
    /// `--gzip=no` gzipped, and `tokens import --expires-in` made a token that never expired.
    @Test func aWordNoCommandTakesIsRefused() throws {
        let url = try DumpTests.databaseURL(prefix: "cliwords")
        let refused = [
            "export team-a", "import dump.ndjson", "migrate status", "evict everything",
            "tokens create --name t --namespaces '*' --scopes read, write",
            "tokens list extra", "export --gzip=no", "keys rotate now",
        ]
        for words in refused {
            let (status, errors) = try DumpTests.cli(words, url: url)
            #expect(status == 2 && (errors.contains("unexpected argument") || errors.contains("takes no value")),
                    "\(words): \(status) \(errors)")
        }
        let (status, errors) = try DumpTests.cli(
            "tokens import --name b --namespaces '*' --scopes admin --expires-in 90d", url: url,
            environment: ["TEAMCACHE_BOOTSTRAP_TOKEN": APIToken.newSecret()])
        #expect(status == 2 && errors.contains("--expires-in"), "\(status) \(errors)")
        #expect(try Self.tokenCount(url) == 0, "nothing was made")
        // What they meant still works.
        #expect(try DumpTests.cli("tokens create --name t --namespaces '*' --scopes read,write", url: url).0 == 0)
        #expect(try DumpTests.cli("tokens revoke 1", url: url).0 == 0)
    }
}
