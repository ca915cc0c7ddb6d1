/// A Unix time as a proleptic Gregorian UTC date and time of day, by the days-from-civil
/// arithmetic of H. Hinnant's "chrono-compatible low-level date algorithms" (floor
/// divisions, so times before 1970 come out right too). For years 0 to 9999 (what a
/// four-digit year can say: `HTTPDate`, `RFC3339`), where nothing overflows.
public struct CivilTime: Equatable, Sendable {
    public let year: Int
    /// 1...12
    public let month: Int
    /// 1...31
    public let day: Int
    /// 0 (Sunday) ... 6
    public let weekday: Int
    public let secondOfDay: Int

    public init(year: Int, month: Int, day: Int, weekday: Int, secondOfDay: Int) {
        (self.year, self.month, self.day, self.weekday, self.secondOfDay) = (year, month, day, weekday, secondOfDay)
    }

    /// The first and last second a four-digit year can name (years 0 to 9999).
    public static let fourDigitYears = -62_167_219_200...253_402_300_799
}

extension CivilTime {
    public init(unixSeconds seconds: Int) {
        let days = Self.floorDivide(seconds, 86_400)
        // 1970-01-01 was a Thursday.
        let weekday = (days % 7 + 11) % 7
        let shifted = days + 719_468  // days since 0000-03-01
        let era = Self.floorDivide(shifted, 146_097)
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthFromMarch = (5 * dayOfYear + 2) / 153
        let month = monthFromMarch < 10 ? monthFromMarch + 3 : monthFromMarch - 9
        self.init(year: yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month: month,
                  day: dayOfYear - (153 * monthFromMarch + 2) / 5 + 1, weekday: weekday,
                  secondOfDay: seconds - days * 86_400)
    }

    static func floorDivide(_ value: Int, _ divisor: Int) -> Int {
        let quotient = value / divisor
        return value % divisor < 0 ? quotient - 1 : quotient
    }
}

extension CivilTime {
    /// Days from 1970-01-01 to a proleptic Gregorian date (Hinnant's days_from_civil), for
    /// years 0 to 9999 and a valid month and day.
    public static func days(year: Int, month: Int, day: Int) -> Int {
        let shiftedYear = month <= 2 ? year - 1 : year
        let era = floorDivide(shiftedYear, 400)
        let yearOfEra = shiftedYear - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// 28 to 31.
    public static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }
}
