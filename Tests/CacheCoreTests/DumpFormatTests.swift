import CacheCore
import CacheKeys
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

extension DumpFormatTests {
    /// The line as `JSONValue` wrote it before it was written as bytes: the format is a
    /// promise (other tools read dumps), so the two must agree byte for byte.
    static func valueLine(_ entry: DumpedEntry, staleUntil: String?) -> [UInt8] {
        var members: [(String, JSONValue)] = [("namespace", .string(entry.namespace))]
        if let text = String(validating: entry.key, as: UTF8.self) {
            members.append(("key", .string(text)))
        } else {
            members.append(("key_base64", .string(Data(entry.key).base64EncodedString())))
        }
        members += [
            ("body_base64", .string(Data(entry.body).base64EncodedString())), ("encoding", .string(entry.encoding.rawValue)),
            ("content_type", .string(entry.contentType)), ("identity_size", .int(entry.identitySize)),
            ("etag", .string(entry.etag)), ("tags", .array(entry.tags.map { .string($0) })),
            ("model", entry.model.map { .string($0) } ?? .null), ("version", entry.version.map { .string($0) } ?? .null),
            ("prompt_digest", entry.promptDigest.map { .string($0) } ?? .null),
            ("metadata", entry.metadata.flatMap { try? JSONParser.parse($0) } ?? .null),
            ("input_tokens", .int(entry.inputTokens)), ("output_tokens", .int(entry.outputTokens)),
            ("created_at", .string(entry.createdAt)), ("updated_at", .string(entry.updatedAt)),
            ("expires_at", entry.expiresAt.map { .string($0) } ?? .null),
            ("stale_while_revalidate", .int(entry.staleWhileRevalidate)),
            ("stale_until", staleUntil.map { .string($0) } ?? .null), ("hit_count", .int(entry.hitCount)),
            ("last_accessed_at", entry.lastAccessedAt.map { .string($0) } ?? .null),
        ]
        return Array(JSONValue.object(members).serialized.utf8) + [UInt8(ascii: "\n")]
    }

    /// Random entries (keys that are not UTF-8, text that needs escaping, tags, metadata with
    /// nesting and escapes, nulls): `line()` writes what the `JSONValue` form wrote.
    @Test func linesAreByteForByteTheFormatTheyWere() {
        var generator = SystemRandomNumberGenerator()
        let texts = ["", "plain", "quote \" and \\ slash", "tab\tnew\nline\u{01}\u{1F}", "é ü 漢字 🎉", "</script>"]
        func text() -> String { texts.randomElement(using: &generator)! }
        func maybe() -> String? { Bool.random(using: &generator) ? text() : nil }
        for _ in 0..<2_000 {
            let key = Bool.random(using: &generator) ? Array(text().utf8) + [UInt8(ascii: "k")]
                : (0..<Int.random(in: 1...20, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let body = (0..<Int.random(in: 0...300, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let metadata = Bool.random(using: &generator) ? nil
                : "{\"n\": \(Int.random(in: -5...5, using: &generator)), \"t\": \(JSONValue.string(text()).serialized), \"a\": [1, {\"b\": null}]}"
            let staleUntil = maybe()
            var entry = DumpedEntry(
                namespace: "ns", key: key, body: body, encoding: Bool.random(using: &generator) ? .gzip : .identity,
                contentType: "text/plain; charset=\"utf-8\"", identitySize: body.count, etag: "\"\(text())\"",
                model: maybe(), version: maybe(), promptDigest: maybe(),
                tags: (0..<Int.random(in: 0...3, using: &generator)).map { _ in text() }, metadata: metadata,
                inputTokens: Int.random(in: 0...1_000_000, using: &generator), outputTokens: Int.random(in: 0...9, using: &generator),
                createdAt: "2026-12-05T10:00:00.000001Z", updatedAt: "2026-12-05T10:00:01.5Z", expiresAt: maybe(),
                staleWhileRevalidate: Int.random(in: 0...86_400, using: &generator),
                hitCount: Int.random(in: 0...Int.max, using: &generator), lastAccessedAt: maybe(), staleUntil: staleUntil)
            entry.hitCount = max(0, entry.hitCount)
            #expect(entry.line() == Self.valueLine(entry, staleUntil: staleUntil),
                    "\(String(decoding: entry.line(), as: UTF8.self))")
        }
    }
}
