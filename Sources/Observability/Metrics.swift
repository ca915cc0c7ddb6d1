import Foundation
import Locking

/// A family of Prometheus counters sharing a name and label names.
///
/// Label values must come from bounded sets (route templates, result names, namespaces):
/// never raw paths or keys.
public final class CounterFamily: Sendable {
    public let name: String
    public let help: String
    public let labelNames: [String]
    private let values = Locked<[[String]: Double]>([:])

    init(name: String, help: String, labelNames: [String]) {
        self.name = name
        self.help = help
        self.labelNames = labelNames
    }

    public func inc(_ labels: [String] = [], by amount: Double = 1) {
        precondition(labels.count == labelNames.count, "\(name): label count")
        values.withLock { $0[labels, default: 0] += amount }
    }

    /// Current value (tests and stats read it).
    public func value(_ labels: [String] = []) -> Double {
        values.withLock { $0[labels] ?? 0 }
    }

    /// Replaces every value, for counters whose running totals are kept elsewhere and
    /// published at scrape time (they must only grow).
    public func replaceAll(_ snapshot: [[String]: Double]) {
        values.withLock { $0 = snapshot }
    }

    func render(into out: inout String) {
        out += "# HELP \(name) \(help)\n# TYPE \(name) counter\n"
        for (labels, value) in values.value.sorted(by: { $0.key.lexicographicallyPrecedes($1.key) }) {
            out += name + PrometheusText.labels(labelNames, labels) + " " + PrometheusText.number(value) + "\n"
        }
    }
}

/// A family of gauges whose values are set directly or read at scrape time.
public final class GaugeFamily: Sendable {
    public let name: String
    public let help: String
    public let labelNames: [String]
    private let values = Locked<[[String]: Double]>([:])

    init(name: String, help: String, labelNames: [String]) {
        self.name = name
        self.help = help
        self.labelNames = labelNames
    }

    public func set(_ labels: [String] = [], _ value: Double) {
        values.withLock { $0[labels] = value }
    }

    /// Replaces every labelled value at once (for gauges refreshed from a snapshot).
    public func replaceAll(_ snapshot: [[String]: Double]) {
        values.withLock { $0 = snapshot }
    }

    public func value(_ labels: [String] = []) -> Double {
        values.withLock { $0[labels] ?? 0 }
    }

    func render(into out: inout String) {
        out += "# HELP \(name) \(help)\n# TYPE \(name) gauge\n"
        for (labels, value) in values.value.sorted(by: { $0.key.lexicographicallyPrecedes($1.key) }) {
            out += name + PrometheusText.labels(labelNames, labels) + " " + PrometheusText.number(value) + "\n"
        }
    }
}

/// A family of cumulative histograms (`_bucket`, `_sum`, `_count`).
public final class HistogramFamily: Sendable {
    public let name: String
    public let help: String
    public let labelNames: [String]
    public let bounds: [Double]
    private let series = Locked<[[String]: Series]>([:])

    struct Series {
        var counts: [UInt64]
        var sum: Double = 0
        var count: UInt64 = 0

        mutating func add(_ value: Double, bucket: Int) {
            counts[bucket] += 1
            sum += value
            count += 1
        }
    }

    init(name: String, help: String, labelNames: [String], bounds: [Double]) {
        self.name = name
        self.help = help
        self.labelNames = labelNames
        self.bounds = bounds.sorted()
    }

    public func observe(_ labels: [String] = [], _ value: Double) {
        // The first bucket whose upper bound holds the value; +Inf is implied by `count`.
        let bucket = bounds.firstIndex(where: { value <= $0 }) ?? bounds.count
        let buckets = bounds.count + 1
        series.withLock { series in
            // In place: an entry copied out and stored back copies its bucket array each time.
            series[labels, default: Series(counts: Array(repeating: 0, count: buckets))].add(value, bucket: bucket)
        }
    }

    public func count(_ labels: [String] = []) -> UInt64 {
        series.withLock { $0[labels]?.count ?? 0 }
    }

    /// Replaces every series with (per-bucket counts incl. +Inf, sum, count), for histograms
    /// kept elsewhere and published at scrape time.
    public func replaceAll(_ snapshot: [[String]: (buckets: [UInt64], sum: Double, count: UInt64)]) {
        let replaced = snapshot.mapValues { Series(counts: $0.buckets, sum: $0.sum, count: $0.count) }
        series.withLock { $0 = replaced }
    }

    func render(into out: inout String) {
        out += "# HELP \(name) \(help)\n# TYPE \(name) histogram\n"
        for (labels, entry) in series.value.sorted(by: { $0.key.lexicographicallyPrecedes($1.key) }) {
            var cumulative: UInt64 = 0
            for (index, bound) in bounds.enumerated() {
                cumulative += entry.counts[index]
                let text = PrometheusText.labels(labelNames + ["le"], labels + [PrometheusText.number(bound)])
                out += "\(name)_bucket\(text) \(cumulative)\n"
            }
            let infinite = PrometheusText.labels(labelNames + ["le"], labels + ["+Inf"])
            out += "\(name)_bucket\(infinite) \(entry.count)\n"
            let plain = PrometheusText.labels(labelNames, labels)
            out += "\(name)_sum\(plain) \(PrometheusText.number(entry.sum))\n"
            out += "\(name)_count\(plain) \(entry.count)\n"
        }
    }
}

/// Formatting rules of the Prometheus text exposition format 0.0.4.
enum PrometheusText {
    static func labels(_ names: [String], _ values: [String]) -> String {
        guard !names.isEmpty else { return "" }
        var out = "{"
        for (index, name) in names.enumerated() {
            if index > 0 { out += "," }
            out += name + "=\"" + escape(values[index]) + "\""
        }
        return out + "}"
    }

    static func escape(_ value: String) -> String {
        var out = ""
        for char in value {
            switch char {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            case "\n": out += "\\n"
            default: out.append(char)
            }
        }
        return out
    }

    static func number(_ value: Double) -> String {
        if value.isNaN { return "NaN" }
        if value.isInfinite { return value > 0 ? "+Inf" : "-Inf" }
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return String(value)
    }
}
