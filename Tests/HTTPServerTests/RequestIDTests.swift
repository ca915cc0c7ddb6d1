@testable import HTTPServer
import Testing

@Suite struct RequestIDTests {
    @Test func generatedIDsAreThePrefixAndTheCounterInHex() {
        for (counter, hex) in [(UInt64(0), "0"), (1, "1"), (15, "f"), (16, "10"), (0xabc, "abc"),
                               (UInt64.max, "ffffffffffffffff"), (1 << 60, "1000000000000000")] {
            #expect(RequestID(prefix: "9f-1-", number: counter).text == "9f-1-" + hex)
            #expect(RequestID(prefix: "", number: counter).text == String(counter, radix: 16))
        }
    }
}
