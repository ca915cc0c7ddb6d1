import Observability
import Testing

/// A failure repeated per request is one line per kind per interval, with a count.
@Suite struct LogThrottleTests {
    @Test func repeatsWithinTheIntervalAreCountedNotWritten() {
        let throttle = LogThrottle(Logger(component: "test"), interval: 3600)
        var written = 0
        for index in 0..<10_000 {
            if throttle.log(.error, "database error", kind: index % 2 == 0 ? "a" : "b") { written += 1 }
        }
        // The first of each kind; the other 9,998 wait for the next interval's summary.
        #expect(written == 2)
        let immediate = LogThrottle(Logger(component: "test"), interval: 0)
        #expect(immediate.log(.error, "x", kind: "a") && immediate.log(.error, "x", kind: "a"))
    }
}
