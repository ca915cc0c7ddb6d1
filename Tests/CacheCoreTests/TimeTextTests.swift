import CacheCore
import Foundation
import Testing

/// The one RFC 3339 parser and the one duration parser every caller shares (requests,
/// dumps, settings, the command line).
@Suite struct TimeTextTests {
    @Test func timestampsParseWithAndWithoutFractionsAndOffsets() throws {
        let whole = try #require(RFC3339.parse("2026-12-03T10:00:00Z"))
        #expect(whole.timeIntervalSince1970 == 1_796_292_000)
        let fraction = try #require(RFC3339.parse("2026-12-03T10:00:00.250Z"))
        #expect(abs(fraction.timeIntervalSince(whole) - 0.25) < 0.001)
        let offset = try #require(RFC3339.parse("2026-12-03T11:00:00+01:00"))
        #expect(offset == whole)
    }

    /// The two parsers disagreed here: a five-digit year no timestamp column can hold.
    @Test func onlyFourDigitYearsAndRFC3339Parse() {
        for text in ["30000-01-01T00:00:00Z", "300000-01-01T00:00:00Z", "", "2026-12-03", "2026-12-03 10:00:00Z",
                     "2026-12-03T10:00:00", "abcd-12-03T10:00:00Z", "2026-13-03T10:00:00Z",
                     "2026-12-03T10:00:00Z" + String(repeating: " ", count: 60)] {
            #expect(RFC3339.parse(text) == nil, "\(text) parsed")
        }
        #expect(DumpedEntry.parseTimestamp("30000-01-01T00:00:00Z") == nil, "dumps read timestamps as requests do")
    }

    @Test func formattedTimestampsParseBack() throws {
        let date = Date(timeIntervalSince1970: 1_796_292_000.125)
        let text = RFC3339.formatWithFraction(date)
        let back = try #require(RFC3339.parse(text), "\(text)")
        #expect(abs(back.timeIntervalSince(date)) < 0.001)
    }

