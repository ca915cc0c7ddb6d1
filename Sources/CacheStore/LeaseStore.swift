import CacheCore
import Cryptography
import Foundation
import Observability
import Postgres

/// Miss leases in PostgreSQL (migration 0006), on the database's clock so every replica
/// agrees on expiry. See docs/consistency.md for how the statements meet.
public final class LeaseStore: LeaseStorage {
    /// One statement: a new lease, or one over an expired lease (`took_over`), or nothing
    /// when a live one is held (then its expiry, as of this statement's snapshot).
    static let grant = """
        WITH granted AS (
            INSERT INTO leases AS l (namespace, key, id_digest, holder, granted_at, expires_at)
            VALUES ($1, $2, $3, $4, now(), now() + make_interval(secs => $5::int8))
            ON CONFLICT (namespace, key) DO UPDATE
               SET id_digest = excluded.id_digest, holder = excluded.holder, granted_at = excluded.granted_at,
                   expires_at = excluded.expires_at
             WHERE l.expires_at <= now()
            RETURNING (l.xmax <> 0) AS took_over)
        SELECT true AS granted, g.took_over, 0::int8 AS remaining FROM granted g
        UNION ALL
        SELECT false, false, ceil(extract(epoch FROM l.expires_at - now()))::int8 FROM leases l
        WHERE l.namespace = $1 AND l.key = $2 AND NOT EXISTS (SELECT 1 FROM granted)
        """
    /// A lease just granted, withdrawn when the key holds a fresh entry after all: the caller
    /// read before a fill committed and its lease was completed, and would otherwise pay for
    /// the answer again. A statement of its own, so its snapshot is taken after the grant's:
    /// the grant found the filler's lease gone, so this sees the entry its filler committed
    /// first. Fresh by the service's clock (`$4`), which judged the read; of the read's model
    /// (`$6`) unless any entry answers it (`$5`): an entry the read does not take (a raw PUT
    /// under a descriptor's key) must not take the lease away.
    static let withdrawIfFilled = """
        DELETE FROM leases l WHERE l.namespace = $1 AND l.key = $2 AND l.id_digest = $3
           AND EXISTS (SELECT 1 FROM entries e WHERE e.namespace = $1 AND e.key = $2 AND e.expires_at > $4
                       AND ($5::bool OR e.model IS NOT DISTINCT FROM $6::text))
        RETURNING 1 AS withdrawn
        """
    /// Ends a lease, for its holder only: `live` says whether it had not yet run out.
    static let finish = """
        DELETE FROM leases WHERE namespace = $1 AND key = $2 AND id_digest = $3 AND holder IS NOT DISTINCT FROM $4
        RETURNING expires_at > now() AS live
        """
    static let sweep = "DELETE FROM leases WHERE expires_at <= now()"


    private let pool: ConnectionPool
    private let clock: any Clock
    private let outcomes: CounterFamily?
    private let held = HeldLeases()

    public init(pool: ConnectionPool, metrics: StoreMetrics? = nil, clock: any Clock = SystemClock()) {
        self.pool = pool
        self.clock = clock
        outcomes = metrics.map { $0.registry.counter($0.leases) }
    }

    /// A lease of `seconds` on (namespace, key) for `holder`, unless a live one is held.
    public func grant(_ namespace: Namespace, _ key: EntryKey, seconds: Int, holder: Int64?,
                      unlessFilled fill: FillCheck?) throws -> LeaseGrant {
        let id = Lease.newID()
        let digest = SHA256.hash(id)
        let (row, withdrawn) = try pool.withConnection { connection in
            let row = try connection.query(Self.grant, [
                .text(namespace.name), .bytes(key.bytes), .bytes(digest),
                holder.map { .int($0) } ?? .null, .int(min(max(seconds, 1), Lease.maxSeconds)),
            ]).first
            guard let fill, try row?.bool("granted") == true else { return (row, false) }
            let model: PostgresValue
            if case .model(let name) = fill { model = name.map { .text($0) } ?? .null } else { model = .null }
            // A withdrawal that fails keeps the grant: the lease is the caller's, as before the
            // check (thrown, it would be held by no one until it ran out).
            let withdrawn = (try? connection.query(Self.withdrawIfFilled, [
                .text(namespace.name), .bytes(key.bytes), .bytes(digest), .timestamp(clock.now()),
                .bool(fill == .anyEntry), model,
            ]))?.first != nil
            return (row, withdrawn)
        }
        if withdrawn { return .filled }
        guard let row, try row.bool("granted") == true else {
            // Held; or just granted to another and not visible to this snapshot yet.
            return .held(retryAfter: max(1, try row?.int("remaining") ?? 1))
        }
        if try row.bool("took_over") == true { outcomes?.inc(["expired"]) }
        outcomes?.inc(["granted"])
        return .granted(Lease(id: id, expiresIn: seconds))
    }

