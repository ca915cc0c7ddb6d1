@testable import CacheCore
import Foundation
import Testing

/// The near-cache on its own: admission, the byte budget, invalidation, and a fill that
/// races an invalidation never putting back the replaced entry.
@Suite struct NearCacheTests {
    func entry(_ key: UInt8, namespace: String = "n", body: Int = 100, etag: String = "e") -> StoredEntry {
        StoredEntry(id: Int64(key), namespace: namespace, key: [key], body: [UInt8](repeating: 1, count: body),
                    encoding: .identity, contentType: "t", identitySize: body, etag: etag, model: nil, metadata: nil,
                    inputTokens: 0, outputTokens: 0, updatedAt: Date(), expiresAt: Date().addingTimeInterval(60))
    }

    func admitted(_ near: NearCache, _ stored: StoredEntry) {
        near.admit(stored, since: near.sequence)
        near.admit(stored, since: near.sequence)  // admitted on its second read
    }

    @Test func admitsOnTheSecondReadAndAnswersWhileEnabled() {
        let near = NearCache(budget: 1 << 20, maxEntryBytes: 1 << 16)
        near.confirmLive(for: 60)
        near.admit(entry(1), since: near.sequence)
        #expect(near.entry("n", [1]) == nil, "a one-hit wonder is not kept")
        near.admit(entry(1), since: near.sequence)
        #expect(near.entry("n", [1])?.etag == "e")
        near.disable()
        #expect(near.entry("n", [1]) == nil && near.count == 0, "off: nothing answered, and emptied")
    }

    @Test func aFillThatRacesAWriteIsNotKept() {
        let near = NearCache(budget: 1 << 20, maxEntryBytes: 1 << 16)
        near.confirmLive(for: 60)
        near.admit(entry(1), since: near.sequence)
        let before = near.sequence  // a read begins
        near.invalidate("n", [1])  // a write lands
        near.admit(entry(1, etag: "old"), since: before)  // the read comes back with the old row
        #expect(near.entry("n", [1]) == nil)
        let namespaceRead = near.sequence
        near.invalidate("n", nil)
        near.admit(entry(2), since: namespaceRead)
        near.admit(entry(2), since: namespaceRead)
        #expect(near.entry("n", [2]) == nil, "a namespace-wide invalidation counts for its keys")
        let reenabled = near.sequence
        near.disable()  // the listener dropped, and came back
        near.confirmLive(for: 60)
        near.admit(entry(3), since: reenabled)
        near.admit(entry(3), since: reenabled)
        #expect(near.entry("n", [3]) == nil, "a read from before a reset is not kept")
    }

    @Test func staysWithinItsBudgetLeastRecentlyUsedOut() {
        let near = NearCache(budget: 3 * 300, maxEntryBytes: 1 << 16)
        near.confirmLive(for: 60)
        for key in UInt8(1)...3 { admitted(near, entry(key)) }
        #expect(near.count == 3)
        _ = near.entry("n", [1])  // 1 is now the most recent
        admitted(near, entry(4))
        #expect(near.entry("n", [2]) == nil && near.entry("n", [1]) != nil && near.entry("n", [4]) != nil)
        #expect(near.heldBytes <= 900)
        admitted(near, entry(5, body: 70_000))
        #expect(near.entry("n", [5]) == nil, "larger than the entry limit: never kept")
    }

    @Test func invalidatesAKeyOrANamespace() {
        let near = NearCache(budget: 1 << 20, maxEntryBytes: 1 << 16)
        near.confirmLive(for: 60)
        admitted(near, entry(1, namespace: "a"))
        admitted(near, entry(2, namespace: "a"))
        admitted(near, entry(1, namespace: "b"))
        near.invalidate("a", [1])
        #expect(near.entry("a", [1]) == nil && near.entry("a", [2]) != nil)
        near.invalidate("a", nil)
        #expect(near.entry("a", [2]) == nil && near.entry("b", [1]) != nil && near.count == 1)
    }

