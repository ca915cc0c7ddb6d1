import Foundation
import Locking

/// Where entries live, as the service sees them: the seam between the routes and the
/// database. `CacheStore.EntryStore` is the PostgreSQL store production runs on;
/// `MemoryStore` keeps the same semantics in memory for the domain's tests and the request
/// fuzzer (the integration tests keep running on PostgreSQL: this seam does not replace them).
///
/// Every method may block (a database round trip) and must not be called on an event loop,
/// except `submit` given `offLoop`, which only queues. Errors are the store's own (a database
/// error, a full write queue); the service maps them to problems.
public protocol EntryStorage: AnyObject, Sendable {
    var policy: CachePolicy { get }
    var clock: any Clock { get }
    /// Told of every change this process makes through the store (committed, or of unknown
    /// outcome), before the change's caller hears of it: the one place kept copies go stale.
    var localChanges: LocalChanges { get }
    /// Whether writes answer a commit position (a standby serves reads; see `commitPosition`).
    var tracksPositions: Bool { get }

    /// The entry under `key`, whatever its freshness; nil when absent.
    func fetch(_ namespace: Namespace, _ key: EntryKey) throws -> StoredEntry?
    /// The stored entries among `keys`, whatever their freshness, possibly without bodies or
    /// metadata: what counting a hit on each needs (a client's reported local hits).
    func hitSubjects(_ namespace: Namespace, _ keys: [EntryKey]) throws -> [StoredEntry]
    /// True when report `seq` of `reporter` is newer than every one counted from it (and is
    /// now the last counted); false for a report counted already (a retry whose answer was lost).
    func claimHitReport(_ namespace: Namespace, reporter: String, seq: Int) throws -> Bool
    /// Stores `write` without waiting: `committed` is told the outcome as soon as it is known,
    /// then `completion` with the commit position when `tracksPositions` (nil otherwise, or
    /// when it could not be learned). Both run on the committing thread and must not block.
    /// `offLoop`: the caller may not block (an event loop); what would is handed to it. A write
    /// refused at once (a full queue) is told so on the calling thread.
    func submit(_ write: EntryWrite, committed: (@Sendable (Result<WriteOutcome, any Error>) -> Void)?,
                offLoop: BlockingWork?,
                completion: @escaping @Sendable (Result<WriteOutcome, any Error>, _ position: String?) -> Void)
    /// Deletes one fresh entry; false when there was none (an expired entry is absent to writes).
    func delete(_ namespace: Namespace, _ key: EntryKey) throws -> Bool
    /// Deletes the namespace's entries matching `predicate`: how many went and their stored bytes.
    func evict(_ namespace: Namespace, _ predicate: EvictionPredicate) throws -> (entries: Int, bytes: Int)

    /// Stores dumped entries under `policy`; the outcomes in the order given.
    func importEntries(_ entries: [DumpedEntry], policy: ImportConflictPolicy) throws -> [ImportOutcome]
    /// One page of an export in (namespace, key) order: up to `limit` entries after `after`
    /// (past the first, only while their bodies fit `byteBudget`), handed to `emit`.
    func exportPage(namespace: Namespace?, since: String?, after: (namespace: String, key: [UInt8])?, limit: Int,
                    byteBudget: Int, _ emit: (DumpedEntry) throws -> Void) throws
        -> (last: (namespace: String, key: [UInt8])?, more: Bool)

    /// Totals of a namespace (nil: the whole store) and its `top` most-hit entries.
    func stats(_ namespace: Namespace?, top: Int) throws -> CacheStats
    func settings(_ namespace: Namespace) throws -> NamespaceSettings
    func setSettings(_ namespace: Namespace, _ settings: NamespaceSettings) throws
    /// Entries and bytes by namespace (those with none may be left out).
    func namespaceTotals() throws -> [String: (entries: Int, identityBytes: Int, storedBytes: Int)]
    /// Namespaces with settings.
    func configuredNamespaces() throws -> Set<String>
    /// The totals (entries, bytes, lookups, tokens saved; no top entries) of every namespace
    /// whose name matches `pattern` (a token's: `*` matches any run), in name order, at most
    /// `limit` of them.
    func cacheTotals(matching pattern: String, limit: Int) throws -> [(namespace: String, stats: CacheStats)]
    /// A page of `namespace`'s entries as the entry browser lists them (key order; expired
    /// ones too, until evicted), without counting a lookup.
    func listEntries(_ namespace: Namespace, _ query: EntryQuery) throws -> EntryPage
    /// The namespace's stats history over `range`, every point present, oldest first.
    func history(_ namespace: Namespace, _ range: HistoryRange) throws -> [StatsPoint]

