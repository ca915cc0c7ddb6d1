import Foundation
import Postgres
import Testing
import TestSupport

@Suite struct PostgresConnectionTests {
    let database: String
    let connection: PostgresConnection

    init() throws {
        database = try TestDatabase.shared.freshDatabase(prefix: "conn")
        connection = try TestDatabase.shared.connect(database: database)
        try connection.execute("CREATE TABLE blobs (id int PRIMARY KEY, data bytea, label text)")
    }

    /// A statement first called with NULL (its parameter's type left to PostgreSQL: jsonb
    /// here) and then with text: the text is not sent in binary to a jsonb parameter.
    @Test func aParameterFirstNullThenTypedGetsAStatementOfItsOwn() throws {
        let sql = "SELECT ($1::jsonb)::text AS json"
        #expect(try connection.query(sql, [.null]).first?.string("json") == nil)
        #expect(try connection.query(sql, [.text("[1, 2]")]).first?.string("json") == "[1, 2]")
        #expect(try connection.query(sql, [.null]).first?.string("json") == nil)
        #expect(try connection.query(sql, [.text("{\"a\": 1}")]).first?.string("json") == "{\"a\": 1}")
    }

    @Test func byteaWithNulBytesRoundTrips() throws {
        let bytes: [UInt8] = [0, 1, 0, 255, 0, 0, 7]
        try connection.query("INSERT INTO blobs (id, data) VALUES ($1, $2)", [.int(1), .bytes(bytes)])
        let row = try #require(try connection.query("SELECT data FROM blobs WHERE id = $1", [.int(1)]).first)
        #expect(try row.bytes("data") == bytes)
    }

    @Test func eightMebibyteValueRoundTrips() throws {
        var bytes = [UInt8](repeating: 0, count: 8 * 1024 * 1024)
        bytes.withUnsafeMutableBytes { raw in
            for index in stride(from: 0, to: raw.count, by: 8) { raw.storeBytes(of: UInt64.random(in: 0...UInt64.max), toByteOffset: index, as: UInt64.self) }
        }
        try connection.query("INSERT INTO blobs (id, data) VALUES ($1, $2)", [.int(2), .bytes(bytes)])
        let row = try #require(try connection.query("SELECT data FROM blobs WHERE id = $1", [.int(2)]).first)
        #expect(try row.bytes("data") == bytes)
    }

    @Test func typedValuesRoundTrip() throws {
        let when = Date(timeIntervalSince1970: 1_780_000_000.123456)
        let row = try #require(try connection.query(
            "SELECT $1::bigint AS n, $2::bool AS b, $3::timestamptz AS t, $4::text[] AS tags, $5::jsonb AS j, $6::text AS s",
            [.int(-42), .bool(true), .timestamp(when), .textArray(["a", "b,c", "\"q\""]), .jsonb("{\"k\": [1, 2]}"),
             .null]).first)
        #expect(try row.int("n") == -42)
        #expect(try row.bool("b") == true)
        #expect(abs(try #require(try row.date("t")).timeIntervalSince(when)) < 0.000_001)
        #expect(try row.stringArray("tags") == ["a", "b,c", "\"q\""])
        #expect(try row.string("j") == "{\"k\": [1, 2]}")
        #expect(try row.string("s") == nil)
    }

    @Test func syntaxErrorIsTyped() throws {
        let error = try #require(throws: PostgresError.self) { try connection.query("SELEC 1") }
        #expect(error.kind == .query)
        #expect(error.sqlState == .syntaxError)
        #expect(!error.description.contains("SELEC"))
    }

    @Test func uniqueViolationIsTypedWithoutRowData() throws {
        try connection.execute("CREATE TABLE names (name text PRIMARY KEY)")
        try connection.query("INSERT INTO names (name) VALUES ($1)", [.text("secret-value")])
        let error = try #require(throws: PostgresError.self) {
            try connection.query("INSERT INTO names (name) VALUES ($1)", [.text("secret-value")])
        }
        #expect(error.sqlState == .uniqueViolation)
        #expect(error.serverMessage.contains("secret-value"))
        #expect(!error.description.contains("secret-value"))
        // The connection stays usable after a statement error.
        #expect(try connection.query("SELECT 1 AS one").first?.int("one") == 1)
    }

    @Test func transactionRollsBackOnError() throws {
        struct Abort: Error {}
        #expect(throws: Abort.self) {
            try connection.transaction { transaction in
                try transaction.query("INSERT INTO blobs (id) VALUES ($1)", [.int(10)])
                throw Abort()
            }
        }
        #expect(try connection.query("SELECT id FROM blobs WHERE id = $1", [.int(10)]).rowCount == 0)
    }
}
