import CacheCore
import Foundation
import Testing
@testable import TeamCache

/// `APIToken.allows` reads its scopes as bits and `*` as a flag: it must answer as the
/// `Set<Scope>` and glob reading it replaced, for every set of scopes, pattern and namespace.
@Suite struct TokenScopeTests {
    static func reference(_ token: APIToken, _ scope: Scope, _ namespace: Namespace?) -> Bool {
        guard let namespace else {
            // /metrics shows every namespace: only a token for every namespace reads it.
            let everyNamespace = token.namespacePattern == "*"
            let storeAdmin = token.scopes.contains(.admin) && everyNamespace
            return scope == .metrics ? storeAdmin || (everyNamespace && token.scopes.contains(.metrics))
                : scope == .admin && storeAdmin
        }
        guard scope != .metrics, Glob.matches(token.namespacePattern, namespace.name) else { return false }
        return token.scopes.contains(scope) || token.scopes.contains(.admin)
    }

    @Test func everyScopeSetPatternAndNamespaceAnswersAsTheSetDid() {
        let patterns = ["*", "team-a*", "team-a", "*-b", "", "**", "t*a*"]
        let namespaces: [Namespace?] = [nil] + ["team-a", "team-ab", "team-b", "x-b", "t"].map { Namespace($0) }
        var checked = 0
        for mask in 0..<(1 << Scope.allCases.count) {
            let scopes = Set(Scope.allCases.enumerated().filter { mask & (1 << $0.offset) != 0 }.map(\.element))
            for pattern in patterns {
                let token = APIToken(id: 1, name: "t", namespacePattern: pattern, scopes: scopes, createdAt: Date(),
                                     expiresAt: nil, revokedAt: nil)
                for namespace in namespaces {
                    for scope in Scope.allCases {
                        #expect(token.allows(scope, namespace: namespace) == Self.reference(token, scope, namespace),
                                "\(scopes) \(pattern) \(namespace?.name ?? "store") \(scope)")
                        checked += 1
                    }
                }
            }
        }
        #expect(checked == 16 * 7 * 6 * 4)
    }
}
