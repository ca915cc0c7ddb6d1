import CacheCore
import Foundation
import Observability
import Postgres

/// Entries in PostgreSQL: lookup, upsert and delete by key. Every write runs in a single
/// autocommit statement (alone or with a group of others), so a returned outcome means
/// the row is committed.
public final class EntryStore: EntryStorage {
    /// What a read returns of an entry (decoded by `entry(_:)`).
    static let entryColumns = """
        id, namespace, key, body, encoding, content_type, identity_size, etag, model, metadata::text AS metadata,
        input_tokens, output_tokens, updated_at, expires_at, stale_while_revalidate
        """
    static let selectEntry = "SELECT \(entryColumns) FROM entries WHERE namespace = $1 AND key = $2"
    static let putEntry = """
        SELECT outcome, entry_id, expires_at FROM tc_put_entry($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11,
            $12::jsonb, $13, $14, coalesce($15::timestamptz, now()), $16::bigint, $17, $18::bigint, $19, $20, $21, $22,
            $23::int4)
        """
    /// An expired entry is absent to DELETE (404) as to every write; it stays for `max-stale`
    /// reads until the eviction job removes it.
    static let deleteEntry =
        "DELETE FROM entries WHERE namespace = $1 AND key = $2 AND expires_at > coalesce($3::timestamptz, now())"

    public let pool: ConnectionPool
    public let policy: CachePolicy
    public let clock: any Clock
    /// Writes learn the primary's WAL position after they commit (there is a standby to
    /// read one's own writes from); otherwise that round trip is skipped.
    public let tracksPositions: Bool
    /// Seals writes to encrypted namespaces and opens what they stored.
    public let keyring: Keyring
    public let localChanges = LocalChanges()
    private let writes: EntryWriteBatcher
    /// One change-feed sequencer run at a time from this process (`sequenceChanges`).
    let sequencerGate = NSLock()

    /// `concurrentWriteBatches`: how many write transactions may run at once (each carries
    /// every write that queued while the others ran); `writeGroupsBusyAfter`: how long the
    /// running ones must have been busy before another starts (a test's seam; see
    /// `EntryWriteBatcher`).
    public init(pool: ConnectionPool, policy: CachePolicy, clock: any Clock = SystemClock(),
                concurrentWriteBatches: Int = 4, writeGroupMetrics: WriteGroupMetrics? = nil,
                tracksPositions: Bool = false, keyring: Keyring = Keyring(master: nil),
                writeGroupsBusyAfter: TimeInterval = 0.02) {
        self.pool = pool
        self.keyring = keyring
        self.tracksPositions = tracksPositions
        self.policy = policy
        self.clock = clock
        writes = EntryWriteBatcher(concurrent: concurrentWriteBatches, maxBatch: 64, metrics: writeGroupMetrics,
                                   busyAfter: writeGroupsBusyAfter)
    }

    /// The entry under `key`, whatever its freshness; nil when absent.
    public func fetch(_ namespace: Namespace, _ key: EntryKey) throws -> StoredEntry? {
        try pool.withConnection { connection in
            guard let row = try connection.query(Self.selectEntry, [.text(namespace.name), .bytes(key.bytes)]).first else {
                return nil
            }
            // One that does not open is a miss (logged and counted): the next write replaces it.
            guard case .entry(let entry) = try Self.decode(row, keyring: keyring, pool: pool) else { return nil }
            return entry
        }
    }

    /// Inserts or replaces an entry, honouring its condition and the hard caps. Concurrent
    /// calls share transactions (see `EntryWriteBatcher`); the outcome is returned once the
    /// entry is committed.
    public func put(_ write: EntryWrite) throws -> WriteOutcome {
        defer { localChanges.changed(write.namespace.name, write.key.bytes) }
        return try forgettingStaleSealingKeys { try writes.put(try sealed(write), into: self) }
    }

    /// `write` as it is stored: sealed when its namespace is encrypted. Blocking (the
    /// namespace's key is read at most every few seconds); throws rather than store plain
    /// what should be sealed.
    func sealed(_ write: EntryWrite) throws -> EntryWrite {
        try sealed(write, with: try keyring.sealingKey(for: write.namespace.name, pool))
    }

