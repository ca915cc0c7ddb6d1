/// `*` patterns: a token's namespace pattern, a price table's model names.
public enum Glob {
    /// Whether `text` matches `pattern`, where `*` matches any run of bytes. Compared as
    /// UTF-8 bytes without allocating: a scoped token's pattern is matched on every request.
    /// Bytes, not characters: namespace names are ASCII (`RequestParsing`'s name rule), so
    /// no two spellings of one name exist; model names are matched as written.
    public static func matches(_ pattern: String, _ text: String) -> Bool {
        var pattern = pattern, text = text
        return pattern.withUTF8 { pattern in text.withUTF8 { text in matches(pattern, text) } }
    }

    /// The prefix before the first `*` and the suffix after the last must match in place;
    /// the pieces between are found leftmost, in order, in what lies between them (leftmost
    /// leaves the most room for the pieces that follow, so no backtracking is needed).
    static func matches(_ pattern: UnsafeBufferPointer<UInt8>, _ text: UnsafeBufferPointer<UInt8>) -> Bool {
        let star = UInt8(ascii: "*")
        guard let firstStar = pattern.firstIndex(of: star), let lastStar = pattern.lastIndex(of: star) else {
            return pattern.elementsEqual(text)
        }
        let prefix = pattern[..<firstStar], suffix = pattern[(lastStar + 1)...]
        guard text.count >= prefix.count + suffix.count, text.starts(with: prefix),
              text[(text.count - suffix.count)...].elementsEqual(suffix) else { return false }
        var position = prefix.count
        let end = text.count - suffix.count
        var pieceStart = firstStar + 1
        while pieceStart < lastStar {
            let pieceEnd = pattern[pieceStart..<lastStar].firstIndex(of: star) ?? lastStar
            let piece = pattern[pieceStart..<pieceEnd]
            if !piece.isEmpty {
                guard let found = firstRange(of: piece, in: text, from: position, to: end) else { return false }
                position = found + piece.count
            }
            pieceStart = pieceEnd + 1
        }
        return true
    }

    /// Where `piece` first occurs wholly inside `text[from..<to]`.
    private static func firstRange(of piece: Slice<UnsafeBufferPointer<UInt8>>, in text: UnsafeBufferPointer<UInt8>,
                                   from: Int, to end: Int) -> Int? {
        guard piece.count <= end - from else { return nil }
        for start in from...(end - piece.count) where text[start..<(start + piece.count)].elementsEqual(piece) {
            return start
        }
        return nil
    }
}
