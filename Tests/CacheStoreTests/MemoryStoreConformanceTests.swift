import CacheCore
@testable import CacheStore
import Foundation
import Locking
import Testing
import TestSupport

/// The memory store stands in for PostgreSQL in the domain's tests and the request fuzzer, so
/// it must mean what PostgreSQL means. The same seeded random sequences of writes (plain,
/// create-only, `If-Match`), deletes, evictions, imports and settings run through both, on one
/// test clock; after every step their outcomes, every entry as read back, the export and the
/// change feed must agree.
///
/// The one difference by design: PostgreSQL's caps compare totals folded once a second, the
/// memory store's its exact totals; the counters are folded after every step here, so the
/// two compare the same totals.
@Suite struct MemoryStoreConformanceTests {
    @Test(arguments: [11, 12, 13])
    func theMemoryStoreAnswersAsPostgreSQLDoes(seed: UInt64) throws {
        let shared = TestService.shared.app.store
        let clock = ManualClock(Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down)))
        let postgres = EntryStore(pool: shared.pool, policy: shared.policy, clock: clock)
        let memory = MemoryStore(policy: shared.policy, clock: clock)
        let namespace = try #require(Namespace(TestService.namespace("conform")))
        let stores: [any EntryStorage] = [postgres, memory]
        // Odd seeds give the namespace a quota a few writes fill: store_full is reached.
        let settings = NamespaceSettings(defaultTTL: 5, maxBytes: seed.isMultiple(of: 2) ? nil : 1_500)
        for store in stores { try store.setSettings(namespace, settings) }
        var random = SplitMix64(seed: seed)
        for step in 0..<160 {
            let context = "seed \(seed) step \(step)"
            let operation = Self.randomOperation(&random, namespace: namespace, policy: shared.policy)
            let answers = try stores.map { try operation($0) }
            #expect(answers[0] == answers[1], "\(context): \(answers[0]) against \(answers[1])")
            _ = try postgres.foldCounters()
            try Self.expectSameContents(postgres, memory, namespace, context: context)
            clock.advance(by: Double(random.next(below: 3)))
        }
    }

    typealias Operation = (any EntryStorage) throws -> String

    /// One step: mostly writes, sometimes a delete, an eviction or an import of one entry.
    static func randomOperation(_ random: inout SplitMix64, namespace: Namespace, policy: CachePolicy) -> Operation {
        let writes = WriteSemanticsTests.randomGroup(&random, policy: policy)
        let write = writes[0](namespace)
        let key = write.key
        switch random.next(below: 10) {
        case 0:
            return { store in "deleted \(try store.delete(namespace, key))" }
        case 1:
            var predicate = EvictionPredicate()
            switch random.next(below: 4) {
            case 0: predicate.tag = "b"
            case 1: predicate.model = "m1"
            // Idle and age: what a rewrite counts as an access, and a replaced entry's creation.
            case 2: predicate.idleFor = 40
            default: predicate.olderThan = 50
            }
            return { store in "evicted \(try store.evict(namespace, predicate).entries)" }
        case 2:
            // A chunk of 1 to 5 entries (a key twice, sometimes; one long expired, sometimes),
            // in key order as a chunk reaches the store: PostgreSQL decides it as one set and
            // the memory store entry by entry, and both must agree.
            let conflict = ImportConflictPolicy.allCases[Int(random.next(below: 3))]
            var group = writes.map { $0(namespace) }
            if random.next(below: 3) == 0 { group.append(group[0]) }
            let ages = group.map { _ in Double(random.next(below: 4)) }
            let expired = group.indices.map { _ in random.next(below: 6) == 0 }
            return { store in
                let now = store.clock.now()
                let entries = zip(group, zip(ages, expired)).map { write, timing in
                    let (age, gone) = timing
                    let updated = Double(write.ttlSeconds ?? 2) + age
                    return DumpedEntry(namespace: namespace.name, key: write.key.bytes, body: write.body.bytes,
                                       encoding: write.body.encoding, contentType: write.contentType,
                                       identitySize: write.body.identitySize, etag: write.body.etag, model: write.model,
                                       version: write.version, promptDigest: nil, tags: write.tags, metadata: write.metadata,
                                       inputTokens: 1, outputTokens: 2,
                                       createdAt: RFC3339.formatWithFraction(now.addingTimeInterval(-10 - age)),
                                       updatedAt: RFC3339.formatWithFraction(now.addingTimeInterval(-updated)),
                                       expiresAt: RFC3339.formatWithFraction(now.addingTimeInterval(gone ? -60 : updated)),
                                       staleWhileRevalidate: 0, hitCount: 3 + Int(age), lastAccessedAt: nil)
                }
                let sorted = entries.enumerated().sorted {
                    ($0.element.key.lexicographicallyPrecedes($1.element.key))
                        || ($0.element.key == $1.element.key && $0.offset < $1.offset)
                }.map(\.element)
                return "imported \(try store.importEntries(sorted, policy: conflict))"
            }
        default:
            var conditional = write
            switch random.next(below: 4) {
            case 0: conditional.condition = .absent
            case 1: conditional.condition = .match(["*"])
            case 2: conditional.condition = .match(["\"nope\"", write.body.etag])
            default: break
            }
            return { store in "wrote \(try Self.put(conditional, into: store))" }
        }
    }

    /// A write through `submit`, as the service makes it, waited for.
    static func put(_ write: EntryWrite, into store: any EntryStorage) throws -> WriteOutcome {
        let outcome = HandOff<Result<WriteOutcome, any Error>>()
        store.submit(write, committed: nil) { result, _ in outcome.put(result) }
        return try #require(outcome.take(before: .now() + 10)).get()
    }

    /// Every entry of the namespace, read back and exported, and its change feed.
    static func expectSameContents(_ postgres: EntryStore, _ memory: MemoryStore, _ namespace: Namespace,
                                   context: String) throws {
        let exports = try [postgres as any EntryStorage, memory].map { store in
            var lines: [String] = []
            _ = try store.exportPage(namespace: namespace, since: nil, after: nil, limit: 1000, byteBudget: .max) {
                lines.append(describe($0))
            }
            return lines
        }
        #expect(exports[0] == exports[1], "\(context): exports")
        for key in (0..<5).compactMap({ EntryKey(Array("k\($0)".utf8)) }) {
            let entries = try [postgres.fetch(namespace, key), memory.fetch(namespace, key)].map { $0.map(describe) }
            #expect(entries[0] == entries[1], "\(context): entry \(key.display)")
        }
        _ = try postgres.sequenceChanges()
        // Each key's changes in the order they were made: the order between keys of one step
        // (an eviction deletes several rows in one statement) is not a meaning.
        let feeds = try [postgres as any EntryStorage, memory].map { store in
            try store.changes(namespace, after: 0, limit: 10_000, bodies: true).changes.enumerated().sorted {
                (String(decoding: $0.element.key, as: UTF8.self), $0.offset) < (String(decoding: $1.element.key, as: UTF8.self), $1.offset)
            }.map { _, change in
                "\(change.kind) \(String(decoding: change.key, as: UTF8.self)) \(change.etag ?? "-") "
                    + "\(change.expiresAt ?? "-") \(change.body?.count ?? -1)"
            }
        }
        #expect(feeds[0] == feeds[1], "\(context): change feeds")
    }

    /// What a reader sees of an entry, times to the millisecond (PostgreSQL keeps microseconds).
    static func describe(_ entry: StoredEntry) -> String {
        "\(entry.etag) \(entry.body.count) \(entry.encoding) \(entry.contentType) \(entry.model ?? "-") "
            + "\(entry.metadata ?? "-") \(entry.inputTokens)/\(entry.outputTokens) \(millis(entry.updatedAt)) "
            + "\(millis(entry.expiresAt)) \(entry.staleWhileRevalidate)"
    }

    static func describe(_ entry: DumpedEntry) -> String {
        "\(String(decoding: entry.key, as: UTF8.self)) \(entry.etag) \(entry.body.count) \(entry.tags) "
            + "\(entry.model ?? "-") \(entry.version ?? "-") \(entry.promptDigest ?? "-") \(entry.createdAt) "
            + "\(entry.updatedAt) \(entry.expiresAt ?? "-") \(entry.staleWhileRevalidate) \(entry.hitCount)"
    }

    static func millis(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1000).rounded()) }
}

