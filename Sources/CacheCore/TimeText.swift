import Foundation
import Locking
import Observability

/// RFC 3339 timestamps as TeamCache reads them, in requests, dumps and the command line alike
/// (there were two parsers, and they disagreed on five-digit years).
public enum RFC3339 {
    /// Longest timestamp read (a fraction of nanoseconds and an offset fit with room).
    public static let maxBytes = 64

    /// `2026-12-03T10:00:00Z`, with or without fractional seconds, with `Z` or an offset; nil
    /// for anything else. Four-digit years only: Foundation's parser also takes `300000-01-01`,
    /// a date no timestamp column can hold.
    public static func parse(_ text: String) -> Date? {
        let bytes = text.utf8
        guard (20...maxBytes).contains(bytes.count) else { return nil }
        let year = bytes.prefix(5)
        guard year.prefix(4).allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
              year.last == UInt8(ascii: "-") else { return nil }
        var text = text
        if let common = text.withUTF8(parseCommon) { return common }
        return Formatters.shared.withLock { $0.plain.date(from: text) ?? $0.fractional.date(from: text) }
    }

    /// The form every dump line and most requests carry, `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`
    /// with every field in range and a year from 1583, read by arithmetic: through the
    /// formatter it was 77% of an import's CPU (~400 µs a line, perf). nil for anything else,
    /// which the formatter then decides, so what is accepted and the `Date` it gives stay the
    /// formatter's exactly (its leniencies, `24:00:00` or `02-30`, included): milliseconds,
    /// the fraction's further digits dropped, divided as ICU divides them.
    static func parseCommon(_ bytes: UnsafeBufferPointer<UInt8>) -> Date? {
        guard let time = CommonForm(bytes) else { return nil }
        // ICU's time is milliseconds as a double, divided into seconds, then moved to
        // Foundation's reference date.
        let millis = time.unixSeconds * 1000 + time.nanoseconds / 1_000_000
        return Date(timeIntervalSinceReferenceDate: Double(millis) / 1000 - 978_307_200)
    }

    /// The instant PostgreSQL's `timestamptz` input gives `text`, as microseconds since
    /// 2000-01-01 UTC (its binary form), when it can be said exactly: the common form with at
    /// most six fractional digits, which PostgreSQL reads without rounding. nil otherwise
    /// (more digits, which it rounds in floating point; an offset past 15:59, which it
    /// refuses; a form only the formatter reads):
    /// then the text itself must go to PostgreSQL. An import sends its times this way, not as
    /// text for the server to parse (~1.2 ms a chunk of 500 entries).
    public static func postgresMicroseconds(_ text: String) -> Int64? {
        var text = text
        // PostgreSQL refuses offsets past 15:59 (22009), which RFC 3339 allows: left to it.
        guard let time = text.withUTF8({ CommonForm($0) }), time.fractionDigits <= 6,
              abs(time.offsetSeconds) < 16 * 3600 else { return nil }
        return Int64(time.unixSeconds - 946_684_800) * 1_000_000 + Int64(time.nanoseconds / 1000)
    }

    /// The common form's fields, checked: seconds since 1970 with the offset applied, and the
    /// fraction as nanoseconds (digits past the ninth are refused, as the formatter refuses them).
    private struct CommonForm {
        let unixSeconds: Int
        let nanoseconds: Int
        let fractionDigits: Int
        let offsetSeconds: Int

