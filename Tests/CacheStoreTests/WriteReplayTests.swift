import CacheCore
@testable import CacheStore
import Foundation
import Locking
import Postgres
import Testing
import TestSupport

/// A write group is replayed one write at a time only when it certainly rolled back.
@Suite struct WriteReplayTests {
    @Test func onlyAStatementTheServerRejectedIsReplayed() {
        // Rejected by the server: rolled back whole, safe to run again write by write.
        #expect(EntryWriteBatcher.mayReplayOneByOne(PostgresError(.query, sqlState: .checkViolation)))
        #expect(EntryWriteBatcher.mayReplayOneByOne(PostgresError(.query, sqlState: .deadlockDetected)))
        // Outcome unknown, or known to be committed: never replayed.
        #expect(!EntryWriteBatcher.mayReplayOneByOne(PostgresError(.connectionLost)))
        #expect(!EntryWriteBatcher.mayReplayOneByOne(PostgresError(.decoding, serverMessage: "short result")))
        #expect(!EntryWriteBatcher.mayReplayOneByOne(PostgresError(.query, sqlState: .queryCanceled)))
        #expect(!EntryWriteBatcher.mayReplayOneByOne(CancellationError()))
    }
}
