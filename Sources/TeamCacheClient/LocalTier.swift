import CacheKeys
import Foundation
import Locking

/// A cache-first tier inside `TeamCacheClient`, as the Python client's `LocalTier` (the same
/// words, the same rules, the same file format):
/// - a fresh local copy answers with no network call (`fromLocal`); otherwise the service is
///   asked with the copy's ETag (an unchanged answer costs a `304` / `not_modified`, not the
///   body) and the answer refreshes the copy;
/// - one task per namespace held follows its change feed (`/changes?wait=`) and drops a copy as
///   soon as a change to its key arrives, from any replica and any writer; the client's own
///   writes update the tier at once; a `410` clears the namespace. A namespace answers without
///   asking only while its follower is caught up and was heard from within `feedWait × 1.5`
///   seconds: one that is behind, failing or silent makes every read revalidate instead;
/// - while the service cannot be reached, a copy is served within the caller's `maxStale` or
///   the entry's stale-while-revalidate window, marked stale;
/// - local hits are reported to the service in batches (`POST …/hits`), so its stats count
///   them as hits, marked local;
/// - an encrypted namespace's answers are kept only with `keepEncrypted` (then in plaintext, in
///   memory and in the file).
/// `path`: a SQLite file that keeps copies and feed cursors across restarts (nil: memory only).
/// `maxBytes` bounds memory and the file alike; a copy over an eighth of it is not kept.
public final class LocalTier: Sendable {
    public let maxBytes: Int
    public let keepEncrypted: Bool
    public let feedWait: TimeInterval
    public let reportInterval: TimeInterval

    /// What the tier did, for tests and dashboards.
    public struct Counts: Sendable, Equatable {
        public var localHits = 0, offlineHits = 0, revalidated = 0, dropped = 0, cleared = 0, reported = 0
        /// Local hits given up: beyond the bound on waiting reports, or refused by the service.
        public var unreported = 0
    }

    struct Feed {
        /// Monotonic nanoseconds of the last page that left the follower caught up.
        var syncedAt: UInt64?
        /// nil until the namespace's stats said whether it is encrypted.
        var allowed: Bool?
        /// Monotonic nanoseconds of the stats call that set `allowed` (asked again after
        /// `encryptionRecheck`); nil until it was asked.
        var checkedAt: UInt64?
        /// Fills that started before this mark are not kept: they may predate the cursor.
        var floor = Int.max
        var task: Task<Void, Never>?
        /// What the follower's last call failed with, until one succeeds.
        var lastError: String?
        /// The follower's call in flight and the monotonic nanoseconds it began at (nil: none).
        var asking: (call: FollowerCall, since: UInt64)?
    }

    struct HitKey: Hashable {
        let key: String
        let etag: String?
    }

    struct State {
        var copies: LocalCopies
        var feeds: [String: Feed] = [:]
        /// Changes applied, in order, and each key's last one (for fills that raced it).
        var applied = 0
        var changed: [LocalCopies.Name: (seq: Int, etag: String?)] = [:]
        var forgotten = 0
        var hits: [String: [HitKey: Int]] = [:]
        /// Numbered reports not answered yet, oldest first (`LocalTier+Reports.swift`).
        var unsent: [NumberedReport] = []
        var seq = 0
        var numbered = true
        var client: TeamCacheClient?
        var reporter: Task<Void, Never>?
        var stopped = false
        var counts = Counts()
        var outbox: [Queued] = []
        var conflicts: [OutboxConflict] = []
    }

    let state: Locked<State>
    /// One outbox sender at a time (the background and `flush`).
    let sending = Locked(false)
    /// One reporter at a time (the background, `flush`, `close`): numbers go out in order.
    let reporting = Locked(false)
    /// This tier's own id in numbered reports (new each start: nothing numbered outlives it).
    let reporterID = (0..<16).map { _ in String(UInt8.random(in: 0...15), radix: 16) }.joined()
    static let changedKeys = 10_000
    static let pendingHitKeys = 10_000

    public init(path: String? = nil, maxBytes: Int = 64 * 1024 * 1024, keepEncrypted: Bool = false,
                feedWait: TimeInterval = 10, reportInterval: TimeInterval = 2) throws {
        guard maxBytes >= 64 * 1024 else { throw LocalFile.Failure(description: "maxBytes must be at least 64 KiB") }
        // 0 would make every long poll an empty page at once, asked again in a tight loop.
        guard feedWait > 0, feedWait <= 3600 else {
            throw LocalFile.Failure(description: "feedWait must be above 0 and at most 3600 s")
        }
        // A negative, NaN or huge interval trapped converting to nanoseconds in the reporter.
        guard reportInterval > 0, reportInterval <= 3600 else {
            throw LocalFile.Failure(description: "reportInterval must be above 0 and at most 3600 s")
        }
        self.maxBytes = maxBytes
        self.keepEncrypted = keepEncrypted
        self.feedWait = feedWait
        self.reportInterval = reportInterval
        let copies = try LocalCopies(path: path, maxBytes: maxBytes)
        var initial = State(copies: copies)
        initial.outbox = copies.loadOutbox()
        state = Locked(initial)
    }

