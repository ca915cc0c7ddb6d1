import Foundation
import Locking
import TeamCache
import Testing

/// A periodic service's last run at a stop: the access flusher's ticks may put a flush off
/// under load, but its stop must write everything, so it stops with work of its own.
@Suite struct PeriodicServiceTests {
    @Test func aStopRunsTheFinalWorkInsteadOfATick() throws {
        let runs = Locked<[String]>([])
        let service = PeriodicService(name: "final", interval: 3600, runOnStop: true,
                                      finalWork: { runs.withLock { $0.append("final") } }) {
            runs.withLock { $0.append("tick") }
        }
        try service.start()
        service.stop()
        #expect(runs.value == ["final"])
    }

    @Test func aStopWithoutFinalWorkRunsATick() throws {
        let runs = Locked<[String]>([])
        let service = PeriodicService(name: "tick", interval: 3600, runOnStop: true) { runs.withLock { $0.append("tick") } }
        try service.start()
        service.stop()
        #expect(runs.value == ["tick"])
    }
}
