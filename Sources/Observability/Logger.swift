import Foundation

/// Severity of a log line; lines below the configured level are dropped before formatting.
public enum LogLevel: Int, Sendable, Comparable, CaseIterable {
    case debug, info, warn, error

    public var name: String {
        switch self {
        case .debug: "debug"
        case .info: "info"
        case .warn: "warn"
        case .error: "error"
        }
    }

    public init?(name: String) {
        guard let level = LogLevel.allCases.first(where: { $0.name == name.lowercased() }) else { return nil }
        self = level
    }

    public static func < (lhs: LogLevel, rhs: LogLevel) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// A value in a structured log line.
public enum LogValue: Sendable, ExpressibleByStringLiteral, ExpressibleByIntegerLiteral {
    case string(String)
    case int(Int)
    case double(Double)
    case bool(Bool)

    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int) { self = .int(value) }
}

/// Writes one JSON object a line through the shared `LogSink`.
///
/// Never pass request bodies or tokens as fields: log lines leave the trust boundary.
public struct Logger: Sendable {
    public let component: String
    public let fields: [(String, LogValue)]

    public init(component: String, fields: [(String, LogValue)] = []) {
        self.component = component
        self.fields = fields
    }

    public func isEnabled(_ level: LogLevel) -> Bool { level >= LogSink.shared.level }

    public func debug(_ message: String, _ extra: [(String, LogValue)] = []) { log(.debug, message, extra) }
    public func info(_ message: String, _ extra: [(String, LogValue)] = []) { log(.info, message, extra) }
    public func warn(_ message: String, _ extra: [(String, LogValue)] = []) { log(.warn, message, extra) }
    public func error(_ message: String, _ extra: [(String, LogValue)] = []) { log(.error, message, extra) }

    public func log(_ level: LogLevel, _ message: String, _ extra: [(String, LogValue)] = []) {
        let sink = LogSink.shared
        guard level >= sink.level else { return }
        var line = LogLine()
        line.begin(level, component: component, message: message)
        for (key, value) in fields { line.field(key, value) }
        for (key, value) in extra { line.field(key, value) }
        line.end()
        sink.write(line.bytes, urgent: level >= .warn)
    }
}
