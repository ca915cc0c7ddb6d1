import Foundation
import Glibc
import Locking
import Postgres
import Testing

/// Account lookups from many threads at once agree with one made alone (getpwnam's shared
/// buffer once gave a cluster's log to another user when two clusters started together).
@Suite struct SystemAccountTests {
    @Test func lookupsFromManyThreadsAtOnceAgree() throws {
        let root = try #require(SystemAccount.named("root"))
        #expect(root.uid == 0)
        let alone = SystemAccount.named("postgres")
        let wrong = Locked(0)
        DispatchQueue.concurrentPerform(iterations: 8) { index in
            for round in 0..<500 {
                let name = (index + round).isMultiple(of: 2) ? "root" : "postgres"
                let expected = name == "root" ? root : alone
                if SystemAccount.named(name) != expected { wrong.withLock { $0 += 1 } }
            }
        }
        #expect(wrong.value == 0)
        #expect(SystemAccount.named("no-such-user-\(getpid())") == nil)
    }
}
