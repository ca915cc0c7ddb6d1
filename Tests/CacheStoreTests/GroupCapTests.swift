import CacheCore
@testable import CacheStore
import Foundation
import Postgres
import Testing
import TestSupport

/// In one group, a write too large for its namespace's cap is refused, and a small write
/// after it that fits is stored: the refused write's bytes do not count against it (they
/// once did, in the group's running sum: 507 for a write that fit). Writes that each fit but
/// not together are still held to the cap.
@Suite struct GroupCapTests {
    @Test func aWriteThatFitsIsStoredBesideOneThatDoesNot() throws {
        let own = try OwnDatabase(prefix: "groupcap")
        defer { own.pool.closeIdle() }
        let (policy, store) = (own.policy, own.store)
        let namespace = try #require(Namespace("capped"))
        let connection = try own.connect()
        try connection.execute("INSERT INTO namespace_settings (namespace, max_bytes) VALUES ('capped', 2000)")
        var random = SystemRandomNumberGenerator()
        func write(_ key: String, bytes: Int) throws -> EntryWrite {
            // Random bytes: stored as they are (gzip would not shrink them).
            let body = (0..<bytes).map { _ in UInt8.random(in: 0...255, using: &random) }
            return EntryWrite(namespace: namespace, key: try #require(EntryKey(Array(key.utf8))),
                              body: StoredBody.fromIdentity(body, contentType: "application/octet-stream", policy: policy),
                              contentType: "application/octet-stream")
        }
        let outcomes = try EntryGroupWrite.run([try write("big", bytes: 5000), try write("small", bytes: 100)],
                                               createOnly: false, store: store)
        #expect(outcomes.count == 2)
        if case .storeFull = outcomes[0] {} else { Issue.record("the big write: \(outcomes[0])") }
        if case .created = outcomes[1] {} else { Issue.record("the small write, which fits: \(outcomes[1])") }
        #expect(try store.fetch(namespace, try #require(EntryKey(Array("small".utf8)))) != nil)
        #expect(try store.fetch(namespace, try #require(EntryKey(Array("big".utf8)))) == nil)
        // Writes that each fit alone but not together: the first is stored, the rest refused
        // (never over the cap: 100 + 1,500 stored of 2,000).
        let each = try EntryGroupWrite.run([try write("a", bytes: 1500), try write("b", bytes: 1500),
                                            try write("c", bytes: 1500)], createOnly: false, store: store)
        let stored = each.filter { if case .created = $0 { true } else { false } }.count
        #expect(stored == 1, "\(each)")
        let total = try connection.query("SELECT sum(stored_size)::int8 AS n FROM entries WHERE namespace = 'capped'")
        #expect(try (total.first?.int("n") ?? 0) <= Int(Double(2000) * policy.hardCapRatio))
    }
}
