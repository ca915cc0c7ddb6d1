import Observability

/// The gateway's metrics: requests by upstream and outcome, upstream latency (to the first
/// byte and to the end), upstream errors by kind.
final class GatewayMetrics: Sendable {
    private let requests: CounterFamily
    private let firstByte: HistogramFamily
    private let duration: HistogramFamily
    private let errors: CounterFamily

    /// Model calls take from tens of milliseconds (a cached embedding) to minutes (a long stream).
    static let bounds: [Double] = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300]

    init(_ registry: MetricsRegistry) {
        requests = registry.counter(MetricCatalogue.gatewayRequestsTotal)
        firstByte = registry.histogram(MetricCatalogue.gatewayUpstreamFirstByteSeconds, bounds: Self.bounds)
        duration = registry.histogram(MetricCatalogue.gatewayUpstreamSeconds, bounds: Self.bounds)
        errors = registry.counter(MetricCatalogue.gatewayUpstreamErrorsTotal)
    }

    func count(_ upstream: String, _ outcome: String) { requests.inc([upstream, outcome]) }
    func countError(_ upstream: String, _ kind: String) { errors.inc([upstream, kind]) }
    func observeFirstByte(_ upstream: String, seconds: Double) { firstByte.observe([upstream], seconds) }
    func observeUpstream(_ upstream: String, seconds: Double) { duration.observe([upstream], seconds) }
}
