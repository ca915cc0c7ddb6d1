import CacheCore
import Cryptography
import Foundation

/// What a token may do.
public enum Scope: String, Sendable, CaseIterable {
    case read, write, admin
    /// `/metrics` only: what a Prometheus scraper holds, so it need not hold an admin token.
    case metrics

    /// The scope's bit in `APIToken`'s mask.
    var bit: UInt8 {
        switch self {
        case .read: 1
        case .write: 2
        case .admin: 4
        case .metrics: 8
        }
    }
}

/// A stored API token (never its secret).
///
/// Immutable, and a class: a request's principal and context carry it, and are copied a few
/// times a request; as a struct each copy retained its name, pattern and scopes apart.
public final class APIToken: Sendable, Equatable {
    public let id: Int64
    public let name: String
    /// A namespace glob where `*` matches any run of characters, e.g. `team-a*`.
    public let namespacePattern: String
    public let scopes: Set<Scope>
    public let createdAt: Date
    public let expiresAt: Date?
    public let revokedAt: Date?
    /// `scopes` as bits, and whether the pattern is `*`: every request asks `allows` twice or
    /// more, and a `Set<Scope>` lookup hashes the scope's name (with the glob, ~1,000
    /// instructions a near-cache hit).
    private let scopeBits: UInt8
    private let everyNamespace: Bool

    public init(id: Int64, name: String, namespacePattern: String, scopes: Set<Scope>, createdAt: Date,
                expiresAt: Date?, revokedAt: Date?) {
        (self.id, self.name, self.namespacePattern, self.scopes) = (id, name, namespacePattern, scopes)
        (self.createdAt, self.expiresAt, self.revokedAt) = (createdAt, expiresAt, revokedAt)
        scopeBits = scopes.reduce(0) { $0 | $1.bit }
        everyNamespace = namespacePattern == "*"
    }

    private func has(_ scope: Scope) -> Bool { scopeBits & scope.bit != 0 }

    /// Equal when every stored field is (what the struct's synthesized `==` compared).
    public static func == (lhs: APIToken, rhs: APIToken) -> Bool {
        lhs.id == rhs.id && lhs.name == rhs.name && lhs.namespacePattern == rhs.namespacePattern
            && lhs.scopes == rhs.scopes && lhs.createdAt == rhs.createdAt && lhs.expiresAt == rhs.expiresAt
            && lhs.revokedAt == rhs.revokedAt
    }

    /// Secrets are `tc_` followed by 32 random bytes in hex: recognisable in a leak scan.
    public static let secretPrefix = "tc_"

    public static func newSecret() -> String {
        secretPrefix + Bytes.hex(Cryptography.Bytes.random(count: 32))
    }

    /// Whether an operator's secret has the shape `newSecret` makes: `tc_` and 64 hex digits
    /// that look random. A placeholder copied from a deployment file (`tc_change-me-…`), a
    /// short or repeated pattern (`0123456789abcdef` four times, `aaaa…`) is refused: a
    /// guessable admin secret is worse than none.
    public static func isStrongSecret(_ secret: String) -> Bool {
        let digits = Array(secret.utf8.dropFirst(secretPrefix.utf8.count))
        guard secret.hasPrefix(secretPrefix), digits.count == 64,
              digits.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0)
                                  || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0) }) else { return false }
        // 64 random hex digits show all 16 values but for a chance of about 1 in 60; fewer
        // than 10 distinct is a pattern. A period of 32 or less (the same half twice) too.
        guard Set(digits).count >= 10 else { return false }
        let periodic = (1...32).contains { period in (period..<64).allSatisfy { digits[$0] == digits[$0 - period] } }
        return !periodic
    }

    /// Only this is stored.
    public static func hash<Secret: StringProtocol>(secret: Secret) -> [UInt8] {
        SHA256.hash(secret)
    }

    public func isUsable(at now: Date) -> Bool {
        revokedAt == nil && (expiresAt.map { $0 > now } ?? true)
    }

    /// Every scope needs the namespace to match the pattern; admin there also reads and
    /// writes it. Store-wide routes (no namespace: the global stats, `/metrics`) need admin
    /// on every namespace (the pattern `*`), or for `/metrics` the metrics scope on every
    /// namespace too: `/metrics` shows every namespace's series, so a token for `team-a*`
    /// (admin or metrics) reads team-a's namespaces, not the store's.
    public func allows(_ scope: Scope, namespace: Namespace?) -> Bool {
        guard let namespace else {
            guard everyNamespace else { return false }
            return scope == .metrics ? has(.admin) || has(.metrics) : scope == .admin && has(.admin)
        }
        guard scope != .metrics, everyNamespace || Self.glob(namespacePattern, matches: namespace.name) else {
            return false
        }
        return has(scope) || has(.admin)
    }

    /// Whether the token may administer `namespace` (sees who wrote what, prompt prefixes).
    public func administers(_ namespace: Namespace) -> Bool { allows(.admin, namespace: namespace) }

    /// Whether `text` matches `pattern` (`*`: any run); see `Glob`.
    static func glob(_ pattern: String, matches text: String) -> Bool { Glob.matches(pattern, text) }
}
