import Foundation
import Locking
import Observability

/// The standard process families (resident memory, CPU seconds, open fds, start time),
/// read from /proc at scrape time.
enum ProcessMetrics {
    static func register(in registry: MetricsRegistry) {
        let resident = registry.gauge(MetricCatalogue.processResidentMemoryBytes)
        let cpu = registry.counter(MetricCatalogue.processCpuSecondsTotal)
        let fds = registry.gauge(MetricCatalogue.processOpenFds)
        let start = registry.gauge(MetricCatalogue.processStartTimeSeconds)
        start.set([], Date().timeIntervalSince1970.rounded())
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        let pageSize = Double(sysconf(Int32(_SC_PAGESIZE)))
        let lastCPU = CPUReading()
        registry.addCollector {
            if let statm = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8),
               let pages = statm.split(separator: " ").dropFirst().first.flatMap({ Double($0) }) {
                resident.set([], pages * pageSize)
            }
            if let stat = try? String(contentsOfFile: "/proc/self/stat", encoding: .utf8),
               let close = stat.lastIndex(of: ")") {
                // Fields after the command name; utime and stime are the 12th and 13th of them.
                let fields = stat[stat.index(after: close)...].split(separator: " ")
                if fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) {
                    cpu.inc(by: lastCPU.advance(to: (user + system) / ticks))
                }
            }
            let open = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? 0
            fds.set([], Double(open))
        }
    }
}

/// Turns the absolute CPU reading into counter increments.
final class CPUReading: Sendable {
    private let last = Locked(0.0)

    func advance(to total: Double) -> Double {
        last.withLock { last in
            let delta = max(0, total - last)
            last = max(last, total)
            return delta
        }
    }
}
