import CacheCore
import Cryptography
import Foundation
import Locking
import Observability
import Postgres

/// The namespaces' data keys (migration 0013), unwrapped in memory by the master keys.
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
public final class Keyring: Sendable {
    public static let sealedPrefix = "aes256gcm/"
    static let sealedMetadataMember = "teamcache_sealed"
    /// How long a namespace's sealing key (or its having none) is trusted before it is read
    /// again: a namespace encrypted while the service runs seals writes within this.
    public static let currentFor: TimeInterval = 10
    static let saltByteCount = 16
    /// The id and salt before each sealed message.
    static let headerByteCount = 8 + saltByteCount
    static let messageKeyInfo = Array("teamcache seal v1".utf8)

    public struct DataKey: Sendable {
        public let id: Int64
        public let namespace: String
        let bytes: [UInt8]
    }

    public enum Failure: Error, CustomStringConvertible, Equatable {
        /// Namespaces are encrypted and no master key was given.
        case masterKeyMissing(namespaces: [String])
        /// No key of the file has the fingerprint a data key was wrapped with.
        case noMasterKey(namespace: String, masterKeyID: String)
        /// The fingerprint matched but the wrapped key does not open (tampered, or corrupt).
        case unwrapFailed(namespace: String, id: Int64)

        public var description: String {
            switch self {
            case .masterKeyMissing(let namespaces):
                "namespaces \(namespaces.prefix(5).joined(separator: ", ")) are encrypted: set TEAMCACHE_MASTER_KEY_FILE "
                    + "to the file that holds their master key"
            case .noMasterKey(let namespace, let id):
                "TEAMCACHE_MASTER_KEY_FILE holds no key \(id), which wraps namespace \(namespace)'s data key"
            case .unwrapFailed(let namespace, let id):
                "TEAMCACHE_MASTER_KEY_FILE: data key \(id) of namespace \(namespace) does not unwrap (wrong key, or tampered)"
            }
        }
    }

    /// A write to an encrypted namespace this process cannot seal for: refused, never stored plain.
    public struct Unavailable: Error, CustomStringConvertible {
        public let namespace: String
        public var description: String { "namespace \(namespace) is encrypted and this process cannot use its key" }
    }

    public let master: MasterKeys?
    private let known = Locked(Known())

    /// The data keys this process has unwrapped, and each namespace's sealing key (or its
    /// having none) as last read.
    private struct Known {
        var byID: [Int64: DataKey] = [:]
        var current: [String: (key: DataKey?, until: TimeInterval)] = [:]
        /// The size past which `current` is pruned next.
        var pruneAt = 1024

        /// Notes `namespace`'s sealing key until `now + currentFor`. Answers past their time
        /// are dropped whenever the table has doubled since the last pruning (at least
        /// 1,024): one per namespace ever written would otherwise stay forever.
        mutating func remember(_ namespace: String, _ key: DataKey?, now: TimeInterval) {
            current[namespace] = (key, now + Keyring.currentFor)
            guard current.count >= pruneAt else { return }
            current = current.filter { $0.value.until > now }
            pruneAt = max(1024, current.count * 2)
        }
    }
    private let integrityErrors: CounterFamily?
    private let failures = LogThrottle(Logger(component: "keyring"))

    public init(master: MasterKeys?, metrics: MetricsRegistry? = nil) {
        self.master = master
        integrityErrors = metrics?.counter("teamcache_integrity_errors_total",
                                           "Sealed entries that did not open (tampered or corrupt): answered as misses.",
                                           labels: ["namespace"])
    }

    static let selectKeys = "SELECT id, namespace, wrapped, master_key_id FROM data_keys"
    static let selectCurrent = """
        SELECT id, namespace, wrapped, master_key_id FROM data_keys WHERE namespace = $1 ORDER BY id DESC LIMIT 1
        """
    static let selectKey = "SELECT id, namespace, wrapped, master_key_id FROM data_keys WHERE id = $1"
    static let insertKey = "INSERT INTO data_keys (namespace, wrapped, master_key_id) VALUES ($1, $2, $3) RETURNING id"

    /// Unwraps every data key (at start-up); throws the reason the service must not start.
    public func loadAll(_ pool: ConnectionPool) throws {
        let rows = try pool.withConnection { try $0.query(Self.selectKeys).rows }
        guard !rows.isEmpty else { return }
        guard master != nil else {
            let namespaces = Set(try rows.compactMap { try $0.string("namespace") }).sorted()
            throw Failure.masterKeyMissing(namespaces: namespaces)
        }
        let keys = try rows.map(unwrap)
        known.withLock { known in for key in keys { known.byID[key.id] = key } }
    }