    /// Up to `limit` changes of `namespace` after `cursor`; throws `FeedCursorError` for a
    /// cursor that cannot be followed.
    func changes(_ namespace: Namespace, after cursor: Int64, limit: Int, bodies: Bool) throws -> FeedPage
    /// The feed's newest cursor: a follower that starts from it sees every later change.
    func feedHead() throws -> Int64
    /// The feed's newest cursor without waiting for any numbering (`since=now`): changes
    /// committed before it and numbered later land past it, which a follower replays harmlessly.
    func feedHeadNow() throws -> Int64
    /// The position past every commit so far, as clients send it back (`TeamCache-Min-Position`).
    func commitPosition() throws -> String
}

/// Miss leases: one caller fills a missed key while the others wait for it.
public protocol LeaseStorage: AnyObject, Sendable {
    /// A lease of `seconds` on (namespace, key) for `holder`, unless a live one is held; with
    /// `unlessFilled`, withdrawn again when the key now holds such a fresh entry (`.filled`).
    func grant(_ namespace: Namespace, _ key: EntryKey, seconds: Int, holder: Int64?, unlessFilled: FillCheck?) throws
        -> LeaseGrant
    /// A refresh lease (stale-while-revalidate), or nil when one is held or cannot be asked for.
    func refresh(_ namespace: Namespace, _ key: EntryKey, seconds: Int, holder: Int64?) -> Lease?
    /// Whether this process knows (namespace, key) to be leased right now, without asking.
    func isKnownHeld(_ namespace: Namespace, _ key: EntryKey) -> Bool
    /// Completes the lease `id` (its holder's write landed); false when unknown or finished.
    @discardableResult
    func complete(_ namespace: Namespace, _ key: EntryKey, id: String, holder: Int64?) throws -> Bool
    /// Gives the lease `id` back (its holder's call failed); false when unknown or finished.
    func release(_ namespace: Namespace, _ key: EntryKey, id: String, holder: Int64?) throws -> Bool
    /// Gives back, in the background, a lease whose grant never reached its caller.
    func releaseUndelivered(_ namespace: Namespace, _ key: EntryKey, _ lease: Lease, holder: Int64?)
    /// Counts a grant that went to a caller who waited for the key.
    func countHandOver()
}

extension LeaseStorage {
    /// A lease, with no check for a fill (a refresh lease, a test).
    public func grant(_ namespace: Namespace, _ key: EntryKey, seconds: Int, holder: Int64?) throws -> LeaseGrant {
        try grant(namespace, key, seconds: seconds, holder: holder, unlessFilled: nil)
    }
}

/// The listeners of one store's changes in this process (the near-cache, the shared feed
/// pages). A store tells them of each change before its caller hears of it, so a read after
/// a 2xx on this replica never answers what the change replaced.
public final class LocalChanges: Sendable {
    public typealias Listener = @Sendable (_ namespace: String, _ key: [UInt8]?) -> Void
    private let listeners = Locked<[Listener]>([])

    public init() {}

    /// Adds a listener (at start, before requests are served).
    public func listen(_ listener: @escaping Listener) { listeners.withLock { $0.append(listener) } }

    /// Tells every listener of a change to `key` of `namespace` (nil: the whole namespace).
    public func changed(_ namespace: String, _ key: [UInt8]?) {
        for listener in listeners.value { listener(namespace, key) }
    }
}

/// Hands work that may block to another thread (from an event loop: to a worker); false when
/// it cannot take it now (its queue is full).
public typealias BlockingWork = @Sendable (_ work: @escaping @Sendable () -> Void) -> Bool

extension EntryStorage {
    /// `submit` from a thread that may block (it may commit the write's group itself).
    public func submit(_ write: EntryWrite, committed: (@Sendable (Result<WriteOutcome, any Error>) -> Void)?,
                       completion: @escaping @Sendable (Result<WriteOutcome, any Error>, _ position: String?) -> Void) {
        submit(write, committed: committed, offLoop: nil, completion: completion)
    }
}
