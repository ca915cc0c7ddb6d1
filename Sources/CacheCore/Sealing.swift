import Cryptography
import Foundation
import Locking

/// Sealing's pure half: the message format and its associated data, with no database. The
/// keys come from `CacheStore.Keyring`, which stores them wrapped and unwraps them.
///
/// A sealed body is its data key's id (8 bytes, big-endian), a salt (16 bytes) and
/// AES-256-GCM's `nonce ‖ ciphertext ‖ tag` of the stored bytes (gzip or identity, as before
/// sealing), under a key derived from the data key and the salt (HKDF-SHA256). Random 96-bit
/// nonces under one key are safe for about 2^32 messages (NIST SP 800-38D), which a busy
/// namespace would reach in days; each process seals under a salt of its own, and takes a
/// new one every 2^28 messages (`SaltedKeys`), so no derived key comes near the bound.
/// Sealed metadata is the same, base64 in `{"teamcache_sealed": …}`. The associated data binds
/// each to its namespace, key, ETag, inner encoding and part, so a row copied to another
/// key, a body swapped with another version's, or a flipped byte does not open.
public enum Sealing {
    public static let sealedPrefix = "aes256gcm/"
    static let sealedMetadataMember = "teamcache_sealed"
    static let saltByteCount = 16
    /// The id and salt before each sealed message.
    static let headerByteCount = 8 + saltByteCount
    static let messageKeyInfo = Array("teamcache seal v1".utf8)

    /// A namespace's data key, unwrapped.
    public struct DataKey: Sendable {
        public let id: Int64
        public let namespace: String
        package let bytes: [UInt8]

        package init(id: Int64, namespace: String, bytes: [UInt8]) {
            self.id = id
            self.namespace = namespace
            self.bytes = bytes
        }
    }

    /// Why a sealed entry does not open (logged and counted by the keyring; never the key,
    /// the body or key material).
    public enum Failure: String, Error, Sendable {
        case unknownEncoding = "unknown encoding"
        case bodyDoesNotOpen = "body does not open"
        case metadataDoesNotOpen = "metadata does not open"
    }

    /// Associated data: each field length-prefixed, so no two (namespace, key, …) run together.
    static func aad(_ namespace: String, _ key: [UInt8], _ etag: String, _ encoding: BodyEncoding, part: String) -> [UInt8] {
        var out = Array("teamcache sealed v1".utf8)
        for field in [Array(namespace.utf8), key, Array(etag.utf8), Array(encoding.rawValue.utf8), Array(part.utf8)] {
            let count = UInt32(clamping: field.count)
            out += [UInt8(count >> 24), UInt8(count >> 16 & 0xff), UInt8(count >> 8 & 0xff), UInt8(count & 0xff)]
            out += field
        }
        return out
    }

    /// What is stored for a body, its encoding and metadata under `dataKey`.
    public static func seal(body: [UInt8], encoding: BodyEncoding, metadata: String?, namespace: String, key: [UInt8],
                            etag: String, with dataKey: DataKey) throws -> (body: [UInt8], encoding: String, metadata: String?) {
        let sealedBody = try sealMessage(body, dataKey, aad: aad(namespace, key, etag, encoding, part: "body"))
        let sealedMetadata = try metadata.map { text -> String in
            let sealed = try sealMessage(Array(text.utf8), dataKey, aad: aad(namespace, key, etag, encoding, part: "metadata"))
            return "{\"\(sealedMetadataMember)\":\"\(Data(sealed).base64EncodedString())\"}"
        }
        return (sealedBody, sealedPrefix + encoding.rawValue, sealedMetadata)
    }

    /// The inner encoding and data key id of a sealed stored body; nil when `encoding` is not
    /// a sealed one this build knows, or the body is too short to be sealed.
    public static func sealedForm(encoding: String, body: [UInt8]) -> (inner: BodyEncoding, keyID: Int64)? {
        guard encoding.hasPrefix(sealedPrefix),
              let inner = BodyEncoding(rawValue: String(encoding.dropFirst(sealedPrefix.count))),
              let id = keyID(body[...]) else { return nil }
        return (inner, id)
    }

    /// Opens a sealed body and its metadata under `dataKey` (the key `sealedForm` named).
    public static func open(namespace: String, key: [UInt8], etag: String, body: [UInt8], inner: BodyEncoding,
                            metadata: String?, with dataKey: DataKey) -> Result<(body: [UInt8], metadata: String?), Failure> {
        guard dataKey.namespace == namespace,
              let opened = openMessage(body[...], dataKey, aad: aad(namespace, key, etag, inner, part: "body"))
        else { return .failure(.bodyDoesNotOpen) }
        guard let metadata else { return .success((opened, nil)) }
        guard let sealed = sealedMetadata(metadata), keyID(sealed[...]) == dataKey.id,
              let text = openMessage(sealed[...], dataKey, aad: aad(namespace, key, etag, inner, part: "metadata")),
              let plainMetadata = String(validating: text, as: UTF8.self) else {
            return .failure(.metadataDoesNotOpen)
        }
        return .success((opened, plainMetadata))
    }

