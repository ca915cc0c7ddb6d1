import CSQLite
import Foundation

/// A local tier's SQLite file (WAL): statements with bound values, rows as values. Not
/// thread-safe on its own: `LocalTier` holds its lock around every use.
final class LocalFile {
    enum Value: Equatable {
        case null, int(Int64), double(Double), text(String), blob(Data)

        var int: Int64? { if case .int(let value) = self { value } else { nil } }
        var double: Double? {
            switch self {
            case .double(let value): value
            case .int(let value): Double(value)
            default: nil
            }
        }
        var text: String? { if case .text(let value) = self { value } else { nil } }
        var blob: Data? {
            switch self {
            case .blob(let value): value
            case .text(let value): Data(value.utf8)
            default: nil
            }
        }
    }

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    private var db: OpaquePointer?

    init(path: String) throws {
        guard sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nil)
            == SQLITE_OK else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            sqlite3_close(db)
            throw Failure(description: "cannot open the local tier file \(path): \(message)")
        }
        sqlite3_busy_timeout(db, 2000)
        try run("PRAGMA journal_mode=WAL")
        try run("PRAGMA synchronous=NORMAL")
    }

    deinit { close() }

    func close() {
        sqlite3_close_v2(db)
        db = nil
    }

    /// Runs `sql` with `values` bound to `?1`, `?2`, …; the rows it gave.
    @discardableResult
    func run(_ sql: String, _ values: [Value] = []) throws -> [[Value]] {
        guard let db else { throw Failure(description: "the local tier file is closed") }
        var statement: OpaquePointer?
        guard sqlite3_prepare_v2(db, sql, -1, &statement, nil) == SQLITE_OK, let statement else {
            throw Failure(description: String(cString: sqlite3_errmsg(db)))
        }
        defer { sqlite3_finalize(statement) }
        for (index, value) in values.enumerated() { try bind(value, at: Int32(index + 1), in: statement) }
        var rows: [[Value]] = []
        while true {
            switch sqlite3_step(statement) {
            case SQLITE_ROW: rows.append((0..<sqlite3_column_count(statement)).map { column(statement, $0) })
            case SQLITE_DONE: return rows
            default: throw Failure(description: String(cString: sqlite3_errmsg(db)))
            }
        }
    }

    private func bind(_ value: Value, at index: Int32, in statement: OpaquePointer) throws {
        // SQLITE_TRANSIENT: SQLite copies the bytes (they live only as long as this call).
        let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
        let status: Int32 = switch value {
        case .null: sqlite3_bind_null(statement, index)
        case .int(let number): sqlite3_bind_int64(statement, index, number)
        case .double(let number): sqlite3_bind_double(statement, index, number)
        case .text(let text): sqlite3_bind_text(statement, index, text, -1, transient)
        case .blob(let data):
            data.withUnsafeBytes { bytes in
                sqlite3_bind_blob(statement, index, bytes.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32(data.count),
                                  transient)
            }
        }
        guard status == SQLITE_OK else { throw Failure(description: "cannot bind a value (\(status))") }
    }

    private func column(_ statement: OpaquePointer, _ index: Int32) -> Value {
        switch sqlite3_column_type(statement, index) {
        case SQLITE_INTEGER: return .int(sqlite3_column_int64(statement, index))
        case SQLITE_FLOAT: return .double(sqlite3_column_double(statement, index))
        case SQLITE_TEXT: return .text(String(cString: sqlite3_column_text(statement, index)))
        case SQLITE_BLOB:
            let count = Int(sqlite3_column_bytes(statement, index))
            guard count > 0, let bytes = sqlite3_column_blob(statement, index) else { return .blob(Data()) }
            return .blob(Data(bytes: bytes, count: count))
        default: return .null
        }
    }
}
