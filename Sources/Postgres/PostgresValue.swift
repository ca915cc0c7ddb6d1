import Foundation
import Observability

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
    /// `timestamptz[]` given as PostgreSQL's own microseconds since 2000-01-01 UTC (exact,
    /// where a `Date` is a double), elements possibly NULL.
    case optionalTimestampMicrosArray([Int64?])

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
        case .optionalTimestampMicrosArray: PostgresType.timestamptzArray
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
            return BinaryCoding.array(elementType: PostgresType.text, items) { $0.appendUTF8($1) }
        case .bytesArray(let items):
            return BinaryCoding.array(elementType: PostgresType.bytea, items) { $0.append(contentsOf: $1) }
        case .intArray(let items):
            return BinaryCoding.array(elementType: PostgresType.int8, items) { BinaryCoding.append($1, to: &$0) }
        case .timestampArray(let items):
            return BinaryCoding.array(elementType: PostgresType.timestamptz, items) {
                BinaryCoding.append(BinaryCoding.postgresMicros($1), to: &$0)
            }
        case .optionalTextArray(let items):
            return BinaryCoding.array(elementType: PostgresType.text, nullable: items) { $0.appendUTF8($1) }
        case .optionalIntArray(let items):
            return BinaryCoding.array(elementType: PostgresType.int8, nullable: items) {
                BinaryCoding.append($1, to: &$0)
            }
        case .optionalTimestampMicrosArray(let items):
            return BinaryCoding.array(elementType: PostgresType.timestamptz, nullable: items) {
                BinaryCoding.append($1, to: &$0)
            }
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

    /// Total: dates past ±292,000 years (which no caller should send, but a parser might
    /// let through) clamp to PostgreSQL's `infinity` / `-infinity`, never trap.
    static func postgresMicros(_ date: Date) -> Int64 {
        let micros = ((date.timeIntervalSince1970 - Double(postgresEpoch)) * 1_000_000).rounded()
        if micros.isNaN { return 0 }
        return Int64(exactly: micros) ?? (micros > 0 ? Int64.max : Int64.min)
    }

    static func date(fromPostgresMicros micros: Int64) -> Date {
        Date(timeIntervalSince1970: Double(micros) / 1_000_000 + Double(postgresEpoch))
    }

    static func int64(_ value: Int64) -> [UInt8] {
        withUnsafeBytes(of: value.bigEndian) { Array($0) }
    }

    static func append(_ value: Int64, to out: inout [UInt8]) {
        withUnsafeBytes(of: value.bigEndian) { out.append(contentsOf: $0) }
    }

    static func append(_ value: Int32, to out: inout [UInt8]) {
        withUnsafeBytes(of: value.bigEndian) { out.append(contentsOf: $0) }
    }

    /// One dimension, lower bound 1. Each element is written by `write` straight into the
    /// one buffer after a length placeholder that is filled in afterwards: a batch of reads
    /// sends hundreds of keys, and an array per element would cost an allocation each.
    static func array<Item>(elementType: UInt32, _ items: [Item],
                            _ write: (inout [UInt8], Item) -> Void) -> [UInt8] {
        array(elementType: elementType, items.lazy.map(Optional.some), hasNull: false, write)
    }

    /// The same with SQL NULL (length -1) for nil elements.
    static func array<Item>(elementType: UInt32, nullable items: [Item?],
                            _ write: (inout [UInt8], Item) -> Void) -> [UInt8] {
        array(elementType: elementType, items, hasNull: items.contains { $0 == nil }, write)
    }

    private static func array<Items: Collection, Item>(elementType: UInt32, _ items: Items, hasNull: Bool,
                                                     _ write: (inout [UInt8], Item) -> Void) -> [UInt8]
        where Items.Element == Item? {
        var out: [UInt8] = []
        out.reserveCapacity(20 + items.count * 24)
        for header in [1, hasNull ? 1 : 0, Int32(bitPattern: elementType), Int32(items.count), 1] as [Int32] {
            append(header, to: &out)
        }
        for item in items {
            guard let item else {
                append(Int32(-1), to: &out)
                continue
            }
            let lengthAt = out.count
            append(Int32(0), to: &out)
            write(&out, item)
            let length = Int32(out.count - lengthAt - 4).bigEndian
            withUnsafeBytes(of: length) { bytes in
                for offset in 0..<4 { out[lengthAt + offset] = bytes[offset] }
            }
        }
        return out
    }

    /// A big-endian integer of `size` bytes at `offset`; bytes past the buffer read as 0 (a
    /// value shorter than its type says is a server fault, and must not read out of bounds).
    static func readInt(_ bytes: UnsafeRawBufferPointer, at offset: Int, size: Int) -> Int64 {
        var value: Int64 = 0
        for index in 0..<size {
            let position = offset + index
            let byte = position >= 0 && position < bytes.count ? bytes[position] : 0
            value = value << 8 | Int64(byte)
        }
        // Sign-extend values narrower than 64 bits.
        let shift = Int64(64 - size * 8)
        return shift == 0 ? value : (value << shift) >> shift
    }
}