        init?(_ bytes: UnsafeBufferPointer<UInt8>) {
            func number(_ start: Int, _ count: Int) -> Int? {
                var value = 0
                for index in start..<start + count {
                    let digit = Int(bytes[index]) - 48
                    guard (0...9).contains(digit) else { return nil }
                    value = value * 10 + digit
                }
                return value
            }
            func at(_ index: Int, _ character: Unicode.Scalar) -> Bool { bytes[index] == UInt8(ascii: character) }
            guard bytes.count >= 20, let year = number(0, 4), at(4, "-"), let month = number(5, 2), at(7, "-"),
                  let day = number(8, 2), at(10, "T"), let hour = number(11, 2), at(13, ":"),
                  let minute = number(14, 2), at(16, ":"), let second = number(17, 2),
                  (1583...9999).contains(year), (1...12).contains(month),
                  (1...CivilTime.daysIn(month: month, year: year)).contains(day),
                  hour < 24, minute < 60, second < 60 else { return nil }
            var index = 19, nanoseconds = 0, digits = 0
            if at(index, ".") {
                let first = index + 1
                index = first
                while index < bytes.count, (48...57).contains(bytes[index]) { index += 1 }
                digits = index - first
                guard (1...9).contains(digits) else { return nil }
                for position in first..<first + 9 {
                    nanoseconds = nanoseconds * 10 + (position < index ? Int(bytes[position]) - 48 : 0)
                }
            }
            var offset = 0
            if index == bytes.count - 1, at(index, "Z") {
                offset = 0
            } else if index == bytes.count - 6, at(index, "+") || at(index, "-"), at(index + 3, ":"),
                      let hours = number(index + 1, 2), let minutes = number(index + 4, 2), hours < 24, minutes < 60 {
                offset = (hours * 3600 + minutes * 60) * (at(index, "-") ? -1 : 1)
            } else {
                return nil
            }
            let days = CivilTime.days(year: year, month: month, day: day)
            unixSeconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset
            self.nanoseconds = nanoseconds
            fractionDigits = digits
            offsetSeconds = offset
        }
    }

    // Written from calendar arithmetic (`CivilTime`), not a formatter: a write's answer, every
    // dump line and every feed change carries timestamps, and `String(format:)` or an
    // ISO8601DateFormatter under a lock cost ~40,000 instructions each (callgrind, a PUT).
    // Times before 1583 or after 9999 go through the formatter: a four-digit year cannot say
    // the latter, and Foundation writes the former in the Julian calendar (before the
    // Gregorian reform), which the arithmetic does not.
    static let arithmetic = -12_212_553_600...CivilTime.fourDigitYears.upperBound

    /// UTC to the second, rounded down (`2026-12-03T10:00:00Z`): the API's answers.
    public static func format(_ date: Date) -> String {
        let seconds = date.timeIntervalSince1970.rounded(.down)
        guard let whole = Int(exactly: seconds), arithmetic.contains(whole) else {
            return Formatters.shared.withLock { $0.plain.string(from: Date(timeIntervalSince1970: seconds)) }
        }
        return text(whole, fraction: nil)
    }

    /// UTC with milliseconds, as dumps write it. (Through the formatter: it rounds half-
    /// milliseconds by its own floating point, which the arithmetic would not match exactly,
    /// and no request path formats these.)
    public static func formatWithFraction(_ date: Date) -> String {
        Formatters.shared.withLock { $0.fractional.string(from: date) }
    }

    /// UTC with microseconds, as PostgreSQL's `to_char(… 'US')` writes it in dumps and feeds
    /// (`2026-12-03T10:00:00.250000Z`).
    public static func formatMicroseconds(_ date: Date) -> String {
        var whole = date.timeIntervalSince1970.rounded(.down)
        var micros = Int(((date.timeIntervalSince1970 - whole) * 1_000_000).rounded())
        if micros >= 1_000_000 { (whole, micros) = (whole + 1, micros - 1_000_000) }
        guard let seconds = Int(exactly: whole), arithmetic.contains(seconds) else {
            let text = Formatters.shared.withLock { $0.plain.string(from: Date(timeIntervalSince1970: whole)) }
            let digits = String(micros)
            return text.dropLast() + "." + String(repeating: "0", count: 6 - digits.count) + digits + "Z"
        }
        return text(seconds, fraction: (micros, 6))
    }

