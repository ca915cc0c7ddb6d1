import Glibc
import Observability

/// IMF-fixdate (RFC 9110 §5.6.7) formatting without locale or Foundation formatters.
public enum HTTPDate {
    private static let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
    private static let dayBytes = days.map { Array($0.utf8) }
    private static let monthBytes = months.map { Array($0.utf8) }

    /// The first and last second IMF-fixdate's four-digit year can name (years 0 to 9999).
    static let formattable = CivilTime.fourDigitYears

    /// `Sun, 06 Nov 1994 08:49:37 GMT` for Unix time `seconds`; the epoch's text for a time
    /// outside years 0 to 9999 (a four-digit year cannot say it).
    ///
    /// Written byte by byte into one fixed-size buffer, from calendar arithmetic rather than
    /// `gmtime_r` (which takes the time-zone lock): two of these go out with every cache hit.
    public static func format(unixSeconds seconds: Int) -> String {
        guard formattable.contains(seconds) else { return "Thu, 01 Jan 1970 00:00:00 GMT" }
        let time = CivilTime(unixSeconds: seconds)
        return String(unsafeUninitializedCapacity: 29) { buffer in
            var index = 0
            func put(_ byte: UInt8) {
                buffer[index] = byte
                index += 1
            }
            func digits(_ value: Int, _ count: Int) {
                var divisor = 1
                for _ in 1..<count { divisor *= 10 }
                while divisor > 0 {
                    put(UInt8(ascii: "0") + UInt8(value / divisor % 10))
                    divisor /= 10
                }
            }
            for byte in dayBytes[time.weekday] { put(byte) }
            put(UInt8(ascii: ","))
            put(UInt8(ascii: " "))
            digits(time.day, 2)
            put(UInt8(ascii: " "))
            for byte in monthBytes[time.month - 1] { put(byte) }
            put(UInt8(ascii: " "))
            digits(time.year, 4)
            put(UInt8(ascii: " "))
            digits(time.secondOfDay / 3600, 2)
            put(UInt8(ascii: ":"))
            digits(time.secondOfDay / 60 % 60, 2)
            put(UInt8(ascii: ":"))
            digits(time.secondOfDay % 60, 2)
            for byte in " GMT".utf8 { put(byte) }
            return index
        }
    }

    /// Parses IMF-fixdate; nil for anything else.
    public static func parse(_ text: String) -> Int? {
        let parts = text.split(separator: " ")
        guard parts.count == 6, parts[5] == "GMT", let day = Int(parts[1]),
              let month = months.firstIndex(of: String(parts[2])), let year = Int(parts[3]) else { return nil }
        let clock = parts[4].split(separator: ":").compactMap { Int($0) }
        guard clock.count == 3, (1...9999).contains(year), (1...31).contains(day), (0...23).contains(clock[0]),
              (0...59).contains(clock[1]), (0...60).contains(clock[2]) else { return nil }
        var fields = tm()
        fields.tm_year = Int32(year - 1900)
        fields.tm_mon = Int32(month)
        fields.tm_mday = Int32(day)
        fields.tm_hour = Int32(clock[0])
        fields.tm_min = Int32(clock[1])
        fields.tm_sec = Int32(clock[2])
        return Int(timegm(&fields))
    }
}
