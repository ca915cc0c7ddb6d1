import Foundation
import Glibc
import Postgres
import Testing
import TeamCache
import TestSupport

/// Expand/contract migrations: a later build's migration declared compatible with older
/// builds leaves them serving (and saying so); one that is not makes them unready.
@Suite struct SchemaCompatibilityTests {
    /// The versions a later build would add: the next two after this build's.
    static let next = ((try? Migration.load(from: TestPaths.migrations).count) ?? 0) + 1
    static func file(_ version: Int, _ name: String) -> String { String(format: "%04d_%@.sql", version, name) }
    /// An expand step: a new nullable column that older builds never name.
    static let expand = (file(next, "add_entry_note"), "\(Migration.compatibleMarker)\nALTER TABLE entries ADD COLUMN note text;\n")
    /// A contract step, not declared compatible.
    static let contract = (file(next + 1, "drop_entry_note"), "ALTER TABLE entries DROP COLUMN note;\n")

    /// This build's migrations plus `extra`: the migration set of a later build.
    static func laterBuild(_ extra: [(String, String)]) throws -> URL {
        let folder = URL(fileURLWithPath: NSTemporaryDirectory())
            .appendingPathComponent("tc-later-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        for file in try FileManager.default.contentsOfDirectory(atPath: TestPaths.migrations.path) {
            try FileManager.default.copyItem(at: TestPaths.migrations.appendingPathComponent(file),
                                             to: folder.appendingPathComponent(file))
        }
        for (name, sql) in extra { try sql.write(to: folder.appendingPathComponent(name), atomically: true, encoding: .utf8) }
        return folder
    }

    static func runner(_ folder: URL) throws -> MigrationRunner {
        MigrationRunner(migrations: try Migration.load(from: folder))
    }

    @Test func theRunnerToleratesCompatibleMigrationsAheadAndRefusesOthers() throws {
        let name = try TestDatabase.shared.migratedDatabase(prefix: "compat")
        let connection = try TestDatabase.shared.connect(database: name)
        let current = try Self.runner(TestPaths.migrations)
        #expect(try current.schemaState(on: connection) == .current)
        let later = try Self.laterBuild([Self.expand])
        defer { try? FileManager.default.removeItem(at: later) }
        #expect(try Self.runner(later).apply(on: connection).map(\.version) == [Self.next])
        #expect(try current.schemaState(on: connection) == .aheadCompatible(versions: [Self.next]))
        #expect(try current.apply(on: connection).isEmpty, "an older build's migrate applies nothing")
        let contracted = try Self.laterBuild([Self.expand, Self.contract])
        defer { try? FileManager.default.removeItem(at: contracted) }
        try Self.runner(contracted).apply(on: connection)
        #expect(throws: MigrationError.incompatibleAhead(version: Self.next + 1)) { try current.requireCurrent(on: connection) }
        // The build that knows the expand step but not the contract step is refused too.
        #expect(throws: MigrationError.incompatibleAhead(version: Self.next + 1)) {
            try Self.runner(later).requireCurrent(on: connection)
        }
    }

    /// The documented rollout: migrate with the new build, then roll. The old build keeps
    /// serving through an expand step and goes unready at a contract step.
    @Test func anOlderServerStaysReadyAfterALaterBuildMigratedAhead() throws {
        let name = try TestDatabase.shared.migratedDatabase(prefix: "roll")
        let server = try ServeProcess(database: name, environment: ["TEAMCACHE_MIGRATIONS_DIR": TestPaths.migrations.path])
        defer { server.stop(SIGTERM) }
        #expect(server.waitUntilListening())
        let ready = try Self.readyz(server.port)
        #expect(ready.status == 200 && String(decoding: ready.body, as: UTF8.self).contains("\"schema\":\"current\""))
        let later = try Self.laterBuild([Self.expand])
        defer { try? FileManager.default.removeItem(at: later) }
        try Self.runner(later).apply(on: try TestDatabase.shared.connect(database: name))
        let aheadBy = "\"ahead_by\":[\(Self.next)]"
        let ahead = try Self.readyz(server.port, until: { $0.status == 200 && $0.text.contains(aheadBy) })
        #expect(ahead.status == 200 && ahead.text.contains(aheadBy), "\(ahead.status) \(ahead.text)")
        // And it serves.
        let client = try RawClient(port: server.port, timeout: 10)
        #expect(try client.request("PUT", "/v1/caches/roll/entries/k", body: [1, 2]).status == 201)
        #expect(try client.request("GET", "/v1/caches/roll/entries/k").body == [1, 2])
        let contracted = try Self.laterBuild([Self.expand, Self.contract])
        defer { try? FileManager.default.removeItem(at: contracted) }
        try Self.runner(contracted).apply(on: try TestDatabase.shared.connect(database: name))
        let unready = try Self.readyz(server.port, until: { $0.status == 503 })
        #expect(unready.status == 503 && unready.text.contains("migration \(Self.next + 1)"), "\(unready.status) \(unready.text)")
    }

    /// `/readyz` until `done` holds (or 10 s pass): the probe checks migrations every 2 s.
    static func readyz(_ port: Int, until done: (RawClient.Response) -> Bool = { _ in true }) throws -> RawClient.Response {
        let deadline = Date().addingTimeInterval(10)
        while true {
            let response = try RawClient(port: port, timeout: 5).request("GET", "/readyz")
            if done(response) || Date() > deadline { return response }
            usleep(100_000)
        }
    }
}

extension RawClient.Response {
    var text: String { String(decoding: body, as: UTF8.self) }
}
