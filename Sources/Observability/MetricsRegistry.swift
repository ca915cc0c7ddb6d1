import Foundation
import Locking

/// The metric families of one process, rendered in registration order.
public final class MetricsRegistry: Sendable {
    private enum Family {
        case counter(CounterFamily)
        case gauge(GaugeFamily)
        case histogram(HistogramFamily)
    }

    private struct Contents {
        var families: [(String, Family)] = []
        var collectors: [@Sendable () -> Void] = []
    }

    private let contents = Locked(Contents())

    public init() {}

    public func counter(_ name: String, _ help: String, labels: [String] = []) -> CounterFamily {
        let family = CounterFamily(name: name, help: help, labelNames: labels)
        register(name, .counter(family))
        return family
    }

    public func gauge(_ name: String, _ help: String, labels: [String] = []) -> GaugeFamily {
        let family = GaugeFamily(name: name, help: help, labelNames: labels)
        register(name, .gauge(family))
        return family
    }

    public func histogram(_ name: String, _ help: String, labels: [String] = [], bounds: [Double]) -> HistogramFamily {
        let family = HistogramFamily(name: name, help: help, labelNames: labels, bounds: bounds)
        register(name, .histogram(family))
        return family
    }

    /// A closure run before each render to refresh cheap in-memory gauges (never I/O to the database).
    public func addCollector(_ collect: @escaping @Sendable () -> Void) {
        contents.withLock { $0.collectors.append(collect) }
    }

    private func register(_ name: String, _ family: Family) {
        contents.withLock { contents in
            precondition(!contents.families.contains(where: { $0.0 == name }), "metric \(name) registered twice")
            contents.families.append((name, family))
        }
    }

    /// The exposition text, format 0.0.4.
    public func render() -> String {
        let (snapshot, hooks) = contents.withLock { ($0.families, $0.collectors) }
        hooks.forEach { $0() }
        var out = ""
        for (_, family) in snapshot {
            switch family {
            case .counter(let counter): counter.render(into: &out)
            case .gauge(let gauge): gauge.render(into: &out)
            case .histogram(let histogram): histogram.render(into: &out)
            }
        }
        return out
    }
}

/// Latency buckets in seconds, from 100 µs to 10 s.
public let latencyBuckets: [Double] = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                       0.25, 0.5, 1, 2.5, 5, 10]
