/// A position in PostgreSQL's write-ahead log (an LSN), as PostgreSQL writes it: two
/// hexadecimal numbers of at most 8 digits, `16/B374D848`. A standby that has replayed past
/// a commit's position shows that commit.
public struct WALPosition: Sendable, Hashable, Comparable, CustomStringConvertible {
    public let value: UInt64

    public init(_ value: UInt64) { self.value = value }

    /// Parses PostgreSQL's text form; nil for anything else (total: any bytes, no trap).
    public init?(_ text: String) {
        let parts = Array(text.utf8).split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
        guard parts.count == 2, let high = Self.hex(parts[0]), let low = Self.hex(parts[1]) else { return nil }
        value = high << 32 | low
    }

    public var description: String {
        String(value >> 32, radix: 16, uppercase: true) + "/" + String(value & 0xFFFF_FFFF, radix: 16, uppercase: true)
    }

    public static func < (a: WALPosition, b: WALPosition) -> Bool { a.value < b.value }

    /// 1 to 8 hex digits, as a number below 2^32.
    private static func hex(_ digits: ArraySlice<UInt8>) -> UInt64? {
        guard (1...8).contains(digits.count) else { return nil }
        var number: UInt64 = 0
        for digit in digits {
            let nibble: UInt8
            switch digit {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): nibble = digit - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): nibble = digit - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): nibble = digit - UInt8(ascii: "A") + 10
            default: return nil
            }
            number = number << 4 | UInt64(nibble)
        }
        return number
    }
}
