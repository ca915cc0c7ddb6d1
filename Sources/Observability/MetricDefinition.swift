/// One metric family as an application defines it: name, kind, help and labels, and notes
/// for the page operators read. The application keeps every definition in one catalogue,
/// renders its documentation from it, and registers families by definition, so a name is
/// written once.
public struct MetricDefinition: Sendable, Equatable {
    public enum Kind: String, Sendable { case counter, gauge, histogram }

    public let name: String
    public let kind: Kind
    public let help: String
    public let labels: [String]
    /// What the label values are, or what an alert should know (documentation only).
    public let notes: String

    public init(_ kind: Kind, _ name: String, _ help: String, labels: [String] = [], notes: String = "") {
        self.kind = kind
        self.name = name
        self.help = help
        self.labels = labels
        self.notes = notes
    }
}

extension MetricsRegistry {
    /// Registers `definition` as a counter (its `kind` is the catalogue's word; the test that
    /// compares the catalogue with what is served checks the two agree).
    public func counter(_ definition: MetricDefinition) -> CounterFamily {
        counter(definition.name, definition.help, labels: definition.labels)
    }

    public func gauge(_ definition: MetricDefinition) -> GaugeFamily {
        gauge(definition.name, definition.help, labels: definition.labels)
    }

    public func histogram(_ definition: MetricDefinition, bounds: [Double]) -> HistogramFamily {
        histogram(definition.name, definition.help, labels: definition.labels, bounds: bounds)
    }
}
