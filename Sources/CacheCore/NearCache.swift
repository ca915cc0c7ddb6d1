import Foundation
import Locking

/// Hot entries kept in this process's memory, so a hit needs no PostgreSQL round trip.
///
/// Correct across replicas by invalidation, never by time: every committed write, delete
/// or eviction on any replica notifies its key (migration 0007), and the key listener drops
/// it here; a write on this replica drops it before its `2xx` is sent. While the listener
/// is down the near-cache is off (`enabled` false: every read goes to the database) and it
/// is emptied when it comes back, since notifications may have been missed.
///
/// A read that went to the database may keep what it read only if its key was not
/// invalidated since the read began (`sequence` noted before the read, `admit(_:since:)`
/// after): a fill racing a write cannot put back the version the write replaced.
///
/// Only what a hit needs is kept: the entry as stored (freshness, `Age`, ETag and the rest
/// are computed from it at answer time, exactly as for an entry just read). Bounded by bytes
/// (least recently used out first, by CLOCK's second chance); an entry is admitted on its second read within a while
/// (a one-hit wonder does not push out a hot entry); entries over `maxEntryBytes` are never
/// kept. Thread-safe (one lock; every operation but emptying is O(1)). Served only while
/// heartbeats come back through the notifications (`confirmLive`).
public final class NearCache: Sendable {
    struct Key: Hashable {
        let namespace: String
        let key: [UInt8]

        /// The key's bytes hashed in one call: the synthesized hash combines them one by one,
        /// which showed in a profile of near-cache hits.
        func hash(into hasher: inout Hasher) {
            hasher.combine(namespace)
            hasher.combine(key.count)
            key.withUnsafeBytes { hasher.combine(bytes: $0) }
        }
    }

    final class Node {
        let key: Key
        var entry: StoredEntry
        var cost: Int
        /// The namespace's generation when kept: a namespace-wide invalidation bumps it, and
        /// an older node is stale (dropped when next met), so the wipe itself is O(1).
        let generation: UInt64
        /// Read since it last came round the eviction (a second chance instead of a move to
        /// the front on every hit, which would relink the list on the hottest path).
        var referenced = false
        // Strong both ways (no weak-reference traffic per hit): every node is unlinked when
        // it leaves, so no cycle outlives it.
        var newer: Node?
        var older: Node?

        init(key: Key, entry: StoredEntry, cost: Int, generation: UInt64) {
            (self.key, self.entry, self.cost, self.generation) = (key, entry, cost, generation)
        }
    }

    public let budget: Int
    public let maxEntryBytes: Int
    static let rememberedNamespaces = 10_000
    static let seenOnceBound = 100_000

    /// Everything that changes, reachable only inside `state`'s lock.
    struct State {
        var nodes: [Key: Node] = [:]
        /// The least and the most recently used.
        var oldest: Node?
        var newest: Node?
        var bytes = 0
        var isEnabled = false
        /// Served only until then (uptime seconds): each heartbeat that made the round trip
        /// through PostgreSQL's notifications moves it on. If they stop arriving (the listener's
        /// connection is silently dead, or its loop stalled) kept entries stop being served.
        var liveUntil: TimeInterval = 0
        /// Namespace-wide invalidations, by namespace.
        var generations: [String: UInt64] = [:]
        /// Keys read once recently (by hash), for admission; reset when it reaches its bound.
        var seenOnce = Set<Int>()
        /// Invalidations: a fill may keep what it read only if its key did not change since.
        var invalidations = RecentChanges(bound: 100_000)
        /// Counted for the metrics: reads answered here, and entries admitted.
        var hits = 0
        var admissions = 0

        func serves(at now: TimeInterval) -> Bool { isEnabled && now < liveUntil }

        mutating func noteSeen(_ hash: Int) {
            if seenOnce.count >= NearCache.seenOnceBound { seenOnce.removeAll() }
            seenOnce.insert(hash)
        }

        /// Least recently used out first, with a second chance for entries read since their
        /// last turn (CLOCK): each pass clears a bit, so this ends.
        mutating func evict(over budget: Int) {
            while bytes > budget, let victim = oldest {
                if victim.referenced && victim !== newest {
                    victim.referenced = false
                    touch(victim)
                } else {
                    remove(victim)
                }
            }
        }

        mutating func removeAll() {
            invalidations.recordEverything()
            nodes = [:]
            generations = [:]
            // Unlink every node: the links are strong both ways.
            var node = oldest
            while let current = node {
                node = current.newer
                current.newer = nil
                current.older = nil
            }
            oldest = nil
            newest = nil
            bytes = 0
        }

        mutating func touch(_ node: Node) {
            guard node !== newest else { return }
            unlink(node)
            append(node)
        }

        mutating func append(_ node: Node) {
            node.older = newest
            node.newer = nil
            newest?.newer = node
            newest = node
            if oldest == nil { oldest = node }
        }

        mutating func unlink(_ node: Node) {
            let older = node.older, newer = node.newer
            older?.newer = newer
            newer?.older = older
            if oldest === node { oldest = newer }
            if newest === node { newest = older }
            node.older = nil
            node.newer = nil
        }

        mutating func remove(_ node: Node) {
            unlink(node)
            nodes[node.key] = nil
            bytes -= node.cost
        }
    }

    private let state = Locked(State())

    /// `budget` 0: never used.
    public init(budget: Int, maxEntryBytes: Int) {
        self.budget = max(0, budget)
        self.maxEntryBytes = maxEntryBytes
    }

    deinit { state.withLock { $0.removeAll() } }

    /// Whether reads may be answered here (the listener is up).
    public var enabled: Bool {
        let now = Self.now
        return state.withLock { $0.serves(at: now) }
    }

