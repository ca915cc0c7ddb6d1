import CacheCore
import CacheStore
import Foundation
import Testing

/// `DumpImport` over the memory store: an overlapped import (a chunk committing while the
/// next is parsed) counts and lists exactly what a plain one does.
@Suite struct DumpImportTests {
    /// 1,300 lines over three chunks: malformed lines in the first and the second, entries
    /// past a namespace's cap in the first (known only when that chunk commits, after the
    /// second's malformed lines were parsed and rejected). Both imports agree on every count and list the same lowest line numbers.
    @Test func anOverlappedImportCountsAndListsAsAPlainOne() throws {
        func run(overlapped: Bool) throws -> (counts: String, listed: [Int], unlisted: Int, stored: Int) {
            let store = MemoryStore(policy: CachePolicy(), clock: SystemClock())
            try store.setSettings(try #require(Namespace("tiny")), NamespaceSettings(maxBytes: 100))
            var work = DumpImport(store: store, namespace: nil, conflict: .replace, listed: 4, overlapped: overlapped)
            for number in 1...1_300 {
                let line: String
                switch number {
                case 2, 600, 601, 602: line = "not json"
                case 7, 9: line = "{\"namespace\":\"tiny\",\"key\":\"big\(number)\",\"body\":\"\(String(repeating: "z", count: 300))\"}"
                default: line = "{\"namespace\":\"ns\",\"key\":\"k\(number)\",\"body\":\"line \(number)\"}"
                }
                try work.add(Array(line.utf8), number: number)
            }
            try work.commit()
            var stored = 0
            _ = try store.exportPage(namespace: Namespace("ns"), since: nil, after: nil, limit: 1000,
                                     byteBudget: .max) { _ in stored += 1 }
            return (work.counts, work.rejections.map(\.line), work.unlisted, stored)
        }
        let plain = try run(overlapped: false)
        let overlapped = try run(overlapped: true)
        #expect(plain.counts == "imported 1294, unchanged 0, skipped 0, expired 0, store_full 2, rejected 4")
        #expect(plain.listed == [2, 7, 9, 600] && plain.unlisted == 2)
        #expect(plain.stored == 1000, "the first page of the namespace's entries")
        #expect(overlapped.counts == plain.counts)
        #expect(overlapped.listed == plain.listed && overlapped.unlisted == plain.unlisted)
        #expect(overlapped.stored == plain.stored)
    }
}
