import Foundation
import Observability
import Testing

/// Log lines are built by copying into memory of the line's own: each must be one JSON
/// object whatever its fields hold, however long it grows, and `take` must start afresh.
@Suite struct LogLineTests {
    private func object(_ bytes: [UInt8]) throws -> [String: Any] {
        #expect(bytes.last == 10)
        return try #require(try JSONSerialization.jsonObject(with: Data(bytes.dropLast())) as? [String: Any])
    }

    @Test func fieldsOfEveryKindMakeOneJSONObject() throws {
        var line = LogLine(capacity: 1)
        line.begin(.warn, component: "http", message: "a \"quoted\"\nmessage\u{301}")
        line.field("route", token: "/v1/caches/{ns}")
        line.field("status", 200)
        line.field("negative", Int.min)
        line.field("text", "tab\there \\ ünïcode \u{0}")
        line.field("ratio", .double(0.25))
        line.field("nan", .double(.nan))
        line.field("flag", .bool(true))
        line.field("long", String(repeating: "x", count: 100_000))
        line.end()
        let parsed = try object(line.bytes)
        #expect(parsed["level"] as? String == "warn" && parsed["component"] as? String == "http")
        #expect(parsed["msg"] as? String == "a \"quoted\"\nmessage\u{301}")
        #expect(parsed["route"] as? String == "/v1/caches/{ns}")
        #expect(parsed["status"] as? Int == 200 && parsed["negative"] as? Int == Int.min)
        #expect(parsed["text"] as? String == "tab\there \\ ünïcode \u{0}")
        #expect(parsed["ratio"] as? Double == 0.25 && parsed["nan"] is NSNull && parsed["flag"] as? Bool == true)
        #expect((parsed["long"] as? String)?.count == 100_000)
        #expect((parsed["ts"] as? String)?.hasSuffix("Z") == true)
    }

    @Test func takeHandsOverTheLinesAndStartsAfresh() throws {
        var log = LogLine(capacity: 64)
        for index in 0..<500 {
            log.begin(.info, component: "http", message: "request")
            log.field("n", index)
            log.end()
        }
        let taken = log.take()
        #expect(log.isEmpty && log.count == 0)
        let lines = taken.split(separator: 10)
        #expect(lines.count == 500)
        #expect(try object(Array(lines[499]) + [10])["n"] as? Int == 499)
        log.begin(.info, component: "c", message: "m")
        log.end()
        #expect(try object(log.take())["msg"] as? String == "m")
    }

    /// A line from parts rendered once (the access line's way) is byte for byte the line
    /// written field by field, but for the millisecond it was stamped in.
    @Test func partsRenderedOnceWriteTheSameLine() throws {
        func afterStamp(_ bytes: [UInt8]) -> [UInt8] {
            let quote = bytes.indices.first { bytes[$0] == UInt8(ascii: "Z") } ?? 0
            return Array(bytes[quote...])
        }
        var fields = LogLine(capacity: 8)
        fields.begin(.info, component: "http", message: "request")
        fields.field("method", token: "GET")
        fields.field("route", token: "/v1/caches/{namespace}/entries/{key}")
        fields.field("status", 304)
        fields.field("request_id", token: "abc-123")
        fields.end()
        var parts = LogLine(capacity: 8)
        parts.begin(LogLine.head(.info, component: "http", message: "request"))
        parts.append(LogLine.tokenFields(["method": "GET", "route": "/v1/caches/{namespace}/entries/{key}"]))
        parts.field(LogLine.key("status"), 304)
        parts.field(LogLine.key("request_id"), token: "abc-123")
        parts.end()
        #expect(afterStamp(parts.bytes) == afterStamp(fields.bytes))
        #expect(try object(parts.bytes)["route"] as? String == "/v1/caches/{namespace}/entries/{key}")
        let escaped = LogLine.head(.error, component: "a\"b", message: "line\nbreak")
        var line = LogLine()
        line.begin(escaped)
        line.end()
        #expect(try object(line.bytes)["component"] as? String == "a\"b")
    }

    /// Integers are written digit by digit into the line's memory: each reads back as itself.
    @Test func integersReadBackAsThemselves() throws {
        var values = [0, 1, -1, 9, 10, 99, 100, Int.max, Int.min, Int.max - 1, Int.min + 1]
        for _ in 0..<2_000 { values.append(Int.random(in: Int.min...Int.max) >> Int.random(in: 0...63)) }
        var line = LogLine(capacity: 1)
        line.begin(.info, component: "c", message: "m")
        for (index, value) in values.enumerated() { line.field("v\(index)", value) }
        line.end()
        let parsed = try object(line.bytes)
        for (index, value) in values.enumerated() {
            #expect((parsed["v\(index)"] as? NSNumber)?.stringValue == String(value), "\(value)")
        }
    }

    /// A token followed by a number's hex digits (a numbered request id) reads back as the
    /// token and `String(number, radix: 16)`, from a line that must grow for it.
    @Test func tokensWithHexNumbersReadBackAsTheirText() throws {
        var numbers: [UInt64] = [0, 1, 9, 10, 15, 16, 255, 256, 0xFFFF, 0x10000, UInt64.max, 1 << 63]
        for _ in 0..<2_000 { numbers.append(UInt64.random(in: 0...UInt64.max) >> UInt64.random(in: 0...63)) }
        var line = LogLine(capacity: 1)
        line.begin(.info, component: "c", message: "m")
        for (index, number) in numbers.enumerated() { line.field(LogLine.key("v\(index)"), token: "p-1-", hex: number) }
        line.field(LogLine.key("given"), token: "given-id", hex: nil)
        line.end()
        let parsed = try object(line.bytes)
        for (index, number) in numbers.enumerated() {
            #expect(parsed["v\(index)"] as? String == "p-1-" + String(number, radix: 16), "\(number)")
        }
        #expect(parsed["given"] as? String == "given-id")
        var digits = [UInt8](repeating: 0, count: 16)
        for number in numbers {
            let count = digits.withUnsafeMutableBufferPointer { Hex.write(number, to: $0.baseAddress!) }
            #expect(count == Hex.digits(number) && String(decoding: digits[..<count], as: UTF8.self) == String(number, radix: 16))
        }
    }
}
