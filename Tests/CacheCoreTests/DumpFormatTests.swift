import CacheCore
import Foundation
import Testing

@Suite struct DumpFormatTests {
    /// Written in pieces, read back in pieces of another size, two members in a row: the
    /// same bytes; a truncated stream never says it ended; bytes that are not gzip fail.
    @Test func gzipStreamsRoundTripInPieces() throws {
        var original: [UInt8] = []
        for index in 0..<50_000 { original += Array("line \(index) of a dump\n".utf8) }
        let writer = try GzipWriter()
        var compressed: [UInt8] = []
        var offset = 0
        while offset < original.count {
            let end = min(offset + 7919, original.count)
            compressed += writer.write(Array(original[offset..<end]))
            offset = end
        }
        compressed += writer.finish()
        let second = try GzipWriter()
        let tail = second.write(Array("a second member\n".utf8)) + second.finish()
        let reader = try GzipReader(maxPiece: 4096)
        var inflated: [UInt8] = []
        for start in stride(from: 0, to: compressed.count + tail.count, by: 1000) {
            let all = compressed + tail
            reader.feed(Array(all[start..<min(start + 1000, all.count)]))
            while true {
                let piece = try reader.read()
                if piece.isEmpty { break }
                inflated += piece
            }
        }
        #expect(inflated == original + Array("a second member\n".utf8))
        #expect(second.write([1, 2, 3]).isEmpty && second.finish().isEmpty, "a finished stream takes nothing more")
        #expect(throws: Gzip.Failure.self) { try GzipWriter(level: 42) }
        #expect(reader.ended)
        let truncated = try GzipReader()
        truncated.feed(Array(compressed.prefix(compressed.count / 2)))
        while try !truncated.read().isEmpty {}
        #expect(!truncated.ended)
        let garbage = try GzipReader()
        garbage.feed(Array("this is not gzip at all".utf8))
        #expect(throws: Gzip.Failure.self) { while try !garbage.read().isEmpty {} }
    }

    /// Any bytes as a dump line are parsed or refused with a reason, never a trap.
    @Test func anyLineParsesOrIsRefused() {
        var policy = CachePolicy()
        policy.maxBodyBytes = 4096
        let pieces = ["{", "}", "\"namespace\":\"n\"", "\"key\":\"k\"", "\"body\":\"b\"", "\"body_base64\":\"AA==\"",
                      "\"encoding\":\"gzip\"", "\"etag\":1", ",", ":", "[", "]", "null", "\"tags\":[1]",
                      "\"expires_at\":\"2026-13-45T99:00:00Z\"", "\"hit_count\":-1", "\u{0}", "é"]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<5000 {
            let text = (0..<Int.random(in: 0...12, using: &generator)).map { _ in pieces.randomElement(using: &generator)! }
                .joined()
            _ = try? DumpedEntry.parse(Array(text.utf8), namespace: nil, policy: policy, now: Date())
        }
        let entry = try? DumpedEntry.parse(Array("{\"namespace\":\"n\",\"key\":\"k\",\"body\":\"hello\"}".utf8),
                                           namespace: nil, policy: policy, now: Date())
        #expect(entry?.etag == ETag.of(identity: Array("hello".utf8)) && entry?.encoding == .identity)
        // Its line parses back to itself.
        if let entry {
            let again = try? DumpedEntry.parse(entry.line().dropLast().map { $0 }, namespace: nil, policy: policy, now: Date())
            #expect(again == entry)
        }
    }
}
