/// Checks over a head's bytes eight at a time: a word that cannot hold a byte of interest
/// is passed with a few instructions, where a test of each byte cost ~6 instructions a byte
/// on every request (an `Authorization` value is ~60 bytes). A word that may hold one is
/// tested byte by byte, so the answer is always the per-byte test's.
enum ByteClasses {
    private static let ones: UInt64 = 0x0101_0101_0101_0101
    private static let highs: UInt64 = 0x8080_8080_8080_8080

    /// Whether some byte of `word` is below `limit` (exact for `limit` ≤ 128: a borrow can only
    /// mark a byte after one that really is below).
    @inline(__always) static func hasByte(below limit: UInt8, in word: UInt64) -> Bool {
        (word &- ones &* UInt64(limit)) & ~word & highs != 0
    }

    /// Whether some byte of `word` is `byte`.
    @inline(__always) static func hasByte(_ byte: UInt8, in word: UInt64) -> Bool {
        let folded = word ^ (ones &* UInt64(byte))
        return (folded &- ones) & ~folded & highs != 0
    }

    /// Whether some byte of `word` is 0x80 or above.
    @inline(__always) static func hasHighByte(in word: UInt64) -> Bool { word & highs != 0 }

    /// Whether every byte of `range` passes `test`; `wordMayFail` is true for every word
    /// holding a byte that fails it (and may be true for others). A range reaching outside
    /// `bytes` does not pass (the parser never asks one; nothing is read out of bounds).
    @inline(__always) static func allSatisfy(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>,
                                             wordMayFail: (UInt64) -> Bool, _ test: (UInt8) -> Bool) -> Bool {
        guard range.lowerBound >= 0, range.upperBound <= bytes.count else { return false }
        guard let base = bytes.baseAddress, !range.isEmpty else { return true }
        var index = range.lowerBound
        while index + 8 <= range.upperBound {
            let word = UInt64(littleEndian: UnsafeRawPointer(base + index).loadUnaligned(as: UInt64.self))
            if wordMayFail(word) {
                for offset in 0..<8 where !test(base[index + offset]) { return false }
            }
            index += 8
        }
        while index < range.upperBound {
            if !test(base[index]) { return false }
            index += 1
        }
        return true
    }

    /// A field value's bytes: anything but controls (HTAB allowed) and DEL; obs-text passes.
    static func isFieldValue(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> Bool {
        allSatisfy(bytes, range, wordMayFail: { hasByte(below: 0x20, in: $0) || hasByte(0x7F, in: $0) }) {
            !(($0 < 32 && $0 != 9) || $0 == 127)
        }
    }

    /// A request target's bytes: visible ASCII only (0x21-0x7E).
    static func isTarget(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> Bool {
        allSatisfy(bytes, range, wordMayFail: {
            hasHighByte(in: $0) || hasByte(below: 0x21, in: $0) || hasByte(0x7F, in: $0)
        }) { $0 > 32 && $0 < 127 }
    }
}
