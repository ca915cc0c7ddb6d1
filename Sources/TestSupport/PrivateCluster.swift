import Foundation
import Glibc
import Postgres
import TeamCache

/// A PostgreSQL cluster of one test's own, for tests that stop, stall or kill it (the
/// shared test database must stay up for the others): started without durability under a
/// temporary folder, migrated unless asked not to. `remove` stops it and deletes the folder.
public final class PrivateCluster {
    public let cluster: EmbeddedPostgres
    public let url: String
    private let root: URL

    public init(_ name: String, migrated: Bool = true) throws {
        root = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("\(name)-\(getpid())")
        cluster = EmbeddedPostgres(root: root, options: .init(durable: false, name: Configuration.applicationName))
        url = try cluster.start()
        if migrated {
            try MigrationRunner(migrations: try Migration.load(from: TestPaths.migrations))
                .apply(on: try PostgresConnection(url: url))
        }
    }

    public func remove() {
        cluster.stop(discarding: true)
        try? FileManager.default.removeItem(at: root)
    }
}
