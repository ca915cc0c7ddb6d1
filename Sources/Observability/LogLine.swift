import Foundation
import JSONEscaping

/// Builds JSON log lines straight into bytes: one object a line,
/// `{"ts":"…","level":"…","component":"…","msg":"…",<fields>}`.
///
/// Keeps the timestamp text of the current second, so a line costs a clock read and a few
/// appends. Not thread-safe: each event loop owns one (its access log), and `Logger` makes
/// one per line.
public struct LogLine: ~Copyable {
    // The bytes live in memory of the line's own, appended to by copying: each event loop
    // writes an access line per request, some twenty appends, and an array's generic append
    // cost several times the copy. Not copyable, so two lines can never share that memory.
    private var storage: UnsafeMutablePointer<UInt8>
    private var capacity: Int
    public private(set) var count = 0
    private var stampSecond = -1
    private var stampPrefix: [UInt8] = []

    public init(capacity: Int = 256) {
        self.capacity = max(16, capacity)
        storage = UnsafeMutablePointer<UInt8>.allocate(capacity: self.capacity)
    }

    deinit { storage.deallocate() }

    public var isEmpty: Bool { count == 0 }
    /// The line's bytes (a copy).
    public var bytes: [UInt8] { Array(UnsafeBufferPointer(start: storage, count: count)) }

    /// Starts a line with the timestamp, level, component and message.
    public mutating func begin(_ level: LogLevel, component: String, message: String) {
        stamp()
        appendHead(level, component: component, message: message)
    }

    /// Starts a line with the timestamp and a head rendered once (`LogLine.head`): what
    /// `begin(_:component:message:)` writes, without the per-line work of its three strings.
    public mutating func begin(_ head: Part) {
        stamp()
        append(head)
    }

    /// The timestamp, to the millisecond, up to its closing `Z`.
    private mutating func stamp() {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        if now.tv_sec != stampSecond {
            stampSecond = now.tv_sec
            stampPrefix = Array(("{\"ts\":\"" + Self.secondText(now.tv_sec) + ".").utf8)
        }
        let millis = Int(now.tv_nsec / 1_000_000)
        stampPrefix.withUnsafeBytes { append($0) }
        append(UInt8(ascii: "0") + UInt8(millis / 100))
        append(UInt8(ascii: "0") + UInt8(millis / 10 % 10))
        append(UInt8(ascii: "0") + UInt8(millis % 10))
    }

    private mutating func appendHead(_ level: LogLevel, component: String, message: String) {
        append("Z\",\"level\":\"")
        append(level.name)
        append("\",\"component\":")
        appendEscaped(component)
        append(",\"msg\":")
        appendEscaped(message)
    }

    public mutating func field(_ key: String, _ value: String) {
        appendKey(key)
        appendEscaped(value)
    }

    /// A value known to need no JSON escaping (an HTTP token, a route template).
    public mutating func field(_ key: String, token value: String) {
        appendKey(key)
        appendToken(value)
    }

    public mutating func field(_ key: String, _ value: Int) {
        appendKey(key)
        appendInteger(value)
    }

    /// A field whose key was rendered once (`LogLine.key`).
    public mutating func field(_ key: Part, _ value: Int) {
        append(key)
        appendInteger(value)
    }

    /// A field whose key was rendered once, with a value that needs no escaping (an HTTP token).
    public mutating func field(_ key: Part, token value: String) {
        append(key)
        appendToken(value)
    }

    /// A field whose key was rendered once, with a value that needs no escaping followed by
    /// `hex` in lowercase hex digits (a request id numbered under its loop's prefix).
    public mutating func field(_ key: Part, token value: String, hex: UInt64?) {
        guard let hex else { return field(key, token: value) }
        append(key)
        append(UInt8(ascii: "\""))
        append(value)
        reserve(16)
        count += Hex.write(hex, to: storage + count)
        append(UInt8(ascii: "\""))
    }

    /// A string quoted as it is (the caller knows it needs no escaping).
    private mutating func appendToken(_ value: String) {
        append(UInt8(ascii: "\""))
        append(value)
        append(UInt8(ascii: "\""))
    }

    /// Bytes rendered once, by the same rules as `begin` and `field`, for a line that repeats
    /// (each loop's access line, one a request): appending them is one copy, where a field
    /// is a copy for each of its pieces and a check of the value.
    public struct Part: Sendable {
        public let bytes: [UInt8]
    }

    /// What `begin(_:component:message:)` writes after the timestamp.
    public static func head(_ level: LogLevel, component: String, message: String) -> Part {
        render { $0.appendHead(level, component: component, message: message) }
    }