    /// A refresh lease (stale-while-revalidate) of `seconds` on (namespace, key), or nil
    /// when a live lease is held, by what this process knows or else by asking PostgreSQL.
    /// A failure to ask is nil too: the stale answer is served either way, and the next
    /// stale answer asks again.
    public func refresh(_ namespace: Namespace, _ key: EntryKey, seconds: Int, holder: Int64?) -> Lease? {
        guard !held.isHeld(namespace.name, key.bytes) else { return nil }
        let generation = held.generation
        switch try? grant(namespace, key, seconds: seconds, holder: holder) {
        case .granted(let lease)?:
            held.note(namespace.name, key.bytes, seconds: lease.expiresIn, since: generation)
            return lease
        case .held(let retryAfter)?:
            held.note(namespace.name, key.bytes, seconds: retryAfter, since: generation)
            return nil
        case .filled?, nil:
            return nil
        }
    }

    /// Whether this process knows (namespace, key) to be leased right now, without asking.
    public func isKnownHeld(_ namespace: Namespace, _ key: EntryKey) -> Bool {
        held.isHeld(namespace.name, key.bytes)
    }

    /// The key changed or its lease ended (a notification): what was known of its lease is
    /// stale. `key` nil: every key of the namespace; `namespace` nil: every key.
    public func forgetHeld(namespace: String?, key: [UInt8]?) {
        guard let namespace else { return held.forgetAll() }
        held.forget(namespace, key)
    }

    /// Completes the lease `id` (its holder's write landed); false when it is unknown, not
    /// this holder's, or already finished. The write stands either way.
    @discardableResult
    public func complete(_ namespace: Namespace, _ key: EntryKey, id: String, holder: Int64?) throws -> Bool {
        try finish(namespace, key, id: id, holder: holder, outcome: "completed")
    }

    /// Gives the lease `id` back (the holder's call failed); false when it is unknown, not
    /// this holder's, or already finished.
    public func release(_ namespace: Namespace, _ key: EntryKey, id: String, holder: Int64?) throws -> Bool {
        try finish(namespace, key, id: id, holder: holder, outcome: "released")
    }

    /// Gives back, in the background, a lease whose grant never reached its caller (the
    /// request was given up at its deadline, or its client left): nobody holds its id, and
    /// without this every caller would be told "pending" until it runs out. One serial queue:
    /// these are rare, and a database that is down only delays them.
    public func releaseUndelivered(_ namespace: Namespace, _ key: EntryKey, _ lease: Lease, holder: Int64?) {
        Self.undeliveredQueue.async { [self] in
            if (try? finish(namespace, key, id: lease.id, holder: holder, outcome: "undelivered")) == true { return }
            // Not released (the database was unavailable): it runs out by itself, as any lease.
        }
    }

    private static let undeliveredQueue = DispatchQueue(label: "teamcache.leases.undelivered")

    private func finish(_ namespace: Namespace, _ key: EntryKey, id: String, holder: Int64?, outcome: String) throws
        -> Bool {
        let row = try pool.withConnection { connection in
            try connection.query(Self.finish, [
                .text(namespace.name), .bytes(key.bytes), .bytes(SHA256.hash(id)), holder.map { .int($0) } ?? .null,
            ]).first
        }
        guard let row else { return false }
        held.forget(namespace.name, key.bytes)
        outcomes?.inc([try row.bool("live") == true ? outcome : "expired"])
        return true
    }

    /// Counts a grant that went to a caller who waited for the key (the previous holder gave
    /// the lease back or let it run out): a hand-over.
    public func countHandOver() { outcomes?.inc(["handed_over"]) }

    /// Deletes expired leases (the eviction job); returns how many.
    @discardableResult
    public func sweep(on connection: PostgresConnection) throws -> Int {
        let swept = try connection.query(Self.sweep).affectedRows
        if swept > 0 { outcomes?.inc(["expired"], by: Double(swept)) }
        return swept
    }
}
