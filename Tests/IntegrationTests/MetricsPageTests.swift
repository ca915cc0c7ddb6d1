import Foundation
import Observability
import TeamCache
import Testing
import TestSupport

/// The metric catalogue is the one place a family is defined: a running service serves
/// exactly its families (names, kinds and help as written there), and docs/metrics.md, the
/// page operators read to write alerts, is its rendering.
@Suite struct MetricsPageTests {
    /// The families of a Prometheus text exposition: name → (kind, help).
    static func families(in exposition: String) -> [String: (kind: String, help: String)] {
        var helps: [String: String] = [:], families: [String: (kind: String, help: String)] = [:]
        for line in exposition.split(separator: "\n") {
            let parts = line.split(separator: " ", maxSplits: 3)
            guard parts.count >= 4, parts[0] == "#" else { continue }
            let name = String(parts[2])
            if parts[1] == "HELP" { helps[name] = String(parts[3]) }
            if parts[1] == "TYPE" { families[name] = (String(parts[3]), helps[name] ?? "") }
        }
        return families
    }

    static let page = TestPaths.repository.appendingPathComponent("docs/metrics.md")
    static let start = "<!-- metrics table: generated -->\n", end = "<!-- end of metrics table -->\n"

    @Test func aRunningServiceServesExactlyTheCatalogue() throws {
        let served = Self.families(in: try TestService.shared.metrics())
        #expect(served.count > 20, "the exposition had \(served.count) families")
        let catalogue = Dictionary(uniqueKeysWithValues: MetricCatalogue.all.map { ($0.name, $0) })
        #expect(catalogue.count == MetricCatalogue.all.count, "a family is defined twice")
        for (name, family) in served {
            guard let defined = catalogue[name] else {
                Issue.record("\(name) is served but not in the catalogue")
                continue
            }
            #expect(family.kind == defined.kind.rawValue, "\(name): served as a \(family.kind)")
            #expect(family.help == defined.help, "\(name): served with the help \"\(family.help)\"")
        }
        let missing = catalogue.keys.filter { served[$0] == nil && !MetricCatalogue.conditional.contains($0) }
        #expect(missing.isEmpty, "in the catalogue, never served: \(missing.sorted())")
        // The near-cache's families are served whenever it is on (CI runs the suite both ways).
        if ProcessInfo.processInfo.environment["TEAMCACHE_NEAR_CACHE_BYTES"] != "0" {
            let near = MetricCatalogue.all.map(\.name).filter { $0.contains("near_cache") }
            #expect(near.count == 4 && near.allSatisfy { served[$0] != nil }, "near-cache families: \(near)")
        }
    }

    @Test func theMetricsPageIsTheCataloguesRendering() throws {
        let text = try String(contentsOf: Self.page, encoding: .utf8)
        let table = MetricCatalogue.table()
        guard let from = text.range(of: Self.start), let to = text.range(of: Self.end, range: from.upperBound..<text.endIndex)
        else {
            Issue.record("docs/metrics.md lacks the generated table's markers")
            return
        }
        if ProcessInfo.processInfo.environment["TEAMCACHE_UPDATE_DOCS"] == "1" {
            try Data((String(text[..<from.upperBound]) + table + String(text[to.lowerBound...])).utf8).write(to: Self.page)
            return
        }
        #expect(String(text[from.upperBound..<to.lowerBound]) == table, """
            docs/metrics.md is not the catalogue's rendering; regenerate it: \
            TEAMCACHE_UPDATE_DOCS=1 swift test --filter MetricsPageTests
            """)
    }

    /// The parser itself, on an exposition written by hand.
    @Test func theParserReadsHelpAndTypeLines() {
        let exposition = "# HELP a_total A thing.\n# TYPE a_total counter\na_total 1\n# TYPE b gauge\nb 2\n"
        let families = Self.families(in: exposition)
        #expect(families["a_total"]?.kind == "counter" && families["a_total"]?.help == "A thing.")
        #expect(families["b"]?.kind == "gauge" && families["b"]?.help == "")
    }
}