    /// The tier's own client (no breaker, no retries: it works in the background and tries
    /// again on its own schedule). A tier given to several clients (copies of one, say) keeps
    /// the first's: they share its copies, and one connection follows the feed for all. False
    /// for a client of another service or token, which must not read or write through it.
    func attach(_ client: TeamCacheClient) -> Bool {
        state.withLock { state in
            if let first = state.client {
                return Self.sameService(first.configuration.baseURL, client.configuration.baseURL)
                    && first.configuration.token == client.configuration.token
            }
            state.client = client
            state.reporter = Task.detached { [weak self] in await self?.reportEvery() }
            return true
        }
    }

    /// URLs that name one service: equal but for a trailing slash, and the scheme and host's case.
    static func sameService(_ a: URL, _ b: URL) -> Bool {
        func form(_ url: URL) -> String {
            var text = url.absoluteString
            while text.hasSuffix("/") { text.removeLast() }
            guard let scheme = url.scheme, let host = url.host else { return text }
            return text.replacingOccurrences(of: scheme + "://" + host, with: (scheme + "://" + host).lowercased(),
                                             options: [.anchored, .caseInsensitive])
        }
        return form(a) == form(b)
    }

    /// Stops following and reporting (after one last report), closes the file.
    public func close() async {
        // The followers and the reporter see `stopped` and end on their own (within a long
        // poll's wait): they are not cancelled, since cancelling a task whose request is in
        // flight raced the request's own completion in the concurrency runtime (a test run
        // hung with a thread parked in the task status lock while resuming URLSession's answer).
        state.withLock { $0.stopped = true }
        // The last report gets a second at most: a frozen service must not hold up the app's
        // shutdown (what it could not take is lost, as a crash would lose it).
        _ = try? await TeamCacheClient.within(1) { [self] in await report() }
        state.withLock { $0.copies.close() }
    }

    public var bytes: Int { state.withLock { $0.copies.bytes } }
    public var counts: Counts { state.withLock { $0.counts } }

    /// Whether `namespace`'s copies may answer without asking.
    public func isLive(_ namespace: String) -> Bool {
        state.withLock { Self.live($0.feeds[namespace], feedWait: feedWait) }
    }

    /// Why `namespace` is not live (nil: it is, or nothing to say, or the namespace is not
    /// followed): what an app logs when its tier stops answering locally. The follower's last
    /// failure (until its next page), a call the service has kept waiting past its time (see
    /// `late`; after a failure, both), or that no follower runs.
    public func followerError(_ namespace: String) -> String? {
        state.withLock { state in
            guard let feed = state.feeds[namespace], !Self.live(feed, feedWait: feedWait) else { return nil }
            let late = Self.late(feed.asking, feedWait: feedWait)
            if let error = feed.lastError { return late.map { "\(error); since then \($0)" } ?? error }
            if state.stopped { return "the tier is closed: no follower runs" }
            if feed.task == nil { return "no follower runs: the tier has no client" }
            return late
        }
    }

    static func live(_ feed: Feed?, feedWait: TimeInterval) -> Bool {
        guard let synced = feed?.syncedAt else { return false }
        return seconds(since: synced) < trusted(feedWait)
    }

    /// How long a follower's silence is trusted: its long poll's wait and a grace for a busy
    /// service to answer it (half the wait, at least a second; a tier must not stop answering
    /// every time a loaded service answers a long poll a little late).
    static func trusted(_ feedWait: TimeInterval) -> TimeInterval { feedWait + max(1, feedWait / 2) }

    // MARK: Reads

    /// Starts following `namespace` (once).
    func follow(_ namespace: String, in state: inout State) {
        guard state.feeds[namespace] == nil else { return }
        var feed = Feed()
        if !state.stopped, state.client != nil {
            feed.task = Task.detached { [weak self] in await self?.follow(namespace) }
        }
        state.feeds[namespace] = feed
    }

    /// A copy that answers without asking (fresh, the namespace followed live); its hit is
    /// counted for the next report.
    func answer(_ namespace: String, _ key: String, _ kind: LocalCopy.Kind) -> LocalCopy? {
        let now = Date().timeIntervalSince1970
        return state.withLock { state -> LocalCopy? in
            follow(namespace, in: &state)
            guard !state.stopped, Self.live(state.feeds[namespace], feedWait: feedWait),
                  let copy = state.copies.get(.init(namespace: namespace, key: key)), copy.kind == kind,
                  copy.isFresh(now) else { return nil }
            state.counts.localHits += 1
            Self.countHits(&state, namespace, [HitKey(key: key, etag: copy.etag): 1])
            return copy
        }
    }

