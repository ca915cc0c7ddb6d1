import Foundation

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
public final class NearCache: @unchecked Sendable {
    // @unchecked: every field is guarded by `lock`.
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

    private final class Node {
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
    private let lock = NSLock()
    private var nodes: [Key: Node] = [:]
    /// The least and the most recently used.
    private var oldest: Node?
    private var newest: Node?
    private var bytes = 0
    private var isEnabled = false
    /// Served only until then (uptime seconds): each heartbeat that made the round trip
    /// through PostgreSQL's notifications moves it on. If they stop arriving (the listener's
    /// connection is silently dead, or its loop stalled) kept entries stop being served.
    private var liveUntil: TimeInterval = 0
    /// Namespace-wide invalidations, by namespace.
    private var generations: [String: UInt64] = [:]
    static let rememberedNamespaces = 10_000
    /// Keys read once recently (by hash), for admission; reset when it reaches its bound.
    private var seenOnce = Set<Int>()
    static let seenOnceBound = 100_000
    /// Invalidations: a fill may keep what it read only if its key did not change since.
    private var invalidations = RecentChanges(bound: 100_000)
    /// Counted for the metrics: reads answered here, and entries admitted.
    private(set) var hits = 0
    private(set) var admissions = 0

    /// `budget` 0: never used.
    public init(budget: Int, maxEntryBytes: Int) {
        self.budget = max(0, budget)
        self.maxEntryBytes = maxEntryBytes
    }

    /// Whether reads may be answered here (the listener is up).
    public var enabled: Bool {
        let now = Self.now
        return lock.withLock { isEnabled && now < liveUntil }
    }

    /// Turns the near-cache off (the listener is down), emptied.
    public func disable() {
        lock.withLock {
            removeAll()
            isEnabled = false
        }
    }

    /// A heartbeat came back through the notifications: kept entries may be served for
    /// `seconds` more. After a silence (or when off), it starts empty: notifications sent
    /// meanwhile may have been missed.
    public func confirmLive(for seconds: TimeInterval) {
        let now = Self.now
        lock.withLock {
            guard budget > 0 else { return }
            if !isEnabled || now >= liveUntil {
                removeAll()
                isEnabled = true
            }
            liveUntil = now + seconds
        }
    }

    /// Everything may have changed (a TRUNCATE): empty, still on.
    public func invalidateAll() {
        lock.withLock { removeAll() }
    }

    private static var now: TimeInterval { ProcessInfo.processInfo.systemUptime }

    public var heldBytes: Int { lock.withLock { bytes } }
    public var count: Int { lock.withLock { nodes.count } }
    public var counters: (hits: Int, admissions: Int) { lock.withLock { (hits, admissions) } }

    /// The invalidation count now: note it before reading an entry from the database.
    public var sequence: UInt64 { lock.withLock { invalidations.count } }

    /// The kept entry under (namespace, key), if any (and marks it recently used).
    public func entry(_ namespace: String, _ key: [UInt8]) -> StoredEntry? {
        let now = Self.now
        return lock.withLock {
            guard isEnabled, now < liveUntil, let node = nodes[Key(namespace: namespace, key: key)] else { return nil }
            guard node.generation == generations[namespace, default: 0] else {
                remove(node)
                return nil
            }
            node.referenced = true
            hits += 1
            return node.entry
        }
    }

    /// Keeps `entry`, read from the database by a read that noted `since` before it began,
    /// unless its key was invalidated meanwhile, it is too large, or it is its first read.
    public func admit(_ entry: StoredEntry, since: UInt64) {
        let cost = entry.body.count + entry.key.count + entry.namespace.utf8.count + entry.contentType.utf8.count
            + entry.etag.utf8.count + (entry.metadata?.utf8.count ?? 0) + (entry.model?.utf8.count ?? 0) + 160
        guard cost <= maxEntryBytes, cost <= budget else { return }
        let key = Key(namespace: entry.namespace, key: entry.key)
        let now = Self.now
        lock.withLock {
            guard isEnabled, now < liveUntil, !invalidations.changed(key.namespace, key.key, since: since) else { return }
            let generation = generations[key.namespace, default: 0]
            if let node = nodes[key], node.generation == generation {
                bytes += cost - node.cost
                (node.entry, node.cost) = (entry, cost)
                touch(node)
            } else {
                if let stale = nodes[key] { remove(stale) }
                guard seenOnce.remove(key.hashValue) != nil else {
                    if seenOnce.count >= Self.seenOnceBound { seenOnce.removeAll() }
                    seenOnce.insert(key.hashValue)
                    return
                }
                let node = Node(key: key, entry: entry, cost: cost, generation: generation)
                nodes[key] = node
                append(node)
                bytes += cost
                admissions += 1
            }
            evictOverBudget()
        }
    }

    /// Whether a database read of (namespace, key) would be kept (it was read once before).
    /// Reads from a standby are never kept (see `LoopReads`), so such a read goes to the primary.
    public func wouldKeep(_ namespace: String, _ key: [UInt8]) -> Bool {
        let hash = Key(namespace: namespace, key: key).hashValue
        return lock.withLock { isEnabled && seenOnce.contains(hash) }
    }

    /// Counts a read not to be kept (one from a standby) toward admission: the key's next
    /// read, from the primary, is kept.
    public func noteRead(_ namespace: String, _ key: [UInt8]) {
        let hash = Key(namespace: namespace, key: key).hashValue
        lock.withLock {
            guard isEnabled else { return }
            if seenOnce.count >= Self.seenOnceBound { seenOnce.removeAll() }
            seenOnce.insert(hash)
        }
    }

    /// Drops (namespace, key), or every key of the namespace when `key` is nil.
    public func invalidate(_ namespace: String, _ key: [UInt8]?) {
        lock.withLock {
            invalidations.record(namespace, key)
            if let key {
                if let node = nodes[Key(namespace: namespace, key: key)] { remove(node) }
            } else if generations.count >= Self.rememberedNamespaces {
                removeAll()  // bounded: past that many wiped namespaces, start over
            } else {
                generations[namespace, default: 0] &+= 1
            }
        }
    }

    // MARK: Under `lock`

    /// Least recently used out first, with a second chance for entries read since their last
    /// turn (CLOCK): each pass clears a bit, so this ends.
    private func evictOverBudget() {
        while bytes > budget, let victim = oldest {
            if victim.referenced && victim !== newest {
                victim.referenced = false
                touch(victim)
            } else {
                remove(victim)
            }
        }
    }

    deinit { removeAll() }

    private func removeAll() {
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

    private func touch(_ node: Node) {
        guard node !== newest else { return }
        unlink(node)
        append(node)
    }

    private func append(_ node: Node) {
        node.older = newest
        node.newer = nil
        newest?.newer = node
        newest = node
        if oldest == nil { oldest = node }
    }

    private func unlink(_ node: Node) {
        let older = node.older, newer = node.newer
        older?.newer = newer
        newer?.older = older
        if oldest === node { oldest = newer }
        if newest === node { newest = older }
        node.older = nil
        node.newer = nil
    }

    private func remove(_ node: Node) {
        unlink(node)
        nodes[node.key] = nil
        bytes -= node.cost
    }
}
