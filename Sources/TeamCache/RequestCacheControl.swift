import Foundation
import HTTPServer

/// The request directives of `Cache-Control` (RFC 9111 §5.2.1) the cache honours.
///
/// Every value a client can send has one meaning, and none traps:
/// - `max-stale` without a value: any staleness (bounded in practice by the stale retention);
/// - `max-stale=N`: N seconds (a delta past 2^31 counts as 2^31, RFC 9111 §1.2.2);
/// - `max-stale` with anything else (`abc`, `-5`, empty): ignored, so no stale answer is
///   served; a cache told nonsense about staleness stays on the safe side (fresh only);
/// - unknown directives, and directives given a value they do not take, are ignored.
struct RequestCacheControl: Sendable {
    var noCache = false
    var onlyIfCached = false
    /// nil: no stale answer; `Int.max`: any staleness (`max-stale` without a value).
    var maxStale: Int?

    init(_ headers: HTTPHeaders) {
        // Most requests send neither header; skip the list building then.
        guard headers.contains("Cache-Control") || headers.contains("Pragma") else { return }
        for directive in HeaderList.elements(headers, "Cache-Control") {
            switch directive.name {
            case "no-cache": noCache = true
            case "only-if-cached": onlyIfCached = true
            case "max-stale":
                guard let text = directive.value else {
                    maxStale = Int.max
                    continue
                }
                if let seconds = HeaderList.deltaSeconds(text) { maxStale = seconds }
            default: break
            }
        }
        // `Pragma: no-cache` is the HTTP/1.0 spelling of a forced refresh.
        if HeaderList.elements(headers, "Pragma").contains(where: { $0.name == "no-cache" }) { noCache = true }
    }
}

/// `Accept-Encoding` (RFC 9110 §12.5.3): whether gzip is acceptable.
enum AcceptEncoding {
    static func allowsGzip(_ headers: HTTPHeaders) -> Bool {
        // The common cases answered without parsing: no header, or exactly `gzip` once.
        guard headers.mayHave("Accept-Encoding") else { return false }
        if headers.single("Accept-Encoding") == "gzip" { return true }
        return plainList(headers) ?? parsed(headers)
    }

    /// The general reading: every element parsed (allocates a list of elements and their
    /// parameters).
    static func parsed(_ headers: HTTPHeaders) -> Bool {
        var gzip: Double?, star: Double?
        for coding in HeaderList.elements(headers, "Accept-Encoding") {
            // A weight that is not a qvalue makes the element unreadable: it is skipped.
            let quality: Double
            if let text = coding.parameter("q") {
                guard let parsed = HeaderList.quality(text) else { continue }
                quality = parsed
            } else {
                quality = 1
            }
            switch coding.name {
            case "gzip", "x-gzip": gzip = quality
            case "*": star = quality
            default: break
            }
        }
        return (gzip ?? star ?? 0) > 0
    }
}

extension AcceptEncoding {
    /// What `parsed` answers, read in place for the lists clients send (`gzip, deflate`,
    /// `gzip, deflate, br, zstd`, `identity`, `br;q=1.0, gzip;q=0.8, *;q=0.1`): parsing them
    /// into elements was eight allocations a hit. nil (read it the general way) for a quote or
    /// a byte past ASCII; anything else is read as `parsed` reads it (a test compares the two
    /// over random lists).
    static func plainList(_ headers: HTTPHeaders) -> Bool? {
        var gzip: Double?, star: Double?
        for field in headers.fields where HTTPHeaders.same(field.name, "Accept-Encoding") {
            var value = field.value
            let read = value.withUTF8 { bytes -> Bool in
                guard !bytes.contains(where: { $0 == UInt8(ascii: "\"") || $0 >= 0x80 }) else { return false }
                var start = 0
                while start <= bytes.count {
                    let end = bytes[start...].firstIndex(of: UInt8(ascii: ",")) ?? bytes.count
                    element(UnsafeBufferPointer(rebasing: bytes[start..<end]), gzip: &gzip, star: &star)
                    start = end + 1
                }
                return true
            }
            guard read else { return nil }
        }
        return (gzip ?? star ?? 0) > 0
    }

    /// One element, `coding *( ";" parameter )`: its weight recorded when it is gzip or `*`.
    private static func element(_ bytes: UnsafeBufferPointer<UInt8>, gzip: inout Double?, star: inout Double?) {
        var pieces = PieceIterator(bytes: bytes)
        guard let first = pieces.next() else { return }
        // As `HeaderElement` reads it: `gzip=1` is the coding gzip (with a value no one reads).
        let name = first.firstIndex(of: UInt8(ascii: "=")).map { trimmed(UnsafeBufferPointer(rebasing: first[..<$0])) } ?? first
        var weight: UnsafeBufferPointer<UInt8>?
        while let piece = pieces.next() {
            let equals = piece.firstIndex(of: UInt8(ascii: "="))
            let pieceName = trimmed(UnsafeBufferPointer(rebasing: piece[..<(equals ?? piece.endIndex)]))
            // The first parameter named q is the weight; one without a value weighs nothing readable.
            guard weight == nil, pieceName.count == 1, pieceName[0] | 0x20 == UInt8(ascii: "q") else { continue }
            weight = equals.map { trimmed(UnsafeBufferPointer(rebasing: piece[($0 + 1)...])) } ?? UnsafeBufferPointer(start: nil, count: 0)
        }
        let quality: Double
        if let weight {
            guard let read = HeaderList.quality(bytes: weight) else { return }
            quality = read
        } else {
            quality = 1
        }
        if Self.named(name, "gzip") || Self.named(name, "x-gzip") {
            gzip = quality
        } else if Self.named(name, "*") {
            star = quality
        }
    }

    /// Splits an element at `;`, each piece trimmed of spaces and tabs.
    private struct PieceIterator {
        let bytes: UnsafeBufferPointer<UInt8>
        var start = 0

        mutating func next() -> UnsafeBufferPointer<UInt8>? {
            guard start <= bytes.count else { return nil }
            let end = bytes[start...].firstIndex(of: UInt8(ascii: ";")) ?? bytes.count
            defer { start = end + 1 }
            return AcceptEncoding.trimmed(UnsafeBufferPointer(rebasing: bytes[start..<end]))
        }
    }

    private static func trimmed(_ bytes: UnsafeBufferPointer<UInt8>) -> UnsafeBufferPointer<UInt8> {
        var (start, end) = (0, bytes.count)
        while start < end, bytes[start] == 0x20 || bytes[start] == 0x09 { start += 1 }
        while end > start, bytes[end - 1] == 0x20 || bytes[end - 1] == 0x09 { end -= 1 }
        return UnsafeBufferPointer(rebasing: bytes[start..<end])
    }

    /// ASCII case-insensitive equality with a lowercase name.
    private static func named(_ bytes: UnsafeBufferPointer<UInt8>, _ name: StaticString) -> Bool {
        guard bytes.count == name.utf8CodeUnitCount else { return false }
        for index in 0..<bytes.count {
            let byte = bytes[index], expected = name.utf8Start[index]
            guard byte == expected || (byte >= 0x41 && byte <= 0x5A && byte | 0x20 == expected) else { return false }
        }
        return true
    }
}
