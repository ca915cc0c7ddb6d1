import Foundation
import Testing
import TestSupport

/// The layering `Package.swift` declares, checked where a slip would not fail the build: the
/// domain (`CacheCore`) knows nothing of PostgreSQL, neither as a dependency nor as SQL.
@Suite struct LayeringTests {
    static func sources(_ module: String) throws -> [(name: String, text: String)] {
        let folder = TestPaths.repository.appendingPathComponent("Sources/\(module)")
        return try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(".swift") }.map {
            ($0, try String(contentsOf: folder.appendingPathComponent($0), encoding: .utf8))
        }
    }

    @Test func theDomainDependsOnNoDatabase() throws {
        let manifest = try String(contentsOf: TestPaths.repository.appendingPathComponent("Package.swift"),
                                  encoding: .utf8)
        let target = try #require(manifest.range(of: #".target(name: "CacheCore""#))
        let declaration = manifest[target.lowerBound...].prefix { $0 != ")" }
        #expect(!declaration.contains("Postgres") && !declaration.contains("CLibPQ"), "\(declaration)")
        for (name, text) in try Self.sources("CacheCore") {
            #expect(!text.contains("import Postgres") && !text.contains("import CLibPQ"), "\(name) imports the database")
            for statement in ["SELECT ", "INSERT INTO", "DELETE FROM", "UPDATE "] {
                let code = text.split(separator: "\n").filter { !$0.trimmingCharacters(in: .whitespaces).hasPrefix("//") }
                #expect(!code.contains { $0.contains(statement) }, "\(name) holds SQL (\(statement))")
            }
        }
    }
}