    /// PostgreSQL's microseconds (since 2000-01-01 UTC, as a binary `timestamptz` carries
    /// them) in the form `to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')` writes,
    /// which is what dumps have always carried; nil outside years 1 to 9999, where that form
    /// is not four digits of a year in the common era (the caller asks PostgreSQL then).
    /// Reading times as binary and writing them here spares the export five `to_char` calls
    /// a row (~35 ms of PostgreSQL's time for 20,000 entries).
    public static func formatPostgresMicroseconds(_ micros: Int64) -> String? {
        let (quotient, remainder) = micros.quotientAndRemainder(dividingBy: 1_000_000)
        let (whole, fraction) = remainder < 0 ? (quotient - 1, remainder + 1_000_000) : (quotient, remainder)
        let seconds = Int(whole) + 946_684_800
        guard postgresFourDigitYears.contains(seconds) else { return nil }
        return text(seconds, fraction: (Int(fraction), 6))
    }

    /// 0001-01-01T00:00:00Z through 9999-12-31T23:59:59Z, in Unix seconds.
    static let postgresFourDigitYears = -62_135_596_800...CivilTime.fourDigitYears.upperBound

    /// `YYYY-MM-DDTHH:MM:SS[.fraction]Z` for a second within four-digit years.
    private static func text(_ seconds: Int, fraction: (value: Int, digits: Int)?) -> String {
        let time = CivilTime(unixSeconds: seconds)
        let length = 20 + (fraction.map { $0.digits + 1 } ?? 0)
        return String(unsafeUninitializedCapacity: length) { buffer in
            var index = 0
            func digits(_ value: Int, _ count: Int) {
                var rest = value
                for position in stride(from: index + count - 1, through: index, by: -1) {
                    buffer[position] = UInt8(ascii: "0") + UInt8(rest % 10)
                    rest /= 10
                }
                index += count
            }
            func put(_ character: Unicode.Scalar) {
                buffer[index] = UInt8(ascii: character)
                index += 1
            }
            digits(time.year, 4)
            put("-")
            digits(time.month, 2)
            put("-")
            digits(time.day, 2)
            put("T")
            digits(time.secondOfDay / 3600, 2)
            put(":")
            digits(time.secondOfDay / 60 % 60, 2)
            put(":")
            digits(time.secondOfDay % 60, 2)
            if let fraction {
                put(".")
                digits(fraction.value, fraction.digits)
            }
            put("Z")
            return index
        }
    }

    /// Made once (a formatter is costly to make, and a dump has millions of lines), used
    /// under a lock (a formatter is not safe to share).
    private struct Formatters {
        static let shared = Locked(Formatters())
        let plain: ISO8601DateFormatter = {
            let formatter = ISO8601DateFormatter()
            formatter.formatOptions = [.withInternetDateTime]
            return formatter
        }()
        let fractional: ISO8601DateFormatter = {
            let formatter = ISO8601DateFormatter()
            formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
            return formatter
        }()
    }
}

/// Durations as settings and the command line take them (there were two parsers, and only
/// one knew `ms`).
public enum DurationText {
    private static let units: [(suffix: String, seconds: Double)] = [
        ("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600), ("d", 86400),
    ]

    /// Seconds, from plain seconds (`30`, `0.5`) or a number with a unit: `250ms`, `10s`,
    /// `5m`, `12h`, `30d`. The number is decimal digits with at most one point: `inf`, `nan`,
    /// exponents, signs and spaces are refused, so the answer is always finite and >= 0.
    public static func seconds(_ text: String) -> Double? {
        if let plain = decimal(Substring(text)) { return plain }
        for unit in units where text.hasSuffix(unit.suffix) {
            guard let value = decimal(text.dropLast(unit.suffix.count)) else { return nil }
            let seconds = value * unit.seconds
            return seconds.isFinite ? seconds : nil
        }
        return nil
    }

    private static func decimal(_ text: Substring) -> Double? {
        guard (1...32).contains(text.utf8.count) else { return nil }
        var points = 0
        for byte in text.utf8 {
            if byte == UInt8(ascii: ".") {
                points += 1
            } else if byte < UInt8(ascii: "0") || byte > UInt8(ascii: "9") {
                return nil
            }
        }
        guard points <= 1, text != "." else { return nil }
        return Double(text)
    }
}
