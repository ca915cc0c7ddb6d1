import Cryptography

/// A miss lease: the right, for a while, to be the one caller that fills a key.
public struct Lease: Sendable, Equatable {
    /// The holder's secret (`tcl_` and 64 hex digits): never stored, never logged.
    public let id: String
    public let expiresIn: Int

    public init(id: String, expiresIn: Int) {
        self.id = id
        self.expiresIn = expiresIn
    }

    /// Longest lease a caller may ask for, in seconds.
    public static let maxSeconds = 600
    static let idPrefix = "tcl_"

    /// A new holder's secret: 32 random bytes in hex behind the prefix.
    public static func newID() -> String { idPrefix + Bytes.hex(Bytes.random(count: 32)) }

    /// Whether `text` has the shape of a lease id (checked before any store work).
    public static func isWellFormed(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        return bytes.count == idPrefix.utf8.count + 64 && text.hasPrefix(idPrefix)
            && bytes.dropFirst(idPrefix.utf8.count).allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }
}

/// What asking for a lease on a missed key gave.
public enum LeaseGrant: Sendable, Equatable {
    case granted(Lease)
    /// Another caller holds a live lease; it runs out in `retryAfter` seconds (at least 1).
    case held(retryAfter: Int)
    /// Granted, then withdrawn at once: the key holds a fresh entry (`FillCheck`) that the
    /// caller's read came too early to see. Read it again rather than pay for it again.
    case filled
}

/// Which fresh entry makes a lease just granted moot: any (a raw key), or one of the model
/// the read asked for (a descriptor lookup and the gateway take no other as their hit).
public enum FillCheck: Sendable, Equatable {
    case anyEntry
    case model(String?)
}
