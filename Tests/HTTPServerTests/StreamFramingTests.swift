@testable import HTTPServer
import Testing

/// A streamed part counts in transit for what `streamPart` will queue: its hex length line and
/// CRLFs with it. `hexDigits` must be `String(count, radix: 16)`'s length, or a stream's
/// total moves when a part joins the output (and a racing producer sends past the buffer).
@Suite struct StreamFramingTests {
    @Test func hexDigitsAreTheChunkLengthLinesDigits() {
        var counts = [0, 1, 15, 16, 255, 256, 4095, 4096, 16 * 1024, 65535, 65536, Int.max]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<10_000 { counts.append(Int.random(in: 0...Int.max >> Int.random(in: 0..<63, using: &generator), using: &generator)) }
        for count in counts {
            #expect(ResponseStream.hexDigits(count) == String(count, radix: 16).utf8.count, "\(count)")
        }
    }
}
