import Foundation

/// Builds JSON log lines straight into bytes: one object a line,
/// `{"ts":"…","level":"…","component":"…","msg":"…",<fields>}`.
///
/// Keeps the timestamp text of the current second, so a line costs a clock read and a few
/// appends. Not thread-safe: each event loop owns one (its access log), and `Logger` makes
/// one per line.
public struct LogLine {
    public private(set) var bytes: [UInt8] = []
    private var stampSecond = -1
    private var stampPrefix: [UInt8] = []

    public init(capacity: Int = 256) {
        bytes.reserveCapacity(capacity)
    }

    public var isEmpty: Bool { bytes.isEmpty }
    public var count: Int { bytes.count }

    /// Starts a line with the timestamp, level, component and message.
    public mutating func begin(_ level: LogLevel, component: String, message: String) {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        if now.tv_sec != stampSecond {
            stampSecond = now.tv_sec
            stampPrefix = Array(("{\"ts\":\"" + Self.secondText(now.tv_sec) + ".").utf8)
        }
        let millis = Int(now.tv_nsec / 1_000_000)
        bytes += stampPrefix
        bytes.append(UInt8(ascii: "0") + UInt8(millis / 100))
        bytes.append(UInt8(ascii: "0") + UInt8(millis / 10 % 10))
        bytes.append(UInt8(ascii: "0") + UInt8(millis % 10))
        bytes.appendASCII("Z\",\"level\":\"")
        bytes.appendUTF8(level.name)
        bytes.appendASCII("\",\"component\":")
        appendEscaped(component)
        bytes.appendASCII(",\"msg\":")
        appendEscaped(message)
    }

    public mutating func field(_ key: String, _ value: String) {
        appendKey(key)
        appendEscaped(value)
    }

    /// A value known to need no JSON escaping (an HTTP token, a route template).
    public mutating func field(_ key: String, token value: String) {
        appendKey(key)
        bytes.append(UInt8(ascii: "\""))
        bytes.appendUTF8(value)
        bytes.append(UInt8(ascii: "\""))
    }

    public mutating func field(_ key: String, _ value: Int) {
        appendKey(key)
        appendInteger(value)
    }

    public mutating func field(_ key: String, _ value: LogValue) {
        switch value {
        case .string(let text): field(key, text)
        case .int(let number): field(key, number)
        case .double(let number):
            appendKey(key)
            bytes += (number.isFinite ? String(number) : "null").utf8
        case .bool(let flag):
            appendKey(key)
            bytes += (flag ? "true" : "false").utf8
        }
    }

    /// Ends the line with `}` and a newline.
    public mutating func end() {
        bytes.append(UInt8(ascii: "}"))
        bytes.append(10)
    }

    /// Takes the bytes built so far, leaving the line empty (timestamp cache kept).
    public mutating func take() -> [UInt8] {
        let taken = bytes
        bytes.removeAll(keepingCapacity: true)
        return taken
    }

    /// Keys are identifiers chosen in code: quoted without escaping.
    private mutating func appendKey(_ key: String) {
        bytes.append(UInt8(ascii: ","))
        bytes.append(UInt8(ascii: "\""))
        bytes.appendUTF8(key)
        bytes.appendASCII("\":")
    }

    private mutating func appendInteger(_ value: Int) {
        if value < 0 { bytes.append(UInt8(ascii: "-")) }
        var magnitude = value.magnitude
        var digits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
                     UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) =
            (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        var count = 0
        withUnsafeMutableBytes(of: &digits) { buffer in
            repeat {
                buffer[count] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
                count += 1
            } while magnitude > 0
            for index in stride(from: count - 1, through: 0, by: -1) { bytes.append(buffer[index]) }
        }
    }

    /// A JSON string: raw UTF-8 when nothing needs escaping (the usual case).
    private mutating func appendEscaped(_ text: String) {
        bytes.append(UInt8(ascii: "\""))
        var needsEscape = false
        for byte in text.utf8 where byte < 0x20 || byte == 0x22 || byte == 0x5C {
            needsEscape = true
            break
        }
        if needsEscape {
            var escaped = ""
            JSONText.appendString(text, to: &escaped)
            bytes += escaped.utf8.dropFirst().dropLast()
        } else {
            bytes.appendUTF8(text)
        }
        bytes.append(UInt8(ascii: "\""))
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
