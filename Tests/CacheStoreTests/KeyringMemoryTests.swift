import CacheCore
@testable import CacheStore
import Cryptography
import Foundation
import Testing

/// The keyring's memory of which namespaces seal with which key stays bounded however many
/// namespaces are written: answers past their time are pruned.
@Suite struct KeyringMemoryTests {
    @Test func namespacesWrittenOnceAreForgotten() {
        let keyring = Keyring(master: nil)
        for index in 0..<100_000 {
            // One new namespace every millisecond: each answer is good for 10 s.
            keyring.remember("ns-\(index)", nil, now: Double(index) / 1000)
        }
        #expect(keyring.rememberedNamespaces <= 2 * 10_000 + 1024, "\(keyring.rememberedNamespaces) remembered")
        #expect(keyring.rememberedNamespaces >= 10_000, "answers still in their time are kept")
    }
}
