import Foundation
import TeamCache
import Testing
import TestSupport

/// docs/metrics.md is the page operators read to write alerts: every series the service
/// serves is on it, by its full name, or an alert is written against a guess.
@Suite struct MetricsPageTests {
    /// The metric names of a Prometheus text exposition (from its `# TYPE` lines).
    static func names(in exposition: String) -> [String] {
        exposition.split(separator: "\n").compactMap { line in
            let parts = line.split(separator: " ")
            return parts.count >= 4 && parts[0] == "#" && parts[1] == "TYPE" ? String(parts[2]) : nil
        }
    }

    /// The names the page's table lists: every backticked word of a row's first cell.
    static func documented(in page: String) -> Set<String> {
        var names = Set<String>()
        for line in page.split(separator: "\n") where line.hasPrefix("| `") {
            let firstCell = line.dropFirst(2).prefix { $0 != "|" }
            let quoted = firstCell.split(separator: "`", omittingEmptySubsequences: false)
            for (index, part) in quoted.enumerated() where index % 2 == 1 { names.insert(String(part)) }
        }
        return names
    }

    @Test func theMetricsPageListsEverySeriesServed() throws {
        let served = Self.names(in: try TestService.shared.metrics())
        #expect(served.count > 20, "the exposition had \(served.count) families")
        let page = try String(contentsOf: TestPaths.repository.appendingPathComponent("docs/metrics.md"),
                              encoding: .utf8)
        let documented = Self.documented(in: page)
        let missing = served.filter { !documented.contains($0) }
        #expect(missing.isEmpty, "docs/metrics.md lacks \(missing.joined(separator: ", "))")
    }

    /// The parsers themselves, on a page and an exposition written by hand.
    @Test func theParsersReadTablesAndTypeLines() {
        let exposition = "# HELP a_total A.\n# TYPE a_total counter\na_total 1\n# TYPE b gauge\nb 2\n"
        #expect(Self.names(in: exposition) == ["a_total", "b"])
        let page = "| metric | type |\n| --- | --- |\n| `a_total`, `b` | counter | `c` |\n| `d` | gauge |\n"
        #expect(Self.documented(in: page) == ["a_total", "b", "d"])
    }
}
