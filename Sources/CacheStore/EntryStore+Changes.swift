import CacheCore
import Foundation
import Postgres

/// The change feed (migration 0012): numbered in the background (one sequencer per process,
/// as the counter fold is), read by (namespace, seq) from a cursor, trimmed by the eviction
/// cycle. No request waits for numbering: a reader numbers a little only when this process's
/// sequencer is free and the head's row lock is had within a few milliseconds, and a page
/// read while changes wait for their numbers says `more`.
extension EntryStore {
    static let sequenceChanges = "SELECT tc_sequence_changes($1::int4) AS head"
    /// The head before a run and after it, in one round trip (the subquery reads the
    /// statement's snapshot; the function's own statements see later ones).
    static let sequenceRun = "SELECT (SELECT last FROM change_feed_head) AS before, tc_sequence_changes($1::int4) AS head"
    /// Rows numbered per sequencer run at most (a backlog is numbered over several reads).
    static let sequencerBatch = 10_000

    /// The head, the namespace's floor and its changes after `$2`, in one statement (so one
    /// snapshot: every change numbered at or below the head it reads is in it). The entry's
    /// id comes with a put whose version the entry still holds, for its body. Scalar
    /// subqueries and LIMIT 1 probes keep the plan a few index lookups: a join to the
    /// never-analyzed one-row head table was estimated at thousands of rows, which turned the
    /// entries join into a scan and switched on JIT compilation (0.4 s a page).
    static let readChanges = """
        SELECT (SELECT last FROM change_feed_head) AS head,
            coalesce((SELECT floor FROM change_feed_floors WHERE namespace = $1), 0) AS floor,
            EXISTS (SELECT 1 FROM change_feed_gaps WHERE $2 > after_seq AND $2 < before_seq) AS lost,
            c.seq, c.kind, c.key, c.etag, c.identity_size, c.stored_size, c.content_type,
            \(timestamp("c.expires_at")) AS expires_at,
            \(timestamp("c.expires_at + make_interval(secs => c.stale_while_revalidate::float8)")) AS stale_until,
            e.id AS entry_id
        FROM (VALUES (1)) AS one (n)
        LEFT JOIN LATERAL (SELECT * FROM entry_changes WHERE namespace = $1 AND seq > $2 ORDER BY seq LIMIT $3) c ON true
        LEFT JOIN LATERAL (SELECT id FROM entries
                           WHERE c.kind = 'put' AND namespace = $1 AND key = c.key AND etag = c.etag LIMIT 1) e ON true
        ORDER BY c.seq
        """
    static let changeBodies = "SELECT id, namespace, key, etag, body, encoding FROM entries WHERE id = ANY($1)"
    static let trimChanges = "SELECT tc_trim_changes($1, $2::int4) AS trimmed"
    /// Bodies of one feed page at most (stored bytes; a page holds at least one change).
    public static let feedPageBytes = 16 * 1024 * 1024

    private static func timestamp(_ column: String) -> String {
        "to_char((\(column)) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
    }

    /// How long one background numbering pass may run before it lets the next tick start.
    static let numberingPass: TimeInterval = 1
    /// Rows a reader numbers at most when the sequencer is free (a small run: it must not
    /// hold the head's row lock for long), and how long it waits for that lock.
    static let readerBatch = 1000
    static let readerLockWait = "50ms"
    /// How long a reader waits for this process's sequencer to be free: not at all. Readers
    /// run on workers, and 24 followers each waiting even 100 ms for a pass over a backlog held
    /// the workers PUTs needed (PUT+GET p99 rose from 7 ms to 180 ms); one that finds the
    /// sequencer busy answers what is numbered, with `more`.
    static let readerGateWait: TimeInterval = 0

    /// The background sequencer's pass: numbers what is pending, `sequencerBatch` rows a run,
    /// until nothing is or `numberingPass` has passed; returns whether a backlog is left. One
    /// pass at a time per process (the gate), and across processes the head row's lock.
    ///
    /// Between runs over a backlog it rests as long as the run took (and lets readers at the
    /// gate): numbering takes at most half of a database core, so requests keep theirs.
    @discardableResult
    public func sequenceChanges() throws -> (head: Int64, backlog: Bool) {
        let started = ProcessInfo.processInfo.systemUptime
        var head: Int64 = 0
        while ProcessInfo.processInfo.systemUptime - started < Self.numberingPass {
            let run = ProcessInfo.processInfo.systemUptime
            let (before, after) = try sequencerGate.withLock { try pool.withConnection { try Self.sequenceRun(on: $0) } }
            head = after
            // A run short of a batch numbered all that was pending (an idle tick: one cheap read).
            if after - before < Int64(Self.sequencerBatch) { return (head, false) }
            Thread.sleep(forTimeInterval: ProcessInfo.processInfo.systemUptime - run)
        }
        return (head, true)
    }

