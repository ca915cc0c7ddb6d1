@testable import HTTPServer
import Testing

@Suite struct ByteSearchTests {
    /// memchr against the standard library's search, over every start of random slices.
    @Test func agreesWithFirstIndexOnEverySliceAndStart() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<300 {
            let bytes = (0..<Int.random(in: 0...40, using: &generator)).map { _ in UInt8.random(in: 8...12, using: &generator) }
            let lower = Int.random(in: 0...bytes.count, using: &generator)
            let slice = bytes[lower..<Int.random(in: lower...bytes.count, using: &generator)]
            for from in (slice.startIndex - 2)...(slice.endIndex + 2) {
                let expected = from < slice.startIndex || from > slice.endIndex ? nil : slice[from...].firstIndex(of: 10)
                #expect(ByteSearch.firstIndex(of: 10, in: slice, from: from) == expected, "\(slice) from \(from)")
            }
        }
    }
}
