import Glibc
@testable import HTTPServer
import Observability
import Testing

/// The calendar arithmetic behind `HTTPDate.format` against the C library's `gmtime_r`,
/// over the whole range a four-digit year covers, and what happens outside it.
@Suite struct HTTPDateTests {
    private func expected(_ seconds: Int) -> CivilTime? {
        var time = time_t(seconds)
        var parts = tm()
        guard gmtime_r(&time, &parts) != nil else { return nil }
        return CivilTime(year: Int(parts.tm_year) + 1900, month: Int(parts.tm_mon) + 1, day: Int(parts.tm_mday),
                         weekday: Int(parts.tm_wday),
                         secondOfDay: Int(parts.tm_hour) * 3600 + Int(parts.tm_min) * 60 + Int(parts.tm_sec))
    }

    @Test func agreesWithGmtimeAcrossYearsZeroTo9999() {
        let range = HTTPDate.formattable
        var samples = [range.lowerBound, range.upperBound, -1, 0, 1, 86_399, 86_400, -86_400, -86_401,
                       951_782_400, 951_868_799, 4_107_542_400, -2_203_891_200, -12_219_292_800]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<200_000 { samples.append(Int.random(in: range, using: &generator)) }
        // Every day boundary around the leap days of 1900, 2000 and 2100.
        for year in [-2_208_988_800, 946_684_800, 4_102_444_800] {
            for day in -400...400 { samples.append(year + day * 86_400 + (day % 2 == 0 ? 0 : 86_399)) }
        }
        for seconds in samples {
            #expect(CivilTime(unixSeconds: seconds) == expected(seconds), "\(seconds)")
        }
        #expect(HTTPDate.format(unixSeconds: range.lowerBound) == "Sat, 01 Jan 0000 00:00:00 GMT")
        #expect(HTTPDate.format(unixSeconds: range.upperBound) == "Fri, 31 Dec 9999 23:59:59 GMT")
    }

    @Test func timesOutsideFourDigitYearsAreTheEpochNeverATrap() {
        for seconds in [Int.min, Int.min + 1, HTTPDate.formattable.lowerBound - 1, HTTPDate.formattable.upperBound + 1,
                        Int.max - 1, Int.max] {
            #expect(HTTPDate.format(unixSeconds: seconds) == "Thu, 01 Jan 1970 00:00:00 GMT")
        }
    }
}