    /// `,"key":`, for `field(_:_:)` with a `Part`.
    public static func key(_ key: String) -> Part { render { $0.appendKey(key) } }

    /// Fields as `field(_:token:)` writes them, one after the other.
    public static func tokenFields(_ fields: KeyValuePairs<String, String>) -> Part {
        render { line in for (key, value) in fields { line.field(key, token: value) } }
    }

    public mutating func append(_ part: Part) {
        part.bytes.withUnsafeBytes { append($0) }
    }

    private static func render(_ write: (inout LogLine) -> Void) -> Part {
        var line = LogLine(capacity: 64)
        write(&line)
        return Part(bytes: line.bytes)
    }

    public mutating func field(_ key: String, _ value: LogValue) {
        switch value {
        case .string(let text): field(key, text)
        case .int(let number): field(key, number)
        case .double(let number):
            appendKey(key)
            append(number.isFinite ? String(number) : "null")
        case .bool(let flag):
            appendKey(key)
            append(flag ? "true" : "false")
        }
    }

    /// Ends the line with `}` and a newline.
    public mutating func end() {
        append(UInt8(ascii: "}"))
        append(10)
    }

    /// Takes the bytes built so far, leaving the line empty (timestamp cache and memory kept).
    public mutating func take() -> [UInt8] {
        let taken = bytes
        count = 0
        return taken
    }

    /// Keys are identifiers chosen in code: quoted without escaping.
    private mutating func appendKey(_ key: String) {
        append(",\"")
        append(key)
        append("\":")
    }

    private mutating func appendInteger(_ value: Int) {
        // Digits written straight into the line's memory, last first, after one reservation
        // (an Int has at most 19 digits and a sign).
        reserve(20)
        if value < 0 {
            storage[count] = UInt8(ascii: "-")
            count += 1
        }
        var magnitude = value.magnitude
        var digits = 0
        var rest = magnitude
        repeat {
            digits += 1
            rest /= 10
        } while rest > 0
        var position = count + digits - 1
        repeat {
            storage[position] = UInt8(ascii: "0") + UInt8(magnitude % 10)
            magnitude /= 10
            position -= 1
        } while magnitude > 0
        count += digits
    }

    /// A JSON string: raw UTF-8 when nothing needs escaping (the usual case).
    private mutating func appendEscaped(_ text: String) {
        // Checked and copied over the bytes in place (walking `utf8` cost tens of
        // instructions a byte, on every access line).
        let copied = text.withUTF8Bytes { bytes -> Bool in
            guard !bytes.contains(where: JSONText.mustEscape) else { return false }
            append(UInt8(ascii: "\""))
            append(bytes)
            append(UInt8(ascii: "\""))
            return true
        }
        if !copied {
            var quoted: [UInt8] = []
            JSONText.appendString(text, to: &quoted)  // quotes included
            quoted.withUnsafeBytes { append($0) }
        }
    }

    // MARK: Appending

    private mutating func append(_ source: UnsafeRawBufferPointer) {
        guard let base = source.baseAddress, !source.isEmpty else { return }
        reserve(source.count)
        UnsafeMutableRawPointer(storage + count).copyMemory(from: base, byteCount: source.count)
        count += source.count
    }

    private mutating func append(_ text: StaticString) {
        append(UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    private mutating func append(_ text: String) {
        text.withUTF8Bytes { append($0) }
    }

    private mutating func append(_ byte: UInt8) {
        reserve(1)
        storage[count] = byte
        count += 1
    }

    /// Room for `extra` more bytes, doubling (a line of any length fits; the access log is
    /// handed on at 32 KiB, so its memory stays near its initial capacity).
    private mutating func reserve(_ extra: Int) {
        guard extra > capacity - count else { return }
        let grown = max(capacity * 2, count + extra)
        let larger = UnsafeMutablePointer<UInt8>.allocate(capacity: grown)
        larger.moveInitialize(from: storage, count: count)
        storage.deallocate()
        storage = larger
        capacity = grown
    }

    /// `YYYY-MM-DDTHH:MM:SS` in UTC, through strftime (much cheaper than a formatter).
    static func secondText(_ seconds: Int) -> String {
        var time = seconds
        var parts = tm()
        gmtime_r(&time, &parts)
        var text = [CChar](repeating: 0, count: 32)
        let length = strftime(&text, text.count, "%Y-%m-%dT%H:%M:%S", &parts)
        return String(decoding: text[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
