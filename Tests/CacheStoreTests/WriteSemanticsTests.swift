import CacheCore
@testable import CacheStore
import Foundation
import Locking
import Postgres
import Testing
import TestSupport

/// The write semantics exist twice: `tc_put_entry` (one PL/pgSQL call per write; `If-Match`
/// writes and single retries take it) and `EntryGroupWrite` (one set-based statement per group
/// of plain or create-only writes). The same random write sequences run through both, into two
/// namespaces set up alike, on one test clock; after every step their outcomes and every column
/// of every row they left must agree.
///
/// One difference is by design and is checked as such: a group write refreshes an access row's
/// `last_accessed_at` only when it is a minute old (sparing a row version per rewrite of a busy
/// key), `tc_put_entry` every time; so the two may differ by up to a minute there.
@Suite struct WriteSemanticsTests {
    /// Rows compared whole (as JSON, so a column a migration adds is compared too), minus what
    /// names the row rather than describes it.
    static let entryRows = """
        SELECT encode(key, 'hex') AS key, (to_jsonb(e) - 'id' - 'namespace')::text AS row
        FROM entries e WHERE namespace = $1 ORDER BY key
        """
    static let accessRows = """
        SELECT encode(e.key, 'hex') AS key, a.hit_count, a.last_accessed_at,
               (to_jsonb(a) - 'entry_id' - 'namespace' - 'last_accessed_at')::text AS rest
        FROM entry_access a JOIN entries e ON e.id = a.entry_id WHERE e.namespace = $1 ORDER BY e.key
        """
    /// The namespace's totals: what is folded plus what waits to be (the folder moves rows from
    /// one to the other in one transaction, so one statement sees each row once).
    static let totals = """
        SELECT (coalesce(sum(entries), 0) || ' ' || coalesce(sum(identity_bytes), 0) || ' '
                || coalesce(sum(stored_bytes), 0)) AS totals
        FROM (SELECT entries, identity_bytes, stored_bytes FROM namespace_counters WHERE namespace = $1
              UNION ALL SELECT entries, identity_bytes, stored_bytes FROM counter_deltas WHERE namespace = $1) t
        """
    /// The change feed's rows, each key's in the order they were written (a group writes its
    /// keys in key order, one transaction: the order between keys of one step is not a meaning).
    static let changes = """
        SELECT string_agg((to_jsonb(c) - 'id' - 'seq' - 'namespace' - 'numbered_at')::text, ' ' ORDER BY key, id)
            AS changes
        FROM entry_changes c WHERE namespace = $1
        """