    private func unwrap(_ row: PostgresRow) throws -> DataKey {
        guard let id = try row.int("id"), let namespace = try row.string("namespace"),
              let wrapped = try row.bytes("wrapped"), let masterID = try row.string("master_key_id") else {
            throw PostgresError(.decoding, serverMessage: "data key row has unexpected NULLs")
        }
        guard let master else { throw Failure.masterKeyMissing(namespaces: [namespace]) }
        guard let wrapping = master.key(id: masterID) else { throw Failure.noMasterKey(namespace: namespace, masterKeyID: masterID) }
        guard let bytes = AESGCM.open(wrapped, key: wrapping.bytes, aad: Self.wrappingAAD(namespace)),
              bytes.count == AESGCM.keyByteCount else {
            throw Failure.unwrapFailed(namespace: namespace, id: Int64(id))
        }
        return DataKey(id: Int64(id), namespace: namespace, bytes: bytes)
    }

    static func wrappingAAD(_ namespace: String) -> [UInt8] { Array("teamcache data key\0\(namespace)".utf8) }

    /// A new data key for `namespace`, wrapped by the file's first master key; it seals the
    /// namespace's writes from now on (within `currentFor` on running services).
    @discardableResult
    public func createKey(for namespace: String, _ pool: ConnectionPool) throws -> DataKey {
        guard let master else { throw Failure.masterKeyMissing(namespaces: [namespace]) }
        let bytes = Bytes.random(count: AESGCM.keyByteCount)
        let wrapped = try AESGCM.seal(bytes, key: master.sealing.bytes, aad: Self.wrappingAAD(namespace))
        let id = try pool.withConnection {
            try $0.query(Self.insertKey, [.text(namespace), .bytes(wrapped), .text(master.sealing.id)]).first?.int("id")
        }
        guard let id else { throw PostgresError(.decoding, serverMessage: "no data key id") }
        let key = DataKey(id: Int64(id), namespace: namespace, bytes: bytes)
        let now = ProcessInfo.processInfo.systemUptime
        known.withLock { known in
            known.byID[key.id] = key
            known.remember(namespace, key, now: now)
        }
        return key
    }

    /// Re-wraps every data key under the file's first master key (`teamcache keys rotate`), in
    /// one transaction; bodies are not touched. Returns how many keys were re-wrapped.
    public func rewrapAll(_ pool: ConnectionPool) throws -> Int {
        guard let master else { throw Failure.masterKeyMissing(namespaces: []) }
        return try pool.withConnection { connection in
            try connection.transaction { connection in
                let rows = try connection.query(Self.selectKeys + " ORDER BY id FOR UPDATE").rows
                for row in rows {
                    let key = try unwrap(row)
                    let wrapped = try AESGCM.seal(key.bytes, key: master.sealing.bytes, aad: Self.wrappingAAD(key.namespace))
                    _ = try connection.query("UPDATE data_keys SET wrapped = $1, master_key_id = $2 WHERE id = $3",
                                             [.bytes(wrapped), .text(master.sealing.id), .int(Int(key.id))])
                }
                return rows.count
            }
        }
    }

    /// The key writes to `namespace` are sealed with; nil when it is not encrypted. Read
    /// from the database at most every `currentFor` seconds per namespace (blocking).
    public func sealingKey(for namespace: String, _ pool: ConnectionPool, fresh: Bool = false) throws -> DataKey? {
        let now = ProcessInfo.processInfo.systemUptime
        if !fresh, let answer = known.withLock({ $0.current[namespace] }), answer.until > now { return answer.key }
        let row = try pool.withConnection { try $0.query(Self.selectCurrent, [.text(namespace)]).first }
        var key: DataKey?
        if let row {
            do {
                key = try unwrap(row)
            } catch {
                // Never store plain what should be sealed: the write is refused.
                failures.log(.error, "data key unusable", kind: "unwrap", [("namespace", .string(namespace)),
                                                                           ("error", .string("\(error)"))])
                throw Unavailable(namespace: namespace)
            }
        }
        known.withLock { known in
            if let key { known.byID[key.id] = key }
            known.remember(namespace, key, now: now)
        }
        return key
    }

    /// Namespaces whose sealing key (or its absence) is remembered now.
    var rememberedNamespaces: Int { known.withLock { $0.current.count } }

