@testable import HTTPServer
import Testing

@Suite struct RequestIDTests {
    @Test func generatedIDsAreThePrefixAndTheCounterInHex() {
        for (counter, hex) in [(UInt64(0), "0"), (1, "1"), (15, "f"), (16, "10"), (0xabc, "abc"),
                               (UInt64.max, "ffffffffffffffff"), (1 << 60, "1000000000000000")] {
            #expect(EventLoop.requestID(prefix: "9f-1-", counter: counter) == "9f-1-" + hex)
            #expect(EventLoop.requestID(prefix: "", counter: counter) == String(counter, radix: 16))
        }
    }
}