    private static func sequenceRun(on connection: PostgresConnection) throws -> (before: Int64, after: Int64) {
        guard let row = try connection.query(Self.sequenceRun, [.int(Self.sequencerBatch)]).first,
              let before = try row.int("before"), let after = try row.int("head") else {
            throw PostgresError(.decoding, serverMessage: "tc_sequence_changes gave no head")
        }
        return (Int64(before), Int64(after))
    }

    /// The feed's head (an export's cursor to follow from), after a reader's small numbering
    /// run (waiting at most 0.5 s for this process's sequencer): changes committed before this
    /// and numbered later get numbers past it, so following from it misses none of them; under
    /// a backlog it may come before some the dump holds, which a follower replays harmlessly.
    public func feedHead() throws -> Int64 {
        numberIfFree(waiting: 0.5)
        return try feedHeadNow()
    }

    /// The head as it is: no numbering run, no wait for the sequencer (a follower's start, on
    /// a worker that writes need: every tier of a fleet restarting asks it at once).
    public func feedHeadNow() throws -> Int64 {
        try pool.withConnection { connection in
            guard let head = try connection.query("SELECT last FROM change_feed_head").first?.int("last") else {
                throw PostgresError(.decoding, serverMessage: "change feed head missing")
            }
            return Int64(head)
        }
    }

    /// A reader's small numbering run, so a follower woken by a write usually finds it
    /// numbered: only when this process's sequencer is free (`readerGateWait`), and
    /// giving up when another process holds the head longer than 50 ms. Never more than that.
    /// Returns whether it caught up: everything committed before it is numbered. The gate is
    /// waited for before a pooled connection is taken: followers waiting out a background
    /// pass must not hold the connections writes need.
    /// When the sequencer is busy it does not know (the busy pass may be about to number the
    /// very change that woke the reader): false, so the page says `more` and is asked again
    /// soon; answering "caught up" could leave a follower parked on a wake-up already spent.
    @discardableResult
    func numberIfFree(waiting: TimeInterval = readerGateWait) -> Bool {
        guard waiting > 0 ? sequencerGate.lock(before: Date().addingTimeInterval(waiting)) : sequencerGate.try() else {
            return false
        }
        defer { sequencerGate.unlock() }
        let numbered = try? pool.withConnection { connection in try connection.transaction { connection -> Int64 in
            try connection.execute("SET LOCAL lock_timeout = '\(Self.readerLockWait)'")
            let row = try connection.query(Self.sequenceRun, [.int(Self.readerBatch)]).first
            return Int64((try row?.int("head") ?? 0) - (try row?.int("before") ?? 0))
        } }
        return numbered.map { $0 < Int64(Self.readerBatch) } ?? false
    }

    static func sequenceChanges(on connection: PostgresConnection) throws -> Int64 {
        guard let head = try connection.query(Self.sequenceChanges, [.int(Self.sequencerBatch)]).first?.int("head") else {
            throw PostgresError(.decoding, serverMessage: "tc_sequence_changes gave no head")
        }
        return Int64(head)
    }

    /// Up to `limit` changes of `namespace` after `cursor`, in feed order, with the bodies
    /// of puts still current when `bodies` (at most `feedPageBytes` of them, and then the
    /// page ends early). Throws `FeedCursorError` for a cursor that cannot be followed.
    /// Whether the head was numbered on another WAL timeline than the one written now: a
    /// promotion moments ago, before the sequencer's first run on the new timeline recorded its
    /// gap. A cursor past the head then comes from the lost history (a CI run asked in that
    /// window and was told "unknown"). Asked only on that error path; false when it cannot be
    /// told (the answer is then "unknown", as before).
    static func headOnAnotherTimeline(_ connection: PostgresConnection) -> Bool {
        let moved = try? connection.query(
            "SELECT timeline IS DISTINCT FROM tc_wal_timeline() AS moved FROM change_feed_head").first?.bool("moved")
        return moved == true
    }

