import Glibc
import Locking

/// The credential a connection presented last, and the digest verifying it gave: a client
/// sends the same `Authorization` header with every request on its connection, and this lets
/// the repeat cost a constant-time comparison instead of a SHA-256 (the digest still keys
/// the token cache, so revocation and expiry take effect exactly as before).
///
/// Kept in the connection's own memory, never shared with another connection, and zeroed
/// when the connection closes or presents another credential (the bytes came over this
/// connection anyway; they must not outlive it).
public final class ConnectionCredential: Sendable {
    private struct Held {
        var secret: [UInt8]
        var digest: [UInt8]
    }

    private let held = Locked<Held?>(nil)

    public init() {}

    /// The digest remembered for `secret`, or nil when it is not the credential remembered.
    public func digest(for secret: Substring) -> [UInt8]? {
        held.withLock { held in
            guard let held, Self.equalInConstantTime(held.secret, secret.utf8) else { return nil }
            return held.digest
        }
    }

    /// Remembers `secret` and its digest, wiping what was held. (Not a verdict: the digest
    /// is what the secret hashes to, and is looked up again with every request.)
    public func remember(_ secret: Substring, digest: [UInt8]) {
        held.withLock { held in
            Self.wipe(&held)
            held = Held(secret: Array(secret.utf8), digest: digest)
        }
    }

    /// Forgets, overwriting the bytes first (the connection is closing).
    public func wipe() {
        held.withLock { Self.wipe(&$0) }
    }

    private static func wipe(_ held: inout Held?) {
        guard var old = held else { return }
        held = nil  // `old` is now the only reference: zeroed in place, not in a copy
        old.secret.withUnsafeMutableBytes { if let base = $0.baseAddress { explicit_bzero(base, $0.count) } }
        old.digest.withUnsafeMutableBytes { if let base = $0.baseAddress { explicit_bzero(base, $0.count) } }
    }

    /// Whether the bytes are equal, in time that depends only on their lengths (a token's
    /// length is its format's, not a secret).
    static func equalInConstantTime(_ known: [UInt8], _ given: Substring.UTF8View) -> Bool {
        guard known.count == given.count else { return false }
        // Over the bytes in place (a header's substring is contiguous): walking the view cost
        // ~40 instructions a byte, on every request.
        if let equal = given.withContiguousStorageIfAvailable({ bytes in
            known.withUnsafeBufferPointer { Self.equalInConstantTime($0, bytes) }
        }) {
            return equal
        }
        return equalInConstantTime(known, Array(given))
    }

    private static func equalInConstantTime(_ known: UnsafeBufferPointer<UInt8>, _ given: UnsafeBufferPointer<UInt8>)
        -> Bool {
        var difference: UInt8 = 0
        for index in 0..<known.count { difference |= known[index] ^ given[index] }
        return difference == 0
    }

    private static func equalInConstantTime(_ known: [UInt8], _ given: [UInt8]) -> Bool {
        known.withUnsafeBufferPointer { known in given.withUnsafeBufferPointer { equalInConstantTime(known, $0) } }
    }
}