    /// Turns the near-cache off (the listener is down), emptied.
    public func disable() {
        state.withLock { state in
            state.removeAll()
            state.isEnabled = false
        }
    }

    /// A heartbeat came back through the notifications: kept entries may be served for
    /// `seconds` more. After a silence (or when off), it starts empty: notifications sent
    /// meanwhile may have been missed.
    public func confirmLive(for seconds: TimeInterval) {
        let now = Self.now
        guard budget > 0 else { return }
        state.withLock { state in
            if !state.serves(at: now) {
                state.removeAll()
                state.isEnabled = true
            }
            state.liveUntil = now + seconds
        }
    }

    /// Everything may have changed (a TRUNCATE): empty, still on.
    public func invalidateAll() {
        state.withLock { $0.removeAll() }
    }

    private static var now: TimeInterval { Uptime.coarse }

    public var heldBytes: Int { state.withLock { $0.bytes } }
    public var count: Int { state.withLock { $0.nodes.count } }
    public var counters: (hits: Int, admissions: Int) { state.withLock { ($0.hits, $0.admissions) } }

    /// The invalidation count now: note it before reading an entry from the database.
    public var sequence: UInt64 { state.withLock { $0.invalidations.count } }

    /// The kept entry under (namespace, key), if any (and marks it recently used).
    public func entry(_ namespace: String, _ key: [UInt8]) -> StoredEntry? {
        let now = Self.now
        let wanted = Key(namespace: namespace, key: key)
        return state.withLock { state in
            guard state.serves(at: now), let node = state.nodes[wanted] else { return nil }
            guard node.generation == state.generations[namespace, default: 0] else {
                state.remove(node)
                return nil
            }
            node.referenced = true
            state.hits += 1
            return node.entry
        }
    }

    /// Keeps `entry`, read from the database by a read that noted `since` before it began,
    /// unless its key was invalidated meanwhile, it is too large, or it is its first read.
    public func admit(_ entry: StoredEntry, since: UInt64) {
        let cost = entry.body.count + entry.key.count + entry.namespace.utf8.count + entry.contentType.utf8.count
            + (entry.responseFields?.count ?? 0) + (entry.inflatedBody?.count ?? 0)
            + entry.etag.utf8.count + (entry.metadata?.utf8.count ?? 0) + (entry.model?.utf8.count ?? 0) + 160
        guard cost <= maxEntryBytes, cost <= budget else { return }
        let key = Key(namespace: entry.namespace, key: entry.key)
        let now = Self.now, budget = self.budget
        state.withLock { state in
            guard state.serves(at: now), !state.invalidations.changed(key.namespace, key.key, since: since) else {
                return
            }
            let generation = state.generations[key.namespace, default: 0]
            if let node = state.nodes[key], node.generation == generation {
                state.bytes += cost - node.cost
                (node.entry, node.cost) = (entry, cost)
                state.touch(node)
            } else {
                if let stale = state.nodes[key] { state.remove(stale) }
                guard state.seenOnce.remove(key.hashValue) != nil else {
                    state.noteSeen(key.hashValue)
                    return
                }
                let node = Node(key: key, entry: entry, cost: cost, generation: generation)
                state.nodes[key] = node
                state.append(node)
                state.bytes += cost
                state.admissions += 1
            }
            state.evict(over: budget)
        }
    }

    /// Keeps `inflated`, the identity bytes of `entry`'s gzip body, with its node, if the
    /// node still holds that very read (a write may have dropped or replaced it since the hit
    /// began, or wiped its namespace: such a node is only dropped when next met) and the node
    /// stays within the entry limit: the bytes count toward the budget as the node's own.
    /// Whether they were kept (false when the node already has them).
    @discardableResult
    public func attach(inflated: [UInt8], to entry: StoredEntry) -> Bool {
        let (budget, limit) = (self.budget, min(self.budget, maxEntryBytes))
        return state.withLock { state in
            guard let node = state.nodes[Key(namespace: entry.namespace, key: entry.key)],
                  node.generation == state.generations[entry.namespace, default: 0],
                  node.entry.isSameRead(as: entry), node.entry.inflatedBody == nil,
                  node.cost + inflated.count <= limit else { return false }
            node.entry.inflatedBody = inflated
            node.cost += inflated.count
            state.bytes += inflated.count
            state.evict(over: budget)
            return true
        }
    }

    /// Whether a database read of (namespace, key) would be kept (it was read once before).
    /// Reads from a standby are never kept (see `LoopReads`), so such a read goes to the primary.
    public func wouldKeep(_ namespace: String, _ key: [UInt8]) -> Bool {
        let hash = Key(namespace: namespace, key: key).hashValue
        return state.withLock { $0.isEnabled && $0.seenOnce.contains(hash) }
    }

    /// Counts a read not to be kept (one from a standby) toward admission: the key's next
    /// read, from the primary, is kept.
    public func noteRead(_ namespace: String, _ key: [UInt8]) {
        let hash = Key(namespace: namespace, key: key).hashValue
        state.withLock { state in
            guard state.isEnabled else { return }
            state.noteSeen(hash)
        }
    }

    /// Drops (namespace, key), or every key of the namespace when `key` is nil.
    public func invalidate(_ namespace: String, _ key: [UInt8]?) {
        state.withLock { state in
            state.invalidations.record(namespace, key)
            if let key {
                if let node = state.nodes[Key(namespace: namespace, key: key)] { state.remove(node) }
            } else if state.generations.count >= Self.rememberedNamespaces {
                state.removeAll()  // bounded: past that many wiped namespaces, start over
            } else {
                state.generations[namespace, default: 0] &+= 1
            }
        }
    }
}
