import Foundation

/// A bind parameter, sent in PostgreSQL's binary format so `bytea` with NUL bytes and
/// numbers round-trip exactly.
public enum PostgresValue: Sendable {
    case null
    case text(String)
    case bytes([UInt8])
    case int(Int64)
    case bool(Bool)
    case double(Double)
    case timestamp(Date)
    case jsonb(String)
    case textArray([String])
    case bytesArray([[UInt8]])
    case intArray([Int64])
    case timestampArray([Date])
    /// Arrays whose elements may be SQL NULL (one column of a batch of rows).
    case optionalTextArray([String?])
    case optionalIntArray([Int64?])

    public static func int(_ value: Int) -> PostgresValue { .int(Int64(value)) }
    public static func optionalText(_ value: String?) -> PostgresValue { value.map { .text($0) } ?? .null }

    /// Type OID declared at prepare time; 0 lets the server infer it from the SQL.
    var typeOID: UInt32 {
        switch self {
        case .null: 0
        case .text: PostgresType.text
        case .bytes: PostgresType.bytea
        case .int: PostgresType.int8
        case .bool: PostgresType.bool
        case .double: PostgresType.float8
        case .timestamp: PostgresType.timestamptz
        case .jsonb: PostgresType.jsonb
        case .textArray: PostgresType.textArray
        case .bytesArray: PostgresType.byteaArray
        case .intArray: PostgresType.int8Array
        case .timestampArray: PostgresType.timestamptzArray
        case .optionalTextArray: PostgresType.textArray
        case .optionalIntArray: PostgresType.int8Array
        }
    }

    /// The binary encoding; nil for SQL NULL.
    var binary: [UInt8]? {
        switch self {
        case .null: return nil
        case .text(let text): return Array(text.utf8)
        case .bytes(let bytes): return bytes
        case .int(let number): return BinaryCoding.int64(number)
        case .bool(let flag): return [flag ? 1 : 0]
        case .double(let number): return BinaryCoding.int64(Int64(bitPattern: number.bitPattern))
        case .timestamp(let date): return BinaryCoding.int64(BinaryCoding.postgresMicros(date))
        case .jsonb(let json): return [1] + Array(json.utf8)
        case .textArray(let items):
            return BinaryCoding.array(elementType: PostgresType.text, items.map { Array($0.utf8) })
        case .bytesArray(let items):
            return BinaryCoding.array(elementType: PostgresType.bytea, items)
        case .intArray(let items):
            return BinaryCoding.array(elementType: PostgresType.int8, items.map(BinaryCoding.int64))
        case .timestampArray(let items):
            return BinaryCoding.array(
                elementType: PostgresType.timestamptz,
                items.map { BinaryCoding.int64(BinaryCoding.postgresMicros($0)) })
        case .optionalTextArray(let items):
            return BinaryCoding.array(elementType: PostgresType.text, items.map { $0.map { Array($0.utf8) } })
        case .optionalIntArray(let items):
            return BinaryCoding.array(elementType: PostgresType.int8, items.map { $0.map(BinaryCoding.int64) })
        }
    }
}

/// Type OIDs from pg_type that the binary coder knows.
enum PostgresType {
    static let bool: UInt32 = 16
    static let bytea: UInt32 = 17
    static let name: UInt32 = 19
    static let int8: UInt32 = 20
    static let int2: UInt32 = 21
    static let int4: UInt32 = 23
    static let text: UInt32 = 25
    static let oid: UInt32 = 26
    static let json: UInt32 = 114
    static let float4: UInt32 = 700
    static let float8: UInt32 = 701
    static let bpchar: UInt32 = 1042
    static let varchar: UInt32 = 1043
    static let timestamptz: UInt32 = 1184
    static let jsonb: UInt32 = 3802
    static let byteaArray: UInt32 = 1001
    static let textArray: UInt32 = 1009
    static let int8Array: UInt32 = 1016
    static let timestamptzArray: UInt32 = 1185
}

/// Big-endian integers, timestamps and one-dimensional arrays in PostgreSQL's binary format.
enum BinaryCoding {
    /// PostgreSQL's epoch (2000-01-01) in Unix seconds.
    static let postgresEpoch: Int64 = 946_684_800

    static func postgresMicros(_ date: Date) -> Int64 {
        Int64(((date.timeIntervalSince1970 - Double(postgresEpoch)) * 1_000_000).rounded())
    }

    static func date(fromPostgresMicros micros: Int64) -> Date {
        Date(timeIntervalSince1970: Double(micros) / 1_000_000 + Double(postgresEpoch))
    }

    static func int64(_ value: Int64) -> [UInt8] {
        withUnsafeBytes(of: value.bigEndian) { Array($0) }
    }

    static func int32(_ value: Int32) -> [UInt8] {
        withUnsafeBytes(of: value.bigEndian) { Array($0) }
    }

    static func array(elementType: UInt32, _ items: [[UInt8]]) -> [UInt8] {
        array(elementType: elementType, items.map { Optional($0) })
    }

    /// One dimension, lower bound 1; a nil element is SQL NULL (length -1).
    static func array(elementType: UInt32, _ items: [[UInt8]?]) -> [UInt8] {
        let hasNull: Int32 = items.contains { $0 == nil } ? 1 : 0
        var out = int32(1) + int32(hasNull) + int32(Int32(bitPattern: elementType))
        out += int32(Int32(items.count)) + int32(1)
        for item in items {
            guard let item else {
                out += int32(-1)
                continue
            }
            out += int32(Int32(item.count))
            out += item
        }
        return out
    }

    static func readInt(_ bytes: UnsafeRawBufferPointer, at offset: Int, size: Int) -> Int64 {
        var value: Int64 = 0
        for index in 0..<size { value = value << 8 | Int64(bytes[offset + index]) }
        // Sign-extend values narrower than 64 bits.
        let shift = Int64(64 - size * 8)
        return shift == 0 ? value : (value << shift) >> shift
    }
}
