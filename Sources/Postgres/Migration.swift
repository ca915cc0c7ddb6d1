import Cryptography
import Foundation

/// One forward-only migration file, `NNNN_snake_name.sql`.
public struct Migration: Sendable, Equatable {
    public let version: Int
    public let name: String
    public let sql: String
    /// Lowercase hex SHA-256 of the file's bytes; an applied file must never change.
    public let checksum: String
    /// The file declares that builds which do not know it keep working on a database it was
    /// applied to (an "expand" step: new tables, columns with defaults, new functions). The
    /// runner records it, so older builds can read it from the database. Undeclared means
    /// it breaks them: an older build finding it applied reports itself unready.
    public let keepsOlderBuildsWorking: Bool

    /// The line that declares `keepsOlderBuildsWorking`, on a line of its own.
    public static let compatibleMarker = "-- teamcache: compatible-with-older-builds"
    /// The line a migration carries when it takes a lock on a table the service uses (ALTER
    /// TABLE, LOCK TABLE, CREATE TRIGGER, a plain CREATE INDEX): while it waits for that lock,
    /// every session behind it waits too, so the runner waits at most its lock timeout per try.
    public static let tableLockMarker = "-- teamcache: takes-table-locks"

    /// Declares `tableLockMarker` on a line of its own.
    public var declaresTableLocks: Bool { Self.hasLine(Self.tableLockMarker, in: sql) }

    /// Whether `sql` has `marker` on a line of its own (spaces, tabs and a CR around it
    /// aside). Over bytes: splitting 18 files into `Character` lines and trimming each took ~72
    /// million instructions (callgrind), ~4 ms of every command's start: `teamcache import` of
    /// nothing took 37-41 ms, and 30-34 ms so.
    static func hasLine(_ marker: String, in sql: String) -> Bool {
        let text = { (byte: UInt8) in byte != UInt8(ascii: " ") && byte != UInt8(ascii: "\t") && byte != UInt8(ascii: "\r") }
        return sql.utf8.split(separator: UInt8(ascii: "\n")).contains { line in
            guard let first = line.firstIndex(where: text), let last = line.lastIndex(where: text) else { return false }
            return line[first...last].elementsEqual(marker.utf8)
        }
    }

    /// Whether the SQL (comments aside) has a statement that locks a whole table.
    public var takesTableLocks: Bool {
        let code = sql.split(separator: "\n").map { line in line.range(of: "--").map { line[..<$0.lowerBound] } ?? line[...] }
            .joined(separator: " ").uppercased().split(whereSeparator: \.isWhitespace).joined(separator: " ")
        return ["LOCK TABLE", "ALTER TABLE", "CREATE TRIGGER", "CREATE OR REPLACE TRIGGER", "DROP TRIGGER",
                "CREATE INDEX ", "CREATE UNIQUE INDEX ", "DROP INDEX ", "TRUNCATE", "REINDEX", "CLUSTER"]
            .contains { phrase in
                var rest = code[...]
                while let found = rest.range(of: phrase) {
                    if !code[found.upperBound...].hasPrefix("CONCURRENTLY") { return true }
                    rest = code[found.upperBound...]
                }
                return false
            }
    }

    public init(version: Int, name: String, sql: String) {
        self.version = version
        self.name = name
        self.sql = sql
        self.checksum = Bytes.hex(SHA256.hash(sql))
        keepsOlderBuildsWorking = Self.hasLine(Self.compatibleMarker, in: sql)
    }

    /// Reads and validates every migration in `directory`: names, no duplicates, no gaps from 1.
    public static func load(from directory: URL) throws -> [Migration] {
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: directory.path)
        } catch {
            throw MigrationError.unreadable(directory.path)
        }
        var migrations: [Migration] = []
        for file in names.sorted() where file.hasSuffix(".sql") {
            guard let (version, name) = parse(fileName: file) else { throw MigrationError.badFileName(file) }
            let sql = try String(contentsOf: directory.appendingPathComponent(file), encoding: .utf8)
            migrations.append(Migration(version: version, name: name, sql: sql))
        }
        try validateSequence(migrations)
        return migrations
    }

    static func validateSequence(_ migrations: [Migration]) throws {
        for (index, migration) in migrations.enumerated() {
            if index > 0 && migrations[index - 1].version == migration.version {
                throw MigrationError.duplicate(migration.version)
            }
            if migration.version != index + 1 { throw MigrationError.gap(expected: index + 1, found: migration.version) }
        }
    }

    private static func parse(fileName: String) -> (Int, String)? {
        let stem = fileName.dropLast(4)
        let parts = stem.split(separator: "_", maxSplits: 1)
        guard parts.count == 2, parts[0].count == 4, let version = Int(parts[0]), version > 0,
              parts[1].allSatisfy({ $0.isLowercase || $0.isNumber || $0 == "_" }) else { return nil }
        return (version, String(parts[1]))
    }
}

/// Why migrations refused to run.
public enum MigrationError: Error, CustomStringConvertible, Equatable {
    case unreadable(String)
    case badFileName(String)
    case duplicate(Int)
    case gap(expected: Int, found: Int)
    case checksumChanged(version: Int, name: String)
    case unknownApplied(version: Int)
    case incompatibleAhead(version: Int)
    case pending(count: Int)

    public var description: String {
        switch self {
        case .unreadable(let path): "cannot read migrations directory \(path)"
        case .badFileName(let file): "migration file \(file) is not named NNNN_snake_name.sql"
        case .duplicate(let version): "two migration files carry version \(version)"
        case .gap(let expected, let found): "migration \(expected) is missing (found \(found) next)"
        case .checksumChanged(let version, let name):
            "migration \(version) (\(name)) was edited after it was applied; add a new migration instead"
        case .unknownApplied(let version):
            "the database has migration \(version) applied, which this build does not know (newer build?)"
        case .incompatibleAhead(let version):
            "the database has migration \(version) applied, which this build does not know and which does not "
                + "keep older builds working; run a newer build"
        case .pending(let count):
            "the database is \(count) migration(s) behind; run `teamcache migrate` first"
        }
    }
}