    /// Notes `namespace`'s sealing key (or its having none) until `now + currentFor`.
    func remember(_ namespace: String, _ key: DataKey?, now: TimeInterval) {
        known.withLock { $0.remember(namespace, key, now: now) }
    }

    /// Whether `namespace` has a data key (no unwrapping: for display).
    public static func isEncrypted(_ namespace: String, _ pool: ConnectionPool) throws -> Bool {
        try pool.withConnection {
            try $0.query("SELECT EXISTS (SELECT 1 FROM data_keys WHERE namespace = $1) AS encrypted", [.text(namespace)])
                .first?.bool("encrypted") ?? false
        }
    }

    /// Every namespace's sealing key is read again at its next write (the database refused a
    /// plain write: a namespace was encrypted since it was last read).
    public func forgetSealingKeys() {
        known.withLock { $0.current = [:] }
    }

    /// The data key `id`, from memory, else (with `pool`) from the database: nil when there is
    /// no such key or it does not unwrap; a database failure throws (it is no integrity error).
    func dataKey(id: Int64, _ pool: ConnectionPool?) throws -> DataKey? {
        if let key = known.withLock({ $0.byID[id] }) { return key }
        guard let pool, let row = try pool.withConnection({ try $0.query(Self.selectKey, [.int(Int(id))]).first }) else {
            return nil
        }
        do {
            let key = try unwrap(row)
            known.withLock { $0.byID[key.id] = key }
            return key
        } catch is Failure {
            return nil
        }
    }

    // MARK: Sealing

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

    /// A stored entry's body and metadata, opened.
    public enum Opened: Sendable {
        case plain(body: [UInt8], encoding: BodyEncoding, metadata: String?)
        /// Asked not to block (on a loop), and opening needs more: a key this process has not
        /// loaded, or a body past `loopOpenLimit` (opening it would stall the loop's other requests).
        case offLoop
        /// Does not open: tampered, corrupt, or an encoding no build knows. Logged and counted.
        case broken
    }

    /// Sealed bodies opened on an event loop at most (a batch of 256 reads stays under a
    /// millisecond of AES); larger ones are opened on a worker.
    static let loopOpenLimit = 16 * 1024

    /// Opens a stored entry (plain ones pass through). `pool` nil: never blocks (on a loop),
    /// and what cannot be opened at once there is `.offLoop`.
    public func open(namespace: String, key: [UInt8], etag: String, body: [UInt8], encoding: String,
                     metadata: String?, pool: ConnectionPool?) throws -> Opened {
        if let plain = BodyEncoding(rawValue: encoding) { return .plain(body: body, encoding: plain, metadata: metadata) }
        guard encoding.hasPrefix(Self.sealedPrefix),
              let inner = BodyEncoding(rawValue: String(encoding.dropFirst(Self.sealedPrefix.count))),
              let id = Self.keyID(body[...]) else { return broken(namespace, "unknown encoding") }
        if pool == nil && body.count > Self.loopOpenLimit { return .offLoop }
        guard let dataKey = try dataKey(id: id, pool) else {
            return pool == nil ? .offLoop : broken(namespace, "no usable data key \(id)")
        }
        guard dataKey.namespace == namespace,
              let opened = Self.openMessage(body[...], dataKey, aad: Self.aad(namespace, key, etag, inner, part: "body"))
        else { return broken(namespace, "body does not open") }
        guard let metadata else { return .plain(body: opened, encoding: inner, metadata: nil) }
        guard let sealed = Self.sealedMetadata(metadata), Self.keyID(sealed[...]) == id,
              let text = Self.openMessage(sealed[...], dataKey, aad: Self.aad(namespace, key, etag, inner, part: "metadata")),
              let plainMetadata = String(validating: text, as: UTF8.self) else {
            return broken(namespace, "metadata does not open")
        }
        return .plain(body: opened, encoding: inner, metadata: plainMetadata)
    }

    private func broken(_ namespace: String, _ why: String) -> Opened {
        integrityErrors?.inc([namespace])
        // The namespace and the reason only: never the key, the body or key material.
        failures.log(.error, "sealed entry does not open; answered as a miss", kind: why,
                     [("namespace", .string(namespace)), ("reason", .string(why))])
        return .broken
    }

    static func keyID(_ bytes: ArraySlice<UInt8>) -> Int64? {
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
        let salt = Bytes.random(count: Keyring.saltByteCount)
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
        try HKDF.sha256(secret: dataKey, salt: salt, info: Keyring.messageKeyInfo, count: AESGCM.keyByteCount)
    }
}
