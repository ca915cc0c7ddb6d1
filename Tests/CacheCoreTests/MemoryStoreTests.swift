import CacheCore
import Foundation
import Locking
import Testing

/// The memory store's own promises, with no database: what the conformance test against
/// PostgreSQL (CacheStoreTests) cannot reach cheaply: the feed's trimming and cursors, lease
/// ownership, and the one place local changes are told.
@Suite struct MemoryStoreTests {
    static let policy = CachePolicy()

    static func write(_ key: String, _ body: String = "body", ttl: Int? = nil) -> EntryWrite {
        var write = EntryWrite(namespace: Namespace("ns")!, key: EntryKey(Array(key.utf8))!,
                               body: StoredBody.fromIdentity(Array(body.utf8), contentType: "text/plain", policy: policy),
                               contentType: "text/plain")
        write.ttlSeconds = ttl
        return write
    }

    static func put(_ write: EntryWrite, _ store: MemoryStore) -> WriteOutcome? {
        let outcome = Locked<WriteOutcome?>(nil)
        store.submit(write, committed: nil) { result, position in
            outcome.withLock { $0 = try? result.get() }
            #expect(position == nil, "a memory store has no commit positions")
        }
        return outcome.value
    }

    @Test func everyChangeIsToldBeforeItsAnswerAndOnce() throws {
        let store = MemoryStore()
        let told = Locked<[String]>([])
        store.localChanges.listen { namespace, key in
            told.withLock { $0.append("\(namespace)/\(key.map { String(decoding: $0, as: UTF8.self) } ?? "*")") }
        }
        let namespace = try #require(Namespace("ns"))
        _ = Self.put(Self.write("a"), store)
        #expect(try store.delete(namespace, EntryKey(Array("a".utf8))!))
        var byTag = EvictionPredicate()
        byTag.tag = "t"
        _ = try store.evict(namespace, byTag)
        _ = try store.importEntries([], policy: .skip)
        #expect(told.value == ["ns/a", "ns/a", "ns/*"])
    }

    @Test func aTrimmedFeedSendsAFollowerToResync() throws {
        let store = MemoryStore(feedCapacity: 3)
        let namespace = try #require(Namespace("ns"))
        for key in ["a", "b", "c", "d", "e"] { _ = Self.put(Self.write(key), store) }
        #expect(try store.feedHead() == 5)
        #expect(throws: FeedCursorError.gone(floor: 2)) { try store.changes(namespace, after: 0, limit: 10, bodies: false) }
        #expect(throws: FeedCursorError.ahead(head: 5)) { try store.changes(namespace, after: 6, limit: 10, bodies: false) }
        let page = try store.changes(namespace, after: 2, limit: 2, bodies: true)
        #expect(page.changes.map(\.cursor) == [3, 4] && page.more && page.next == 4)
        #expect(page.changes.map { $0.body.map { String(decoding: $0, as: UTF8.self) } } == ["body", "body"])
        let rest = try store.changes(namespace, after: page.next, limit: 2, bodies: false)
        #expect(rest.changes.map(\.cursor) == [5] && !rest.more)
    }

    @Test func anExpiredEntryIsAbsentToWritesAndPresentToReads() throws {
        let clock = ManualClock(Date(timeIntervalSince1970: 1_000_000))
        let store = MemoryStore(clock: clock)
        let namespace = try #require(Namespace("ns")), key = try #require(EntryKey(Array("k".utf8)))
        #expect(Self.put(Self.write("k", ttl: 2), store) == .created(expiresAt: clock.now().addingTimeInterval(2)))
        var createOnly = Self.write("k", "other")
        createOnly.condition = .absent
        #expect(Self.put(createOnly, store) == .preconditionFailed)
        clock.advance(by: 3)
        #expect(try store.fetch(namespace, key) != nil, "kept for max-stale reads")
        #expect(try !store.delete(namespace, key), "absent to a delete")
        #expect(Self.put(createOnly, store) == .created(expiresAt: clock.now().addingTimeInterval(Double(Self.policy.defaultTTL))))
    }

    @Test func onlyTheHolderEndsALease() throws {
        let leases = MemoryLeases()
        let namespace = try #require(Namespace("ns")), key = try #require(EntryKey(Array("k".utf8)))
        guard case .granted(let lease) = try leases.grant(namespace, key, seconds: 30, holder: 7) else {
            Issue.record("the first caller was not granted the lease")
            return
        }
        #expect(Lease.isWellFormed(lease.id))
        guard case .held(let retryAfter) = try leases.grant(namespace, key, seconds: 30, holder: 8) else {
            Issue.record("a second lease was granted while the first is live")
            return
        }
        #expect((1...30).contains(retryAfter))
        #expect(try !leases.release(namespace, key, id: lease.id, holder: 8), "another token's release")
        #expect(try !leases.release(namespace, key, id: Lease.newID(), holder: 7), "another id")
        #expect(try leases.complete(namespace, key, id: lease.id, holder: 7))
        #expect(try !leases.complete(namespace, key, id: lease.id, holder: 7), "already finished")
        guard case .granted = try leases.grant(namespace, key, seconds: 30, holder: 8) else {
            Issue.record("a finished lease still held the key")
            return
        }
    }

    /// An entry exported and imported again is itself (`unchanged`), with the system clock's
    /// sub-microsecond times: the store keeps microseconds, as PostgreSQL does.
    @Test func anExportedEntryImportedAgainIsUnchanged() throws {
        let store = MemoryStore()
        _ = Self.put(Self.write("k"), store)
        var lines: [DumpedEntry] = []
        _ = try store.exportPage(namespace: Namespace("ns"), since: nil, after: nil, limit: 10, byteBudget: .max) {
            lines.append($0)
        }
        #expect(lines.count == 1)
        for policy in ImportConflictPolicy.allCases {
            #expect(try store.importEntries(lines, policy: policy) == [.unchanged], "\(policy)")
        }
    }
}