    /// The copy held, whatever its freshness, and the mark a fill starting now carries.
    func held(_ namespace: String, _ key: String, _ kind: LocalCopy.Kind) -> (copy: LocalCopy?, since: Int) {
        state.withLock { state in
            follow(namespace, in: &state)
            let copy = state.stopped ? nil : state.copies.get(.init(namespace: namespace, key: key))
            return (copy?.kind == kind ? copy : nil, state.applied)
        }
    }

    /// A copy to answer with while the service cannot be reached.
    func offline(_ namespace: String, _ key: String, _ kind: LocalCopy.Kind, maxStale: Int?) -> LocalCopy? {
        let now = Date().timeIntervalSince1970
        return state.withLock { state in
            guard !state.stopped, let copy = state.copies.get(.init(namespace: namespace, key: key)), copy.kind == kind,
                  copy.isServable(now, maxStale: maxStale) else { return nil }
            state.counts.offlineHits += 1
            return copy
        }
    }

    /// Where the changes are now: a fill that starts here is kept only if no change to its
    /// key with another version was applied since.
    func mark() -> Int { state.withLock { $0.applied } }

    /// Keeps what the service answered, unless a change raced it or the namespace may not be kept.
    func keep(_ namespace: String, _ key: String, _ copy: LocalCopy, since: Int) {
        state.withLock { state in
            follow(namespace, in: &state)
            let name = LocalCopies.Name(namespace: namespace, key: key)
            guard !state.stopped, let feed = state.feeds[namespace], feed.allowed == true, since >= feed.floor,
                  since >= state.forgotten else { return }
            // A fill of another version than the feed's last word on the key is refused, however
            // late it started: a read standby that lags the feed answers an older version.
            if let changed = state.changed[name], changed.etag != copy.etag { return }
            state.copies.put(name, copy)
        }
    }

    /// Renews the copy of version `etag` (not one another fill kept meanwhile).
    func revalidated(_ namespace: String, _ key: String, ttl: Int, etag: String?) {
        state.withLock { state in
            state.counts.revalidated += 1
            let name = LocalCopies.Name(namespace: namespace, key: key)
            guard var copy = state.copies.get(name), copy.etag == etag else { return }
            copy.expiresAt = Date().timeIntervalSince1970 + Double(ttl)
            state.copies.put(name, copy)
        }
    }

    /// This client deleted `key` (or the service holds nothing fresh): the copy goes, and a fill
    /// still in flight from before is refused.
    func forget(_ namespace: String, _ key: String) {
        state.withLock { state in
            Self.note(&state, .init(namespace: namespace, key: key), etag: nil)
            state.copies.drop(.init(namespace: namespace, key: key))
        }
    }

    /// This client's own committed write: held at once; an older fill in flight is refused.
    func wrote(_ namespace: String, _ key: String, _ copy: LocalCopy) {
        let since = state.withLock { state in
            Self.note(&state, .init(namespace: namespace, key: key), etag: copy.etag)
            return state.applied
        }
        keep(namespace, key, copy, since: since)
    }

    /// A change to `name` now holding `etag` (nil: gone), for fills that raced it.
    static func note(_ state: inout State, _ name: LocalCopies.Name, etag: String?) {
        state.applied += 1
        if state.changed[name] == nil, state.changed.count >= changedKeys {
            // The oldest tenth is forgotten (one sort a thousand changes), so the latest changes
            // stay known: a lagging standby's older version of a key changed just now is still
            // refused (forgetting all at once let it in). Fills that started before the last
            // change forgotten are refused: their key's change may be among them.
            let oldest = state.changed.sorted { $0.value.seq < $1.value.seq }.prefix(changedKeys / 10)
            for (forgotten, _) in oldest { state.changed.removeValue(forKey: forgotten) }
            state.forgotten = max(state.forgotten, oldest.last?.value.seq ?? 0)
        }
        state.changed[name] = (state.applied, etag)
    }

    /// For tests: the copy held, without counting or following.
    func peek(_ namespace: String, _ key: String) -> LocalCopy? {
        state.withLock { $0.copies.get(.init(namespace: namespace, key: key)) }
    }

    static func countHits(_ state: inout State, _ namespace: String, _ hits: [HitKey: Int]) {
        for (key, count) in hits {
            if state.hits[namespace]?[key] != nil {
                state.hits[namespace]?[key]? += count
            } else if state.hits.values.reduce(0, { $0 + $1.count }) < pendingHitKeys {
                state.hits[namespace, default: [:]][key] = count
            } else {
                state.counts.unreported += count
            }
        }
    }

    // MARK: Reports

    private func reportEvery() async {
        while !Task.isCancelled && !state.withLock({ $0.stopped }) {
            try? await Task.sleep(nanoseconds: UInt64(reportInterval * 1e9))
            if Task.isCancelled || state.withLock({ $0.stopped }) { return }
            await report()
            await sendOutbox()
        }
    }

    /// Reports the local hits and sends the outbox now (the background does both every
    /// `reportInterval`).
    public func flush() async {
        await report()
        await sendOutbox(waitForRunning: true)
    }
}
