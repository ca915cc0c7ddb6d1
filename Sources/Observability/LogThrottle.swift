import Foundation
import Locking

/// Repeated failures logged as a summary rather than a line each: the first occurrence of
/// a kind is logged with its fields, then at most one line per `interval` saying how many
/// more there were (`suppressed`). An outage of ten seconds is a handful of lines, not a
/// hundred thousand.
public final class LogThrottle: Sendable {
    private struct Kind {
        var lastLogged: TimeInterval
        var suppressed: Int
    }

    private let logger: Logger
    private let interval: TimeInterval
    private let kinds = Locked<[String: Kind]>([:])
    /// Kinds are a fixed set in code (error descriptions, not data); the cap is a fuse.
    private static let maxKinds = 256

    public init(_ logger: Logger, interval: TimeInterval = 10) {
        self.logger = logger
        self.interval = interval
    }

    /// Logs `message` at `level` unless a line of the same `kind` went out within the
    /// interval; then it is counted and summarised with the next line of that kind.
    /// True when the line was written.
    @discardableResult
    public func log(_ level: LogLevel, _ message: String, kind: String, _ extra: [(String, LogValue)] = []) -> Bool {
        guard logger.isEnabled(level) else { return false }
        let now = ProcessInfo.processInfo.systemUptime
        let suppressed: Int? = kinds.withLock { kinds in
            if var seen = kinds[kind] {
                guard now - seen.lastLogged >= interval else {
                    seen.suppressed += 1
                    kinds[kind] = seen
                    return nil
                }
                kinds[kind] = Kind(lastLogged: now, suppressed: 0)
                return seen.suppressed
            }
            if kinds.count >= Self.maxKinds { kinds.removeAll() }
            kinds[kind] = Kind(lastLogged: now, suppressed: 0)
            return 0
        }
        guard let suppressed else { return false }
        logger.log(level, message, extra + (suppressed > 0 ? [("suppressed_since_last", .int(suppressed))] : []))
        return true
    }
}
