import CacheCore
import Cryptography
import Foundation
import Locking
import Observability
import Postgres

/// The namespaces' data keys (migration 0013), stored wrapped by the master keys and
/// unwrapped in memory here; what a sealed message is and how it opens is `Sealing`'s (the
/// domain's pure half).
public final class Keyring: Sendable {
    public static let sealedPrefix = Sealing.sealedPrefix
    /// How long a namespace's sealing key (or its having none) is trusted before it is read
    /// again: a namespace encrypted while the service runs seals writes within this.
    public static let currentFor: TimeInterval = 10
    public typealias DataKey = Sealing.DataKey

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

    public init(master: MasterKeys?, metrics: StoreMetrics? = nil) {
        self.master = master
        integrityErrors = metrics.map { $0.registry.counter($0.integrityErrors) }
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
        let now = Uptime.coarse
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
        let now = Uptime.coarse
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

    /// What is remembered of a namespace's sealing key.
    public enum Remembered: Sendable {
        case plain
        case sealed(DataKey)
        /// Not remembered, or remembered too long ago: `sealingKey` would read the database.
        case unknown
    }

    /// `namespace`'s sealing key as remembered, without reading the database (for an event
    /// loop, which must not block: on `.unknown` the write goes to a worker).
    public func rememberedSealingKey(for namespace: String) -> Remembered {
        let now = Uptime.coarse
        guard let answer = known.withLock({ $0.current[namespace] }), answer.until > now else { return .unknown }
        return answer.key.map { .sealed($0) } ?? .plain
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
        guard let (inner, id) = Sealing.sealedForm(encoding: encoding, body: body) else {
            return broken(namespace, Sealing.Failure.unknownEncoding.rawValue)
        }
        if pool == nil && body.count > Self.loopOpenLimit { return .offLoop }
        guard let dataKey = try dataKey(id: id, pool) else {
            return pool == nil ? .offLoop : broken(namespace, "no usable data key \(id)")
        }
        switch Sealing.open(namespace: namespace, key: key, etag: etag, body: body, inner: inner, metadata: metadata,
                            with: dataKey) {
        case .success(let opened): return .plain(body: opened.body, encoding: inner, metadata: opened.metadata)
        case .failure(let failure): return broken(namespace, failure.rawValue)
        }
    }

    private func broken(_ namespace: String, _ why: String) -> Opened {
        integrityErrors?.inc([namespace])
        // The namespace and the reason only: never the key, the body or key material.
        failures.log(.error, "sealed entry does not open; answered as a miss", kind: why,
                     [("namespace", .string(namespace)), ("reason", .string(why))])
        return .broken
    }
}
