import Observability

/// Where the store's components register their metric families, and under which names: the
/// service names every family (its catalogue), the store none.
public struct StoreMetrics: Sendable {
    public let registry: MetricsRegistry
    public var lookups: MetricDefinition
    public var tokensSaved: MetricDefinition
    public var costSaved: MetricDefinition
    public var accessFlushes: MetricDefinition
    public var evictionRuns: MetricDefinition
    public var evictions: MetricDefinition
    public var evictedBytes: MetricDefinition
    public var evictionDuration: MetricDefinition
    public var evictionLastSuccess: MetricDefinition
    public var integrityErrors: MetricDefinition
    public var leases: MetricDefinition

    public init(registry: MetricsRegistry, lookups: MetricDefinition, tokensSaved: MetricDefinition,
                costSaved: MetricDefinition,
                accessFlushes: MetricDefinition, evictionRuns: MetricDefinition, evictions: MetricDefinition,
                evictedBytes: MetricDefinition, evictionDuration: MetricDefinition,
                evictionLastSuccess: MetricDefinition, integrityErrors: MetricDefinition, leases: MetricDefinition) {
        self.registry = registry
        self.lookups = lookups
        self.tokensSaved = tokensSaved
        self.costSaved = costSaved
        self.accessFlushes = accessFlushes
        self.evictionRuns = evictionRuns
        self.evictions = evictions
        self.evictedBytes = evictedBytes
        self.evictionDuration = evictionDuration
        self.evictionLastSuccess = evictionLastSuccess
        self.integrityErrors = integrityErrors
        self.leases = leases
    }
}