    public func changes(_ namespace: Namespace, after cursor: Int64, limit: Int, bodies: Bool) throws -> FeedPage {
        let limit = min(max(1, limit), 10_000)
        let caughtUp = numberIfFree()
        return try pool.withConnection { connection in
            let rows = try connection.query(Self.readChanges, [.text(namespace.name), .int(Int(cursor)), .int(limit)]).rows
            guard let head = try rows.first?.int("head").map(Int64.init),
                  let floor = try rows.first?.int("floor").map(Int64.init) else {
                throw PostgresError(.decoding, serverMessage: "change feed head missing")
            }
            if cursor < floor { throw FeedCursorError.gone(floor: floor) }
            if try rows.first?.bool("lost") == true { throw FeedCursorError.lost }
            if cursor > head {
                throw Self.headOnAnotherTimeline(connection) ? FeedCursorError.lost : FeedCursorError.ahead(head: head)
            }
            var changes = try rows.compactMap(Self.change)
            // Changes may still be waiting for their numbers (the reader could not number
            // them: a backlog is being numbered in the background): what is numbered is
            // answered, and the follower asks again. (Asking the table whether rows are
            // pending would walk the pending index's dead entries: as slow as the backlog.)
            let behind = !caughtUp
            var more = changes.count == limit || behind
            if bodies {
                let kept = Self.withinBudget(changes)
                more = more || kept < changes.count
                changes.removeLast(changes.count - kept)
                try attachBodies(&changes, on: connection)
            }
            // The next ask starts after the last change given (or where this one did). A short
            // page has seen everything up to the head, so it could start at the head; starting
            // at the namespace's own last change instead makes caught-up followers of one
            // namespace ask the same question, which one database read answers for all.
            let next = changes.last?.cursor ?? cursor
            return FeedPage(changes: changes, next: next, more: more, behind: behind)
        }
    }

    /// A feed row; nil for the head-only row of an empty page.
    private static func change(_ row: PostgresRow) throws -> FeedChange? {
        guard let seq = try row.int("seq") else { return nil }
        guard let kind = try row.string("kind").flatMap(FeedChange.Kind.init), let key = try row.bytes("key") else {
            throw PostgresError(.decoding, serverMessage: "change row has unexpected NULLs")
        }
        return FeedChange(cursor: Int64(seq), kind: kind, key: key, etag: try row.string("etag"),
                          identitySize: try row.int("identity_size"), storedSize: try row.int("stored_size"),
                          contentType: try row.string("content_type"), expiresAt: try row.string("expires_at"),
                          staleUntil: try row.string("stale_until"), entryID: try row.int("entry_id").map(Int64.init))
    }

    /// How many of `changes` fit the page's body budget (at least one).
    static func withinBudget(_ changes: [FeedChange]) -> Int {
        var bytes = 0
        for (index, change) in changes.enumerated() where change.entryID != nil {
            bytes += max(0, change.storedSize ?? 0)
            if bytes > feedPageBytes && index > 0 { return index }
        }
        return changes.count
    }

    /// Fetches the bodies of puts whose entry still held their version; one replaced since
    /// (a change after this page's snapshot) is left without: its own change follows.
    private func attachBodies(_ changes: inout [FeedChange], on connection: PostgresConnection) throws {
        let ids = changes.compactMap(\.entryID)
        guard !ids.isEmpty else { return }
        var found: [Int64: (etag: String, body: [UInt8], encoding: BodyEncoding)] = [:]
        for row in try connection.query(Self.changeBodies, [.intArray(ids)]).rows {
            guard let id = try row.int("id"), let namespace = try row.string("namespace"), let key = try row.bytes("key"),
                  let etag = try row.string("etag"), let stored = try row.bytes("body"),
                  let storedEncoding = try row.string("encoding") else { continue }
            // Sealed bodies are opened (one that does not open is left out, logged and counted).
            guard case .plain(let body, let encoding, _) = try keyring.open(
                namespace: namespace, key: key, etag: etag, body: stored, encoding: storedEncoding, metadata: nil,
                pool: pool) else { continue }
            found[Int64(id)] = (etag, body, encoding)
        }
        for index in changes.indices {
            guard let id = changes[index].entryID, let stored = found[id], stored.etag == changes[index].etag else { continue }
            changes[index].body = stored.body
            changes[index].encoding = stored.encoding
        }
    }

    /// Numbers what is pending, then drops changes older than `before` in batches; returns
    /// how many went. Run by the eviction cycle.
    @discardableResult
    static func trimChanges(before: Date, on connection: PostgresConnection) throws -> Int {
        // Old rows nobody has read yet get their numbers first, so trimming them raises the
        // floor. A backlog takes several runs; bounded, so steady writes cannot keep it here.
        var head = try connection.query("SELECT last FROM change_feed_head").first?.int("last").map(Int64.init) ?? 0
        for _ in 0..<100 {
            let numbered = try sequenceChanges(on: connection)
            defer { head = numbered }
            if numbered - head < Int64(Self.sequencerBatch) { break }
        }
        var total = 0
        while true {
            let trimmed = try connection.query(Self.trimChanges, [.timestamp(before), .int(Self.sequencerBatch)])
                .first?.int("trimmed") ?? 0
            total += trimmed
            if trimmed < Self.sequencerBatch { return total }
        }
    }
}
