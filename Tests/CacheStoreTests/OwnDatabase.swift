import CacheCore
import CacheStore
import Postgres
import TestSupport

/// A migrated database of a test's own, a pool on it and a store over that pool: for tests
/// that read or change rows no other suite may see (the caller closes the pool's idle
/// connections when done: `defer { own.pool.closeIdle() }`).
struct OwnDatabase {
    let name: String
    let pool: ConnectionPool
    let policy = CachePolicy()
    let store: EntryStore

    init(prefix: String, maxConnections: Int = 2) throws {
        name = try TestDatabase.shared.migratedDatabase(prefix: prefix)
        pool = TestDatabase.shared.pool(on: name, maxConnections: maxConnections)
        store = EntryStore(pool: pool, policy: policy)
    }

    /// A connection of the test's own to the database (outside the pool).
    func connect() throws -> PostgresConnection { try TestDatabase.shared.connect(database: name) }
}