    @Test(arguments: [1, 2, 3, 4])
    func theGroupWriteAndTcPutEntryLeaveTheSameRows(seed: UInt64) throws {
        let shared = TestService.shared.app.store
        // Whole seconds: both paths store the same microseconds, and intervals add exactly.
        let clock = ManualClock(Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down)))
        let store = EntryStore(pool: shared.pool, policy: shared.policy, clock: clock)
        let single = try #require(Namespace(TestService.namespace("wsem-one")))
        let group = try #require(Namespace(TestService.namespace("wsem-group")))
        if seed.isMultiple(of: 2) {
            for namespace in [single, group] { try store.setSettings(namespace, NamespaceSettings(defaultTTL: 7)) }
        }
        var random = SplitMix64(seed: seed)
        for step in 0..<150 {
            let createOnly = random.next(below: 3) == 0
            let writes = Self.randomGroup(&random, policy: store.policy)
            let viaFunction = try writes.map { write in
                var one = write(single)
                one.condition = createOnly ? .absent : .none
                return try store.putOne(one)
            }
            let viaGroup = try EntryGroupWrite.run(writes.map { $0(group) }, createOnly: createOnly, store: store)
            #expect(viaFunction == viaGroup, "seed \(seed) step \(step): outcomes")
            try Self.expectSameRows(single, group, store: store, context: "seed \(seed) step \(step)")
            clock.advance(by: Double(random.next(below: 4)))
        }
    }

    /// A group write whose snapshot saw a fresh entry that a delete then removed (committed
    /// while the write waited for its row lock): the write inserts a new row, and that is a
    /// creation, as `tc_put_entry` (which reads the key again after the lock) says too.
    /// Interleaved on purpose: the delete holds the row until the write is seen waiting.
    @Test func aGroupWriteRacingADeleteOfItsKeyIsACreation() throws {
        let shared = TestService.shared.app.store
        let store = EntryStore(pool: shared.pool, policy: shared.policy)
        let namespace = try #require(Namespace(TestService.namespace("wsem-race")))
        let key = try #require(EntryKey(Array("raced".utf8)))
        let write = EntryWrite(namespace: namespace, key: key,
                               body: StoredBody.fromIdentity([1, 2, 3], contentType: "text/plain", policy: store.policy),
                               contentType: "text/plain")
        guard case .created = try store.putOne(write) else { Issue.record("the first write did not create"); return }
        let outcome = HandOff<Result<[WriteOutcome], any Error>>()
        try store.pool.withConnection { deleter in
            try deleter.execute("BEGIN")
            try deleter.query("DELETE FROM entries WHERE namespace = $1 AND key = $2",
                              [.text(namespace.name), .bytes(key.bytes)])
            Thread.detachNewThread {
                outcome.put(Result { try EntryGroupWrite.run([write], createOnly: false, store: store) })
            }
            // The write has read its snapshot (the entry, fresh) and waits for the row lock.
            let waiting = try Self.eventually {
                try store.pool.withConnection { monitor in
                    try monitor.query("""
                        SELECT count(*)::int8 AS n FROM pg_stat_activity
                        WHERE wait_event_type = 'Lock' AND query LIKE '%tc_write_group%'
                        """).first?.int("n") ?? 0
                } > 0
            }
            #expect(waiting, "the group write never waited for the deleted row")
            try deleter.execute("COMMIT")
        }
        let outcomes = try #require(outcome.take(before: .now() + 10)).get()
        guard outcomes.count == 1, case .created = outcomes[0] else {
            Issue.record("a write that inserted a new row answered \(outcomes)")
            return
        }
        #expect(try store.fetch(namespace, key) != nil)
    }

    static func eventually(_ check: () throws -> Bool) throws -> Bool {
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline {
            if try check() { return true }
            Thread.sleep(forTimeInterval: 0.02)
        }
        return false
    }

    /// One to four writes to distinct keys of a small key set (so entries are replaced, expire
    /// and are written again), each with its own TTL, tags, model, tokens and window.
    static func randomGroup(_ random: inout SplitMix64, policy: CachePolicy) -> [(Namespace) -> EntryWrite] {
        var keys = Array(0..<5).map { "k\($0)" }
        keys.shuffle(using: &random)
        return keys.prefix(1 + Int(random.next(below: 4))).map { name in
            let size = [3, 40, 900, 5000][Int(random.next(below: 4))]
            let identity = (0..<size).map { _ in UInt8(truncatingIfNeeded: random.next(below: 4) + 97) }
            let ttl = [nil, 1, 3, 30][Int(random.next(below: 4))]
            let tags = [[], ["a"], ["a", "b"]][Int(random.next(below: 3))]
            let model = random.next(below: 2) == 0 ? nil : "m\(random.next(below: 3))"
            let tokens = Int(random.next(below: 100))
            let window = [0, 5][Int(random.next(below: 2))]
            let metadata = random.next(below: 2) == 0 ? nil : "{\"n\": \(random.next(below: 9))}"
            return { namespace in
                var write = EntryWrite(namespace: namespace, key: EntryKey(Array(name.utf8))!,
                                       body: StoredBody.fromIdentity(identity, contentType: "text/plain", policy: policy),
                                       contentType: "text/plain")
                write.ttlSeconds = ttl
                write.tags = tags
                write.model = model
                write.version = model.map { _ in "v1" }
                write.promptDigest = model.map { "prompt for \($0)" }
                write.metadata = metadata
                write.inputTokens = tokens
                write.outputTokens = tokens * 2
                write.staleWhileRevalidate = window
                write.writerTokenID = 42
                return write
            }
        }
    }

    static func expectSameRows(_ single: Namespace, _ group: Namespace, store: EntryStore, context: String) throws {
        try store.pool.withConnection { connection in
            let rows = try [single, group].map { namespace in
                try connection.query(entryRows, [.text(namespace.name)]).rows.map { [try $0.string("key"), try $0.string("row")] }
            }
            #expect(rows[0] == rows[1], "\(context): entries")
            for (statement, name) in [(totals, "totals"), (changes, "changes")] {
                let both = try [single, group].map { try connection.query(statement, [.text($0.name)]).first?.string(name) }
                #expect(both[0] == both[1], "\(context): \(name)")
            }
            let access = try [single, group].map { try connection.query(accessRows, [.text($0.name)]).rows }
            #expect(access[0].count == access[1].count, "\(context): access rows")
            for (one, other) in zip(access[0], access[1]) {
                #expect(try one.string("key") == other.string("key") && one.int("hit_count") == other.int("hit_count")
                        && one.string("rest") == other.string("rest"), "\(context): access row")
                let gap = try #require(try one.date("last_accessed_at")).timeIntervalSince(
                    try #require(try other.date("last_accessed_at")))
                #expect(gap >= 0 && gap <= 60, "\(context): last access \(gap) s apart")
            }
        }
    }
}

/// A small seeded generator (SplitMix64): the same seed gives the same write sequence, so a
/// failing step can be replayed.
struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var mixed = state
        mixed = (mixed ^ (mixed >> 30)) &* 0xBF58_476D_1CE4_E5B9
        mixed = (mixed ^ (mixed >> 27)) &* 0x94D0_49BB_1331_11EB
        return mixed ^ (mixed >> 31)
    }

    mutating func next(below bound: UInt64) -> UInt64 { next() % bound }
}
