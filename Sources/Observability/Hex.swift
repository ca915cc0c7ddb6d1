/// Lowercase hex digits of a number, written into memory the caller owns (request ids: the
/// response's head and the access line write them without making a `String`).
public enum Hex {
    /// How many digits `number` takes (one for zero).
    public static func digits(_ number: UInt64) -> Int {
        number == 0 ? 1 : (64 - number.leadingZeroBitCount + 3) / 4
    }

    /// Writes `number`'s `digits(number)` digits at `target`; returns how many.
    @discardableResult
    public static func write(_ number: UInt64, to target: UnsafeMutablePointer<UInt8>) -> Int {
        let count = digits(number)
        // Last digit first, one shift a digit.
        var rest = number
        var position = count
        repeat {
            position -= 1
            let nibble = UInt8(truncatingIfNeeded: rest) & 0xF
            target[position] = nibble &+ (nibble < 10 ? UInt8(ascii: "0") : UInt8(ascii: "a") &- 10)
            rest >>= 4
        } while position > 0
        return count
    }
}