    /// `id ‖ salt ‖ AES-GCM(derived key)`: the key is derived from the data key and the salt
    /// this process seals with (`SaltedKeys`), so no derived key seals more than 2^28 messages.
    static func sealMessage(_ plaintext: [UInt8], _ dataKey: DataKey, aad: [UInt8]) throws -> [UInt8] {
        var header = [UInt8](repeating: 0, count: 8)
        for index in 0..<8 { header[index] = UInt8(truncatingIfNeeded: dataKey.id >> (56 - 8 * index)) }
        let (salt, derived) = try SaltedKeys.shared.forSealing(dataKey.bytes)
        return header + salt + (try AESGCM.seal(plaintext, key: derived, aad: aad))
    }

    /// The plaintext of `sealed` (as `sealMessage` made it) under `dataKey`; nil if it does not open.
    static func openMessage(_ sealed: ArraySlice<UInt8>, _ dataKey: DataKey, aad: [UInt8]) -> [UInt8]? {
        guard sealed.count >= headerByteCount + AESGCM.overhead else { return nil }
        let start = sealed.startIndex
        let salt = Array(sealed[(start + 8)..<(start + headerByteCount)])
        guard let derived = try? SaltedKeys.shared.forOpening(dataKey.bytes, salt: salt) else { return nil }
        return AESGCM.open(sealed[(start + headerByteCount)...], key: derived, aad: aad)
    }

    /// The data key id a sealed message starts with; nil when it is too short to be one.
    package static func keyID(_ bytes: ArraySlice<UInt8>) -> Int64? {
        guard bytes.count >= headerByteCount + AESGCM.overhead else { return nil }
        var id: Int64 = 0
        for byte in bytes.prefix(8) { id = id << 8 | Int64(byte) }
        return id
    }

    /// The sealed bytes of stored metadata (`{"teamcache_sealed":"<base64>"}`, as PostgreSQL
    /// prints that jsonb back: `{"teamcache_sealed": "<base64>"}`).
    static func sealedMetadata(_ text: String) -> [UInt8]? {
        guard let start = text.range(of: "\(sealedMetadataMember)\""), let open = text[start.upperBound...].firstIndex(of: "\""),
              let close = text[text.index(after: open)...].firstIndex(of: "\"") else { return nil }
        return Data(base64Encoded: String(text[text.index(after: open)..<close])).map(Array.init)
    }
}

/// The derived keys of this process: one salt (and its key) per data key for sealing, renewed
/// after `sealsPerSalt` messages; and the keys of the salts met when opening, so a hit derives
/// nothing (there are only as many salts as writer processes and renewals). Keyed by the
/// data key's bytes, not its id: two stores in one process (tests) may share ids.
final class SaltedKeys: Sendable {
    static let shared = SaltedKeys()
    static let sealsPerSalt: UInt64 = 1 << 28
    /// Opening keys kept at most; past it the table starts over (the next opens derive again).
    static let bound = 4096

    /// A (data key, salt) pair by 16 bytes of each: hashing four words, not 48 bytes one by
    /// one, on every sealed hit. (Two random 256-bit data keys agreeing on 128 bits: never.)
    struct Name: Hashable {
        let words: (UInt64, UInt64, UInt64, UInt64)

        init(_ dataKey: [UInt8], _ salt: [UInt8]) {
            func word(_ bytes: [UInt8], _ at: Int) -> UInt64 {
                var value: UInt64 = 0
                for index in at..<min(at + 8, bytes.count) { value = value << 8 | UInt64(bytes[index]) }
                return value
            }
            words = (word(dataKey, 0), word(dataKey, 8), word(salt, 0), word(salt, 8))
        }

        static func == (left: Name, right: Name) -> Bool { left.words == right.words }
        func hash(into hasher: inout Hasher) {
            hasher.combine(words.0)
            hasher.combine(words.1)
            hasher.combine(words.2)
            hasher.combine(words.3)
        }
    }

    private let sealing = Locked<[[UInt8]: (salt: [UInt8], key: [UInt8], used: UInt64)]>([:])
    private let opening = Locked<[Name: [UInt8]]>([:])

    func forSealing(_ dataKey: [UInt8]) throws -> (salt: [UInt8], key: [UInt8]) {
        let current: (salt: [UInt8], key: [UInt8])? = sealing.withLock { sealing in
            guard var entry = sealing[dataKey], entry.used < Self.sealsPerSalt else { return nil }
            entry.used += 1
            sealing[dataKey] = entry
            return (entry.salt, entry.key)
        }
        if let current { return current }
        let salt = Bytes.random(count: Sealing.saltByteCount)
        let key = try derive(dataKey, salt)
        sealing.withLock { $0[dataKey] = (salt, key, 1) }
        return (salt, key)
    }

    func forOpening(_ dataKey: [UInt8], salt: [UInt8]) throws -> [UInt8] {
        let name = Name(dataKey, salt)
        if let key = opening.withLock({ $0[name] }) { return key }
        let key = try derive(dataKey, salt)
        opening.withLock { opening in
            if opening.count >= Self.bound { opening = [:] }
            opening[name] = key
        }
        return key
    }

    private func derive(_ dataKey: [UInt8], _ salt: [UInt8]) throws -> [UInt8] {
        try HKDF.sha256(secret: dataKey, salt: salt, info: Sealing.messageKeyInfo, count: AESGCM.keyByteCount)
    }
}
