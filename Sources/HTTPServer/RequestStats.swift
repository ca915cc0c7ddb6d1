import Foundation
import Locking
import Observability

/// One event loop's request counts and latency histograms, keyed by small integers so the
/// per-request cost is an uncontended lock and an integer hash. The metrics collector sums
/// every loop's stats at scrape time.
final class RequestStats: Sendable {
    // Locked, though only the owning loop and the scraper take it: uncontended, it costs
    // a few nanoseconds a request.
    struct Key: Hashable {
        /// A route id, or `Router.unmatchedID` / `Router.unparsedID`.
        let route: Int
        let method: UInt8
        let statusClass: UInt8
    }

    struct Series {
        var count: UInt64 = 0
        var sum: Double = 0
        var buckets = [UInt64](repeating: 0, count: latencyBuckets.count + 1)

        mutating func add(_ seconds: Double, bucket: Int) {
            count += 1
            sum += seconds
            buckets[bucket] += 1
        }
    }

    static let methods = ["GET", "HEAD", "PUT", "POST", "DELETE", "OTHER"]

    static func methodCode(_ method: String) -> UInt8 {
        switch method {
        case "GET": 0
        case "HEAD": 1
        case "PUT": 2
        case "POST": 3
        case "DELETE": 4
        default: 5
        }
    }

    /// The series, and where the last request's series is: a loop's requests mostly repeat
    /// one route, method and status class, and finding it again by position spares hashing
    /// the key on every request (551 → 278 instructions a near-cache hit). A position stays
    /// valid until a key is added, and adding one moves `last` to it.
    private struct Table {
        var series: [Key: Series] = [:]
        var last: (key: Key, index: Dictionary<Key, Series>.Index)?
    }

    private let table = Locked(Table())

    func observe(route: Int, method: String, status: Int, seconds: Double) {
        let key = Key(route: route, method: Self.methodCode(method), statusClass: UInt8(clamping: status / 100))
        let bucket = latencyBuckets.firstIndex(where: { seconds <= $0 }) ?? latencyBuckets.count
        table.withLock { table in
            // Mutated in place: a copy taken out and stored back would copy the buckets.
            if let last = table.last, last.key == key {
                table.series.values[last.index].add(seconds, bucket: bucket)
                return
            }
            if table.series[key] == nil { table.series[key] = Series() }
            guard let index = table.series.index(forKey: key) else { return }
            table.series.values[index].add(seconds, bucket: bucket)
            table.last = (key, index)
        }
    }

    func snapshot() -> [Key: Series] { table.withLock { $0.series } }
}

/// Publishes the loops' request stats into the registry's families at scrape time.
struct HTTPServerMetrics {
    let requests: CounterFamily
    let duration: HistogramFamily
    let refused: CounterFamily
    let deadlineExceeded: CounterFamily
    let bodyBudgetRefusals: CounterFamily

    init(registry: MetricsRegistry, prefix: String) {
        requests = registry.counter(prefix + "http_requests_total", "HTTP requests answered.",
                                    labels: ["route", "method", "status_class"])
        duration = registry.histogram(prefix + "http_request_duration_seconds",
                                      "Time from a complete request to its queued response.",
                                      labels: ["route", "method"], bounds: latencyBuckets)
        refused = registry.counter(prefix + "http_connections_refused_total",
                                   "Connections refused at the connection limit (server_limit) or a client's (client_limit).",
                                   labels: ["limit"])
        deadlineExceeded = registry.counter(prefix + "http_deadline_exceeded_total",
                                            "Requests answered 503 because they outlived the request timeout.")
        bodyBudgetRefusals = registry.counter(prefix + "http_body_budget_refusals_total",
                                              "Requests refused 503 because bodies in flight passed the body budget.")
    }

    func publish(_ stats: [RequestStats], routeNames: [String]) {
        var counts: [[String]: Double] = [:]
        var histograms: [[String]: RequestStats.Series] = [:]
        for loop in stats {
            for (key, series) in loop.snapshot() {
                let route = routeNames.indices.contains(key.route) ? routeNames[key.route]
                    : key.route == Router.unmatchedID ? "unmatched" : "unparsed"
                let method = RequestStats.methods[Int(key.method)]
                counts[[route, method, "\(key.statusClass)xx"], default: 0] += Double(series.count)
                var merged = histograms[[route, method]] ?? RequestStats.Series()
                merged.count += series.count
                merged.sum += series.sum
                for index in merged.buckets.indices { merged.buckets[index] += series.buckets[index] }
                histograms[[route, method]] = merged
            }
        }
        requests.replaceAll(counts)
        duration.replaceAll(histograms.mapValues { ($0.buckets, $0.sum, $0.count) })
    }
}
