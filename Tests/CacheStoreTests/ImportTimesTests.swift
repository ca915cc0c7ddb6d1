import CacheCore
import CacheStore
import Foundation
import Postgres
import Testing
import TestSupport

/// An import sends its times as PostgreSQL's microseconds (`RFC3339.postgresMicroseconds`),
/// not as text for the server to read: the instant must be the one PostgreSQL's own input
/// gives the text, or a re-import's "unchanged" (which compares update times exactly) breaks.
@Suite struct ImportTimesTests {
    /// Random texts of the common form (fractions of 0 to 9 digits, `Z` and offsets, years
    /// around the Gregorian reform, days past a month's end, offsets PostgreSQL refuses past
    /// 15:59): every one read exactly is the
    /// instant PostgreSQL reads, and every one it refuses is left to PostgreSQL (nil) —
    /// none is read where PostgreSQL would refuse it (that would fail the whole query).
    @Test func timesSentAsMicrosecondsArePostgresOwnReading() throws {
        let pool = try TestDatabase.shared.migratedPool(prefix: "times", maxConnections: 1)
        defer { pool.closeIdle() }
        var generator = SystemRandomNumberGenerator()
        func two(_ range: ClosedRange<Int>) -> String {
            let value = Int.random(in: range, using: &generator)
            return value < 10 ? "0\(value)" : "\(value)"
        }
        var texts = ["2026-12-03T10:00:00Z", "2024-02-29T23:59:59.999999Z", "1583-01-01T00:00:00+15:59", "2026-12-03T10:00:00+23:59",
                     "9999-12-31T23:59:59.5-00:30", "2000-01-01T00:00:00Z", "1999-12-31T23:59:59.000001Z"]
        for _ in 0..<5_000 {
            let fraction = Bool.random(using: &generator) ? ""
                : "." + String((0..<Int.random(in: 1...9, using: &generator)).map { _ in "0123456789".randomElement()! })
            let zone = Bool.random(using: &generator) ? "Z"
                : (Bool.random(using: &generator) ? "+" : "-") + two(0...23) + ":" + two(0...59)
            texts.append("\(Int.random(in: 1570...9999, using: &generator))-\(two(1...12))-\(two(1...31))T"
                         + "\(two(0...23)):\(two(0...59)):\(two(0...59))\(fraction)\(zone)")
        }
        let exact = texts.compactMap { text in RFC3339.postgresMicroseconds(text).map { (text, $0) } }
        #expect(exact.count > texts.count / 3, "most texts are of the form read exactly")
        #expect(texts.allSatisfy { text in
            RFC3339.postgresMicroseconds(text) == nil || text.split(separator: ".").count == 1
                || text.split(separator: ".")[1].prefix(while: \.isNumber).count <= 6
        }, "more than six fractional digits are left to PostgreSQL")
        let differing = try pool.withConnection { connection in
            try connection.query("""
                SELECT t.text FROM unnest($1::text[], $2::timestamptz[]) AS t(text, sent)
                WHERE t.text::timestamptz IS DISTINCT FROM t.sent
                """, [.textArray(exact.map(\.0)), .optionalTimestampMicrosArray(exact.map(\.1))])
        }
        let shown = try differing.rows.prefix(5).map { try $0.string("text") ?? "" }
        #expect(differing.rowCount == 0, "\(shown)")
    }

    /// An export writes its times from PostgreSQL's binary microseconds
    /// (`RFC3339.formatPostgresMicroseconds`): every one must read as `to_char` wrote it
    /// before (a dump's bytes must not change), over years 1 to 9999, before and after 1970
    /// and 2000, and at the ends of seconds and years; outside those years it gives nil.
    @Test func timesWrittenInDumpsAreToCharsOwn() throws {
        let pool = try TestDatabase.shared.migratedPool(prefix: "dumptimes", maxConnections: 1)
        defer { pool.closeIdle() }
        var generator = SystemRandomNumberGenerator()
        let first: Int64 = -63_082_281_600_000_000  // 0001-01-01T00:00:00Z, in microseconds since 2000
        let last: Int64 = 252_455_615_999_999_999  // 9999-12-31T23:59:59.999999Z
        var micros: [Int64] = [first, last, 0, -1, 1, -946_684_800_000_000, -946_684_800_000_001, 999_999, -999_999,
                               31_535_999_999_999, 68_169_600_000_000 - 1, 86_400_000_000]
        for _ in 0..<5_000 { micros.append(Int64.random(in: first...last, using: &generator)) }
        for _ in 0..<2_000 { micros.append(Int64.random(in: -2_000_000_000_000_000...2_000_000_000_000_000, using: &generator)) }
        let ours = micros.map { RFC3339.formatPostgresMicroseconds($0) }
        #expect(ours.allSatisfy { $0 != nil }, "every time of years 1 to 9999 is written here")
        let differing = try pool.withConnection { connection in
            try connection.query("""
                SELECT t.text, to_char(t.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS theirs
                FROM unnest($1::text[], $2::timestamptz[]) AS t(text, at)
                WHERE t.text IS DISTINCT FROM to_char(t.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
                """, [.textArray(ours.map { $0 ?? "" }), .optionalTimestampMicrosArray(micros)])
        }
        let shown = try differing.rows.prefix(5).map { "\(try $0.string("text") ?? "") ≠ \(try $0.string("theirs") ?? "")" }
        #expect(differing.rowCount == 0, "\(shown)")
        #expect(RFC3339.formatPostgresMicroseconds(first - 1) == nil && RFC3339.formatPostgresMicroseconds(last + 1) == nil)
        #expect(RFC3339.formatPostgresMicroseconds(.max) == nil && RFC3339.formatPostgresMicroseconds(.min) == nil)
    }
}
