import Locking

/// Where problem `type` URIs point (RFC 9457 §3.1.1): a base the application names, then the
/// kind's slug (`https://example.com/problems/not-found`). Errors are made far from any
/// server (in parsers, in handlers), so a server whose configuration names a base
/// (`HTTPServerConfiguration.problemTypeBase`) sets it for the process when it is made; with
/// none named, a problem's type is `about:blank` (RFC 9457 §4.2.1: nothing beyond its status).
public enum ProblemTypes {
    private static let base = Locked("")

    /// Names the process's base (an absolute URI ending in `/`); empty: `about:blank`.
    public static func use(base: String) { self.base.withLock { $0 = base } }

    /// The type URI of the problem kind `slug` (`not-found`, `outcome-unknown`).
    public static func uri(_ slug: String) -> String {
        let base = self.base.value
        return base.isEmpty ? "about:blank" : base + slug
    }
}
