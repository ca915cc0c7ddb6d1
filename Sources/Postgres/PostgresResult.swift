import CLibPQ
import Foundation

/// The rows of one statement, owning its `PGresult` (cleared in `deinit`, nowhere else).
///
/// Results are requested in binary format; accessors decode by the column's type OID.
public final class PostgresResult {
    private let handle: OpaquePointer

    init(handle: OpaquePointer) { self.handle = handle }
    deinit { PQclear(handle) }

    public var rowCount: Int { Int(PQntuples(handle)) }
    public var columnCount: Int { Int(PQnfields(handle)) }

    /// Rows touched by an INSERT/UPDATE/DELETE.
    public var affectedRows: Int { Int(String(cString: PQcmdTuples(handle))) ?? 0 }

    public subscript(row: Int) -> PostgresRow { PostgresRow(result: self, index: row) }
    public var rows: [PostgresRow] { (0..<rowCount).map { PostgresRow(result: self, index: $0) } }
    public var first: PostgresRow? { rowCount > 0 ? self[0] : nil }

    func isNull(_ row: Int, _ column: Int) -> Bool { PQgetisnull(handle, Int32(row), Int32(column)) == 1 }

    /// Whether the values add up to `limit` bytes or more. Only small results are measured
    /// (a few rows: one large entry); a long batch of rows is left unmeasured, cheaply.
    func holdsLargeValues(_ limit: Int) -> Bool {
        let rows = PQntuples(handle), columns = PQnfields(handle)
        guard rows > 0, rows <= 8 else { return false }
        var total = 0
        for row in 0..<rows {
            for column in 0..<columns { total += Int(PQgetlength(handle, row, column)) }
        }
        return total >= limit
    }
    func type(_ column: Int) -> UInt32 { UInt32(PQftype(handle, Int32(column))) }

    /// Column names, read once. A lookup starts where the previous one matched: decoders
    /// ask for the columns of every row in the same order, so each lookup usually costs one
    /// comparison (column names are short, and short strings compare by value in one step).
    /// PQfnumber would copy and case-fold the name on every call; hashing costs more too.
    private lazy var columnNames: [String] = (0..<columnCount).map { String(cString: PQfname(handle, Int32($0))) }
    private var nextColumn = 0

    func columnIndex(_ name: String) -> Int? {
        let names = columnNames
        var index = nextColumn
        for _ in 0..<names.count {
            if index == names.count { index = 0 }
            if names[index] == name {
                nextColumn = index + 1
                return index
            }
            index += 1
        }
        return nil
    }

    func withValue<T>(_ row: Int, _ column: Int, _ body: (UnsafeRawBufferPointer) -> T) -> T {
        let length = Int(PQgetlength(handle, Int32(row), Int32(column)))
        let pointer = PQgetvalue(handle, Int32(row), Int32(column))
        return body(UnsafeRawBufferPointer(start: pointer, count: length))
    }
}

/// One row of a `PostgresResult`; accessors return nil for SQL NULL and throw on a type mismatch.
public struct PostgresRow {
    let result: PostgresResult
    let index: Int

    private func column(_ name: String) throws -> Int {
        guard let column = result.columnIndex(name) else {
            throw PostgresError(.decoding, serverMessage: "no column \(name)")
        }
        return column
    }

    private func mismatch(_ name: String, _ expected: String) -> PostgresError {
        PostgresError(.decoding, serverMessage: "column \(name) is not \(expected)")
    }

    public func isNull(_ name: String) throws -> Bool { result.isNull(index, try column(name)) }

    public func bytes(_ name: String) throws -> [UInt8]? {
        let column = try column(name)
        if result.isNull(index, column) { return nil }
        return result.withValue(index, column) { Array($0) }
    }

    public func string(_ name: String) throws -> String? {
        let column = try column(name)
        if result.isNull(index, column) { return nil }
        switch result.type(column) {
        case PostgresType.text, PostgresType.varchar, PostgresType.name, PostgresType.bpchar, PostgresType.json:
            return result.withValue(index, column) { String(decoding: $0, as: UTF8.self) }
        case PostgresType.jsonb:
            // Binary jsonb is a version byte (1) followed by the JSON text.
            return result.withValue(index, column) { String(decoding: $0.dropFirst(), as: UTF8.self) }
        default: throw mismatch(name, "text")
        }
    }

    public func int(_ name: String) throws -> Int? {
        let column = try column(name)
        if result.isNull(index, column) { return nil }
        let size: Int
        switch result.type(column) {
        case PostgresType.int8: size = 8
        case PostgresType.int4, PostgresType.oid: size = 4
        case PostgresType.int2: size = 2
        default: throw mismatch(name, "an integer")
        }
        return result.withValue(index, column) { Int(BinaryCoding.readInt($0, at: 0, size: size)) }
    }

    public func bool(_ name: String) throws -> Bool? {
        let column = try column(name)
        if result.isNull(index, column) { return nil }
        guard result.type(column) == PostgresType.bool else { throw mismatch(name, "bool") }
        return result.withValue(index, column) { $0.first == 1 }
    }

    public func date(_ name: String) throws -> Date? {
        let column = try column(name)
        if result.isNull(index, column) { return nil }
        guard result.type(column) == PostgresType.timestamptz else { throw mismatch(name, "timestamptz") }
        return result.withValue(index, column) {
            BinaryCoding.date(fromPostgresMicros: BinaryCoding.readInt($0, at: 0, size: 8))
        }
    }

    /// A `timestamptz` as PostgreSQL keeps it: microseconds since 2000-01-01 UTC, exact (a
    /// `Date` is a `Double` of seconds, and need not round-trip every microsecond).
    public func postgresMicroseconds(_ name: String) throws -> Int64? {
        let column = try column(name)
        if result.isNull(index, column) { return nil }
        guard result.type(column) == PostgresType.timestamptz else { throw mismatch(name, "timestamptz") }
        return result.withValue(index, column) { BinaryCoding.readInt($0, at: 0, size: 8) }
    }

    /// A one-dimensional `text[]` (NULL elements are skipped).
    public func stringArray(_ name: String) throws -> [String]? {
        let column = try column(name)
        if result.isNull(index, column) { return nil }
        guard result.type(column) == PostgresType.textArray else { throw mismatch(name, "text[]") }
        return result.withValue(index, column) { raw -> [String] in
            // Every length is checked against the buffer: a malformed value ends the array.
            guard raw.count >= 20, BinaryCoding.readInt(raw, at: 0, size: 4) == 1 else { return [] }
            let count = Int(BinaryCoding.readInt(raw, at: 12, size: 4))
            var offset = 20
            var out: [String] = []
            out.reserveCapacity(min(max(count, 0), raw.count / 4))
            while out.count < count && offset + 4 <= raw.count {
                let length = Int(BinaryCoding.readInt(raw, at: offset, size: 4))
                offset += 4
                guard length >= 0 else { continue }
                guard length <= raw.count - offset else { break }
                out.append(String(decoding: UnsafeRawBufferPointer(rebasing: raw[offset..<offset + length]),
                                  as: UTF8.self))
                offset += length
            }
            return out
        }
    }
}
