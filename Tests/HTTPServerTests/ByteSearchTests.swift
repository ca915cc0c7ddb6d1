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

    /// Counting and whole-buffer equality against the standard library's, on random bytes
    /// (few distinct values, so equal and nearly equal buffers are common).
    @Test func countAndEqualityAgreeWithTheStandardLibrary() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2_000 {
            let bytes = (0..<Int.random(in: 0...40, using: &generator)).map { _ in UInt8.random(in: 46...48, using: &generator) }
            let other = (0..<Int.random(in: 0...3, using: &generator)).map { _ in UInt8.random(in: 46...48, using: &generator) }
            bytes.withUnsafeBufferPointer { buffer in
                #expect(ByteSearch.count(of: 47, in: buffer) == bytes.filter { $0 == 47 }.count)
                #expect(ByteSearch.equal(bytes, buffer))
                #expect(ByteSearch.equal(other, buffer) == (other == bytes), "\(other) \(bytes)")
            }
        }
        #expect(ByteSearch.equal([], UnsafeBufferPointer(start: nil, count: 0)))
        #expect(!ByteSearch.equal([1], UnsafeBufferPointer(start: nil, count: 0)))
    }
}
