import Cryptography
import Foundation
import Postgres

/// Where a request's token is looked up by its secret's SHA-256: PostgreSQL's `TokenStore`,
/// or a fixed set where there is no database (the request fuzzer).
public protocol TokenDirectory: Sendable {
    func find(hash: [UInt8]) throws -> APIToken?
}

/// API tokens in PostgreSQL: create (returns the secret once), list, revoke, look up by hash.
public struct TokenStore: TokenDirectory {
    static let insert = """
        INSERT INTO api_tokens (name, secret_hash, namespace_pattern, scopes, expires_at)
        VALUES ($1, $2, $3, $4, $5::timestamptz)
        RETURNING id, name, namespace_pattern, scopes, created_at, expires_at, revoked_at
        """
    static let selectByHash = """
        SELECT id, name, secret_hash, namespace_pattern, scopes, created_at, expires_at, revoked_at
        FROM api_tokens WHERE secret_hash = $1
        """
    static let selectAll = """
        SELECT id, name, namespace_pattern, scopes, created_at, expires_at, revoked_at FROM api_tokens ORDER BY id
        """
    static let importSecret = """
        INSERT INTO api_tokens (name, secret_hash, namespace_pattern, scopes)
        VALUES ($1, $2, $3, $4) ON CONFLICT (secret_hash) DO NOTHING RETURNING id
        """
    static let revoke = "UPDATE api_tokens SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL"

    public let pool: ConnectionPool

    /// An imported secret that is not `tc_` and 64 random hex digits.
    public struct WeakSecret: Error, CustomStringConvertible {
        public init() {}
        public var description: String {
            "the secret must be tc_ followed by 64 random hex digits (make one with `teamcache tokens secret`, "
                + "or: echo tc_$(openssl rand -hex 32)); placeholders and patterns are refused"
        }
    }

    public init(pool: ConnectionPool) { self.pool = pool }

    /// Creates a token and returns it with its secret, which is not stored and cannot be shown again.
    public func create(name: String, namespacePattern: String, scopes: Set<Scope>, expiresAt: Date?) throws
        -> (APIToken, String) {
        let secret = APIToken.newSecret()
        let row = try pool.withConnection { connection in
            try connection.query(Self.insert, [
                .text(name), .bytes(APIToken.hash(secret: secret)), .text(namespacePattern),
                .textArray(scopes.map(\.rawValue).sorted()), expiresAt.map { .timestamp($0) } ?? .null,
            ]).first
        }
        guard let row else { throw PostgresError(.decoding, serverMessage: "insert returned no row") }
        return (try Self.token(row), secret)
    }

    /// Registers a secret chosen by the operator (deployment bootstrap); a no-op when that
    /// secret is registered already. Returns whether it was new.
    public func importSecret(_ secret: String, name: String, namespacePattern: String, scopes: Set<Scope>) throws
        -> Bool {
        try pool.withConnection { connection in
            // A secret registered before the strength rule (a restart of the same bootstrap)
            // stays a no-op; only a new registration must be strong.
            if try connection.query("SELECT 1 AS known FROM api_tokens WHERE secret_hash = $1",
                                    [.bytes(APIToken.hash(secret: secret))]).first != nil { return false }
            guard APIToken.isStrongSecret(secret) else { throw WeakSecret() }
            return try connection.query(Self.importSecret, [
                .text(name), .bytes(APIToken.hash(secret: secret)), .text(namespacePattern),
                .textArray(scopes.map(\.rawValue).sorted()),
            ]).rowCount == 1
        }
    }

    /// The token whose secret hashes to `hash`, compared again in constant time.
    public func find(hash: [UInt8]) throws -> APIToken? {
        try pool.withConnection { connection in
            guard let row = try connection.query(Self.selectByHash, [.bytes(hash)]).first,
                  let stored = try row.bytes("secret_hash"), Cryptography.Bytes.constantTimeEqual(stored, hash) else {
                return nil
            }
            return try Self.token(row)
        }
    }

    public func list() throws -> [APIToken] {
        try pool.withConnection { try $0.query(Self.selectAll).rows.map(Self.token) }
    }

    /// False when no unrevoked token has this id.
    public func revoke(id: Int64) throws -> Bool {
        try pool.withConnection { try $0.query(Self.revoke, [.int(id)]).affectedRows > 0 }
    }

    static func token(_ row: PostgresRow) throws -> APIToken {
        APIToken(id: Int64(try row.int("id") ?? 0), name: try row.string("name") ?? "",
                 namespacePattern: try row.string("namespace_pattern") ?? "",
                 scopes: Set((try row.stringArray("scopes") ?? []).compactMap(Scope.init)),
                 createdAt: try row.date("created_at") ?? Date(timeIntervalSince1970: 0),
                 expiresAt: try row.date("expires_at"), revokedAt: try row.date("revoked_at"))
    }
}