    /// The calendar-arithmetic formatters write what Foundation's ISO 8601 formatter (and, to
    /// the second, `gmtime_r`) wrote before them, over random times of every four-digit year,
    /// the edges of that range, and the fractions that round.
    @Test func formattedTimestampsAreTheFormattersText() {
        let plain = ISO8601DateFormatter()
        plain.formatOptions = [.withInternetDateTime]
        let fractional = ISO8601DateFormatter()
        fractional.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        func microseconds(_ date: Date) -> String {  // the former formatMicroseconds
            var whole = date.timeIntervalSince1970.rounded(.down)
            var micros = Int(((date.timeIntervalSince1970 - whole) * 1_000_000).rounded())
            if micros >= 1_000_000 { (whole, micros) = (whole + 1, micros - 1_000_000) }
            let digits = String(micros)
            return plain.string(from: Date(timeIntervalSince1970: whole)).dropLast() + "."
                + String(repeating: "0", count: 6 - digits.count) + digits + "Z"
        }
        var generator = SystemRandomNumberGenerator()
        let edges: [Double] = [0, -1, 1_796_292_000.9999, 1_796_292_000.0005, 1_796_292_000.9995, 951_782_400,
                               -62_135_596_800, 253_402_300_799.5, 1_796_292_000.125]
        let times = edges + (0..<20_000).map { _ in
            Double.random(in: -62_135_596_800 ... 253_402_300_799, using: &generator).rounded(.down)
                + Double(Int.random(in: 0..<1_000_000, using: &generator)) / 1_000_000
        }
        for time in times {
            let date = Date(timeIntervalSince1970: time)
            #expect(RFC3339.format(date) == plain.string(from: Date(timeIntervalSince1970: time.rounded(.down))),
                    "\(time)")
            #expect(RFC3339.formatWithFraction(date) == fractional.string(from: date), "\(time)")
            #expect(RFC3339.formatMicroseconds(date) == microseconds(date), "\(time)")
        }
    }

    /// The arithmetic parse accepts what the formatters accepted and gives the same `Date`,
    /// bit for bit: random texts of every form (fractions of 1 to 9 digits, `Z` and offsets,
    /// years around the Gregorian reform), fields out of range (which the formatter, being
    /// lenient, may still take) and single bytes changed.
    @Test func parsedTimestampsAreTheFormattersDates() {
        let plain = ISO8601DateFormatter()
        plain.formatOptions = [.withInternetDateTime]
        let fractional = ISO8601DateFormatter()
        fractional.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        func formatters(_ text: String) -> Date? {
            let bytes = text.utf8
            guard (20...RFC3339.maxBytes).contains(bytes.count),
                  bytes.prefix(4).allSatisfy({ (48...57).contains($0) }), bytes.dropFirst(4).first == 45 else { return nil }
            return plain.date(from: text) ?? fractional.date(from: text)
        }
        var generator = SystemRandomNumberGenerator()
        func two(_ range: ClosedRange<Int>) -> String {
            let value = Int.random(in: range, using: &generator)
            return value < 10 ? "0\(value)" : "\(value)"
        }
        var texts = ["2026-12-03T10:00:00Z", "2026-02-29T10:00:00Z", "2024-02-29T23:59:59.999999999Z",
                     "1583-01-01T00:00:00Z", "1582-12-31T23:59:59Z", "9999-12-31T23:59:59.999+00:00",
                     "2026-12-03T24:00:00Z", "2026-12-03T10:00:60Z", "2026-12-03T10:00:00.Z", "2026-12-03T10:00:00+24:00",
                     "2026-12-03T10:00:00-00:00", "2026-12-03T10:00:00.1234567890Z", "2026-12-03t10:00:00z"]
        for _ in 0..<20_000 {
            let year = String(Int.random(in: 1570...9999, using: &generator))
            let fraction = Bool.random(using: &generator) ? ""
                : "." + String((0..<Int.random(in: 1...9, using: &generator)).map { _ in "0123456789".randomElement()! })
            let zone = Bool.random(using: &generator) ? "Z"
                : (Bool.random(using: &generator) ? "+" : "-") + two(0...23) + ":" + ["00", "30", "45", two(0...59)].randomElement()!
            var text = "\(year)-\(two(1...12))-\(two(1...31))T\(two(0...24)):\(two(0...59)):\(two(0...60))\(fraction)\(zone)"
            if Int.random(in: 0..<8, using: &generator) == 0 {  // one byte changed
                var bytes = Array(text.utf8)
                bytes[Int.random(in: 0..<bytes.count, using: &generator)] = Array("0123456789-:T.Z+ zt".utf8).randomElement()!
                text = String(decoding: bytes, as: UTF8.self)
            }
            texts.append(text)
        }
        for text in texts {
            let expected = formatters(text), parsed = RFC3339.parse(text)
            #expect(parsed?.timeIntervalSinceReferenceDate.bitPattern == expected?.timeIntervalSinceReferenceDate.bitPattern,
                    "\(text): \(String(describing: parsed?.timeIntervalSinceReferenceDate)) for the formatter's \(String(describing: expected?.timeIntervalSinceReferenceDate))")
        }
    }

    @Test func durationsTakeEveryUnit() {
        let cases: [(String, Double)] = [("30", 30), ("0.5", 0.5), ("250ms", 0.25), ("10s", 10), ("5m", 300),
                                         ("12h", 43_200), ("30d", 2_592_000), ("1.5h", 5_400), ("0", 0)]
        for (text, seconds) in cases {
            #expect(DurationText.seconds(text) == seconds, "\(text)")
        }
    }

    @Test func durationsRefuseWhatIsNotOne() {
        for text in ["", "ms", "s", ".", "inf", "nan", "infs", "1e3", "1e300d", "-5s", "+5s", " 5s", "5 s", "5x", "5.5.5s",
                     "0x10", "5sm", "5mss", String(repeating: "9", count: 40)] {
            #expect(DurationText.seconds(text) == nil, "\(text) read as a duration")
        }
    }

    /// Random strings never trap and never answer a negative or infinite duration.
    @Test func durationsAreTotal() {
        var generator = SystemRandomNumberGenerator()
        let alphabet = Array("0123456789.msdhx-+e inf")
        for _ in 0..<20_000 {
            let text = String((0..<Int.random(in: 0...8, using: &generator)).map { _ in alphabet.randomElement()! })
            if let seconds = DurationText.seconds(text) { #expect(seconds.isFinite && seconds >= 0, "\(text)") }
            _ = RFC3339.parse(text)
        }
    }
}