    /// `write` sealed with its namespace's remembered key; nil when that key (or its absence)
    /// is not remembered and would have to be read (blocking).
    func sealedWithoutBlocking(_ write: EntryWrite) throws -> EntryWrite? {
        switch keyring.rememberedSealingKey(for: write.namespace.name) {
        case .plain: write
        case .sealed(let dataKey): try sealed(write, with: dataKey)
        case .unknown: nil
        }
    }

    private func sealed(_ write: EntryWrite, with dataKey: Keyring.DataKey?) throws -> EntryWrite {
        guard let dataKey else { return write }
        var sealed = write
        // No prompt in clear beside a sealed body (migration 0014 clears it too, whoever writes).
        sealed.promptDigest = nil
        sealed.sealed = try Sealing.seal(body: write.body.bytes, encoding: write.body.encoding, metadata: write.metadata,
                                     namespace: write.namespace.name, key: write.key.bytes, etag: write.body.etag,
                                     with: dataKey)
        return sealed
    }

    /// As `put`, without waiting: `completion` gets the outcome once the entry is committed
    /// (on the thread that committed it; it must not block), with the primary's WAL position
    /// after the commit when `tracksPositions` (nil otherwise, or when it could not be read).
    /// `committed` is told first, as soon as the outcome is known, before the position is read;
    /// `localChanges` before either, whatever the outcome (an unknown one may have committed).
    ///
    /// `offLoop`: the caller may not block (an event loop); what would (reading the
    /// namespace's key, committing a group) is handed to it. A write it cannot take is
    /// refused as a full queue would refuse it (nothing stored).
    public func submit(_ write: EntryWrite, committed: (@Sendable (Result<WriteOutcome, any Error>) -> Void)?,
                       offLoop: BlockingWork?,
                       completion: @escaping @Sendable (Result<WriteOutcome, any Error>, String?) -> Void) {
        let changes = localChanges, keyring = keyring
        let known: @Sendable (Result<WriteOutcome, any Error>) -> Void = { result in
            if case .failure(let error) = result { Self.forgetSealingKeys(after: error, keyring) }
            changes.changed(write.namespace.name, write.key.bytes)
            committed?(result)
        }
        let stored: EntryWrite
        do {
            if let offLoop {
                guard let sealed = try sealedWithoutBlocking(write) else {
                    // The namespace's key is read on a worker, and the write goes on from there.
                    let handed = offLoop { [self] in submit(write, committed: committed, completion: completion) }
                    if !handed {
                        known(.failure(WriteQueueFull()))
                        completion(.failure(WriteQueueFull()), nil)
                    }
                    return
                }
                stored = sealed
            } else {
                stored = try sealed(write)
            }
        } catch {
            known(.failure(error))
            completion(.failure(error), nil)
            return
        }
        writes.submit(stored, into: self, committed: known, offLoop: offLoop) { result, position in
            completion(result, position?.description)
        }
    }

    /// This replica sealed with what it knew, and the namespace was encrypted since: it reads
    /// the keys again, so the client's retry is sealed.
    static func forgetSealingKeys(after error: any Error, _ keyring: Keyring) {
        if let error = error as? PostgresError, error.sqlState == .plainInEncryptedNamespace { keyring.forgetSealingKeys() }
    }

    func forgettingStaleSealingKeys<T>(_ body: () throws -> T) throws -> T {
        do { return try body() } catch {
            Self.forgetSealingKeys(after: error, keyring)
            throw error
        }
    }

    /// The time a write is stamped with: NULL for the database's clock (the statements take
    /// `coalesce($n, now())`), or a test clock's time.
    var writeStamp: PostgresValue { clock.stampsWithDatabaseClock ? .null : .timestamp(clock.now()) }

    /// "Now" as the stamps are made: the database's clock (one round trip), or the test's.
    func stampNow(on connection: PostgresConnection) throws -> Date {
        guard clock.stampsWithDatabaseClock else { return clock.now() }
        guard let now = try connection.query("SELECT now() AS now").first?.date("now") else {
            throw PostgresError(.decoding, serverMessage: "SELECT now() returned nothing")
        }
        return now
    }

