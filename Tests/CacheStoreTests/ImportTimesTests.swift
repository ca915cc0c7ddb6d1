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
        let database = try TestDatabase.shared.migratedDatabase(prefix: "times")
        let pool = ConnectionPool(.init(url: TestDatabase.shared.url,
                                        overrides: TestDatabase.shared.overrides(database: database), maxConnections: 1))
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
}