    /// Heartbeats keep it serving; when they stop, nothing kept is served, and the next one
    /// starts it empty (notifications may have been missed meanwhile).
    @Test func servesOnlyWhileHeartbeatsComeBack() {
        let near = NearCache(budget: 1 << 20, maxEntryBytes: 1 << 16)
        admitted(near, entry(1))
        #expect(near.entry("n", [1]) == nil, "never confirmed: off")
        near.confirmLive(for: 0.2)
        admitted(near, entry(1))
        #expect(near.entry("n", [1]) != nil)
        near.confirmLive(for: 0.2)
        #expect(near.entry("n", [1]) != nil, "a heartbeat in time keeps what is kept")
        Thread.sleep(forTimeInterval: 0.3)
        #expect(near.entry("n", [1]) == nil && !near.enabled, "silence: nothing served")
        near.confirmLive(for: 60)
        #expect(near.count == 0, "after a silence it starts empty")
    }

    /// Identity bytes attach only to the very read a node holds, count toward the budget, and
    /// go with the node when a write replaces or drops it.
    @Test func inflatedBytesAttachToTheReadKeptAndCountTowardTheBudget() throws {
        let near = NearCache(budget: 1 << 20, maxEntryBytes: 1 << 16)
        near.confirmLive(for: 60)
        admitted(near, entry(1))
        let kept = try #require(near.entry("n", [1]))
        let before = near.heldBytes
        near.attach(inflated: [UInt8](repeating: 7, count: 500), to: entry(1))
        #expect(near.heldBytes == before, "another read of the same row, equal member for member, is not the node's")
        near.attach(inflated: [UInt8](repeating: 7, count: 500), to: kept)
        #expect(near.heldBytes == before + 500)
        #expect(near.entry("n", [1])?.inflatedBody == [UInt8](repeating: 7, count: 500))
        near.attach(inflated: [UInt8](repeating: 8, count: 900), to: kept)
        #expect(near.heldBytes == before + 500 && near.entry("n", [1])?.inflatedBody?.first == 7, "attached once")
        // A write replaces the row: the next read is kept without the old bytes, and the old
        // hit's attachment, arriving late, does not land on it.
        near.invalidate("n", [1])
        #expect(near.heldBytes == 0)
        admitted(near, entry(1, etag: "f"))
        near.attach(inflated: [UInt8](repeating: 7, count: 500), to: kept)
        let replaced = try #require(near.entry("n", [1]))
        #expect(replaced.etag == "f" && replaced.inflatedBody == nil && near.heldBytes == before)
        // Replaced by a re-read (admit of a kept key): its cost is the new read's, not the sum.
        near.attach(inflated: [UInt8](repeating: 9, count: 300), to: replaced)
        admitted(near, entry(1, etag: "g"))
        #expect(near.heldBytes == before && near.entry("n", [1])?.inflatedBody == nil)
    }

    /// A namespace wipe leaves its nodes to be dropped when next met: a hit in flight must not
    /// attach bytes to one (they would count, and push live copies out, for a dead node).
    @Test func noBytesAttachToACopyOfAWipedNamespaceOrPastTheEntryLimit() throws {
        let near = NearCache(budget: 1 << 20, maxEntryBytes: 1000)
        near.confirmLive(for: 60)
        admitted(near, entry(1))
        let kept = try #require(near.entry("n", [1]))
        let before = near.heldBytes
        near.invalidate("n", nil)
        #expect(!near.attach(inflated: [UInt8](repeating: 7, count: 500), to: kept))
        #expect(near.heldBytes == before, "nothing counted for the wiped copy")
        admitted(near, entry(2))
        let two = try #require(near.entry("n", [2]))
        #expect(!near.attach(inflated: [UInt8](repeating: 7, count: 1000), to: two), "past the entry limit")
        #expect(near.attach(inflated: [UInt8](repeating: 7, count: 600), to: two))
        #expect(!near.attach(inflated: [UInt8](repeating: 7, count: 600), to: two), "attached once")
    }

    @Test func attachedBytesThatWouldPassTheBudgetAreNotKeptAndOthersMakeRoom() throws {
        let near = NearCache(budget: 1000, maxEntryBytes: 1 << 16)
        near.confirmLive(for: 60)
        admitted(near, entry(1))
        admitted(near, entry(2))
        let one = try #require(near.entry("n", [1]))
        near.attach(inflated: [UInt8](repeating: 1, count: 1000), to: one)
        #expect(near.entry("n", [1])?.inflatedBody == nil, "more than the whole budget: not kept")
        near.attach(inflated: [UInt8](repeating: 1, count: 600), to: one)
        #expect(near.heldBytes <= 1000, "within the budget: \(near.heldBytes)")
        #expect(near.entry("n", [1])?.inflatedBody?.count == 600 && near.entry("n", [2]) == nil,
                "the other, least recently used, made room")
    }
}