    /// One write in a statement (and a transaction) of its own.
    func putOne(_ write: EntryWrite) throws -> WriteOutcome {
        let condition = Self.condition(write.condition)
        let parameters: [PostgresValue] = [
            .text(write.namespace.name), .bytes(write.key.bytes), .bytes(write.storedBytes),
            .text(write.storedEncoding), .text(write.contentType), .int(write.body.identitySize),
            .text(write.body.etag), .optionalText(write.model), .optionalText(write.version),
            .optionalText(write.promptDigest), .textArray(write.tags), write.storedMetadata.map { .jsonb($0) } ?? .null,
            .int(write.inputTokens), .int(write.outputTokens), writeStamp,
            write.ttlSeconds.map { .int($0) } ?? .null, .int(policy.defaultTTL),
            write.writerTokenID.map { .int($0) } ?? .null, .text(condition.name), .textArray(condition.tags),
            .int(policy.storeHardCap), .double(policy.hardCapRatio), .int(write.staleWhileRevalidate),
        ]
        // A deadlock or serialization failure rolled the write back whole: run it again.
        var attempt = 1
        while true {
            do {
                let row = try pool.withConnection { connection in
                    try connection.query(Self.putEntry, parameters).first
                }
                guard let row else { throw PostgresError(.decoding, serverMessage: "tc_put_entry returned no row") }
                return try outcome(row)
            } catch let error as PostgresError where attempt < 3 && error.isRetryableConflict {
                attempt += 1
            }
        }
    }

    /// The condition as tc_put_entry takes it: a name and the If-Match tags.
    static func condition(_ condition: WriteCondition) -> (name: String, tags: [String]) {
        switch condition {
        case .none: ("none", [])
        case .absent: ("absent", [])
        case .match(let tags): ("match", tags)
        }
    }

    func outcome(_ row: PostgresRow) throws -> WriteOutcome {
        guard let outcome = try row.string("outcome") else {
            throw PostgresError(.decoding, serverMessage: "tc_put_entry returned no outcome")
        }
        switch outcome {
        case "created": return .created(expiresAt: try row.date("expires_at") ?? clock.now())
        case "replaced": return .replaced(expiresAt: try row.date("expires_at") ?? clock.now())
        case "precondition_failed": return .preconditionFailed
        default: return .storeFull
        }
    }

    /// Deletes one entry; false when it was absent.
    public func delete(_ namespace: Namespace, _ key: EntryKey) throws -> Bool {
        defer { localChanges.changed(namespace.name, key.bytes) }
        return try pool.withConnection { connection in
            try connection.query(Self.deleteEntry, [.text(namespace.name), .bytes(key.bytes), writeStamp])
                .affectedRows > 0
        }
    }

    /// A read row, its body and metadata opened if sealed.
    enum Decoded {
        case entry(StoredEntry)
        /// Sealed, and it must be opened off the loop (`pool` was nil): see `Keyring.Opened.offLoop`.
        case offLoop
        /// Sealed, and it does not open (logged and counted by the keyring).
        case broken
    }

    static func decode(_ row: PostgresRow, keyring: Keyring, pool: ConnectionPool?) throws -> Decoded {
        guard let id = try row.int("id"), let namespace = try row.string("namespace"), let key = try row.bytes("key"),
              let stored = try row.bytes("body"), let storedEncoding = try row.string("encoding"),
              let contentType = try row.string("content_type"), let identitySize = try row.int("identity_size"),
              let etag = try row.string("etag"), let updatedAt = try row.date("updated_at"),
              let expiresAt = try row.date("expires_at") else {
            throw PostgresError(.decoding, serverMessage: "entry row has unexpected NULLs")
        }
        let body: [UInt8], encoding: BodyEncoding, metadata: String?
        switch try keyring.open(namespace: namespace, key: key, etag: etag, body: stored, encoding: storedEncoding,
                            metadata: try row.string("metadata"), pool: pool) {
        case .plain(let opened, let inner, let openedMetadata): (body, encoding, metadata) = (opened, inner, openedMetadata)
        case .offLoop: return .offLoop
        case .broken: return .broken
        }
        return .entry(StoredEntry(id: Int64(id), namespace: namespace, key: key, body: body, encoding: encoding,
                                  contentType: contentType, identitySize: identitySize, etag: etag,
                                  model: try row.string("model"), metadata: metadata,
                                  inputTokens: try row.int("input_tokens") ?? 0, outputTokens: try row.int("output_tokens") ?? 0,
                                  updatedAt: updatedAt, expiresAt: expiresAt,
                                  // An older schema's row has no window; a negative one (written by hand) is none.
                                  staleWhileRevalidate: max(0, (try? row.int("stale_while_revalidate")) ?? 0)))
    }
}
