import CacheCore
import Foundation
import Hashing

/// What a token may do.
public enum Scope: String, Sendable, CaseIterable {
    case read, write, admin
}

/// A stored API token (never its secret).
public struct APIToken: Sendable, Equatable {
    public let id: Int64
    public let name: String
    /// A namespace glob where `*` matches any run of characters, e.g. `team-a*`.
    public let namespacePattern: String
    public let scopes: Set<Scope>
    public let createdAt: Date
    public let expiresAt: Date?
    public let revokedAt: Date?

    /// Secrets are `tc_` followed by 32 random bytes in hex: recognisable in a leak scan.
    public static let secretPrefix = "tc_"

    public static func newSecret() -> String {
        secretPrefix + Bytes.hex(Hashing.Bytes.random(count: 32))
    }

    /// Only this is stored.
    public static func hash<Secret: StringProtocol>(secret: Secret) -> [UInt8] {
        SHA256.hash(secret)
    }

    public func isUsable(at now: Date) -> Bool {
        revokedAt == nil && (expiresAt.map { $0 > now } ?? true)
    }

    /// Admin reaches every namespace; other scopes need the namespace to match the pattern.
    public func allows(_ scope: Scope, namespace: Namespace?) -> Bool {
        if scopes.contains(.admin) { return true }
        guard scopes.contains(scope), let namespace else { return false }
        return Self.glob(namespacePattern, matches: namespace.name)
    }

    static func glob(_ pattern: String, matches text: String) -> Bool {
        let pieces = pattern.split(separator: "*", omittingEmptySubsequences: false).map(String.init)
        guard pieces.count > 1 else { return pattern == text }
        guard text.hasPrefix(pieces[0]) else { return false }
        var rest = Substring(text.dropFirst(pieces[0].count))
        for piece in pieces.dropFirst().dropLast() where !piece.isEmpty {
            guard let range = rest.range(of: piece) else { return false }
            rest = rest[range.upperBound...]
        }
        return rest.hasSuffix(pieces.last!)
    }
}
