import Foundation
import Testing
import TestSupport

/// Nasty values for every request header the server reads, sent to the real listening
/// server on a gzip hit, a PUT and a lookup: no 5xx, a well-formed answer each time, and the
/// process still serving afterwards. (`Cache-Control: =` and `Accept-Encoding: ;` each
/// killed the process once.)
@Suite struct HostileHeaderTests {
    let service = TestService.shared
    let namespace = TestService.namespace("hostile")
    let token: String

    init() throws { token = try writer(namespace) }

    /// Header names the server interprets somewhere (framing, routing, auth, caching).
    static let headerNames = [
        "Cache-Control", "Pragma", "Accept-Encoding", "If-None-Match", "If-Match", "Cache-Tag", "Content-Type",
        "Content-Encoding", "Expect", "Connection", "TE", "X-Request-Id", "Authorization", "Host",
    ]

    /// Values that break naive splitting, number parsing, quoting and UTF-8 decoding.
    static let values: [[UInt8]] = {
        let texts = [
            "", "=", ";", ",", ",,,", "\"", "\\", "\"\\", "=;=,", " = ; , ", "*", "W/", "W/\"", "\"unterminated",
            "max-stale", "max-stale=", "max-stale=abc", "max-stale=-1", "max-stale=\"", "max-stale=\"60",
            "max-stale=99999999999999999999999999", "max-age=2147483648", "no-cache=\"a,b\"", "only-if-cached=1",
            "stale-while-revalidate=-5", "gzip;q=", "gzip;q=abc", "gzip;q=1e400", "gzip;q=nan", "*;q=-1",
            "gzip;;;q", ";q=0.5", "gzip, *;q=0", "x-gzip;q=0.0001", "identity;q=0, *;q=0", "br;q=1.", "gzip ; q = 0.5",
            "\"a\", W/\"b\", junk", "\"a\"\"b\"", "Bearer", "Bearer ", "Bearer tc_", "bearer \u{0}",
            "Bearer " + String(repeating: "a", count: 4000), "100-continue, foo", "close, close", "keep-alive;x",
            "text/", "/", String(repeating: ",", count: 4000), String(repeating: "=", count: 4000),
            String(repeating: "a;", count: 2000), String(repeating: "\"", count: 4001), "gzip, gzip, gzip",
            "trailers;q=0.5", "%00", "%zz", "\u{FEFF}", "ü=ä;q=ö",
        ]
        // Bytes that are not UTF-8 (obs-text is allowed in field values).
        return texts.map { Array($0.utf8) } + [[0xFF], [0xC3], [0x3D, 0xFE, 0x3B], [0x22, 0xE2, 0x82]]
    }()

    private func gzipEntry() throws -> String {
        let items = (0..<400).map { "{\"id\":\($0),\"name\":\"item-\($0)\"}" }
        let json = Array(("[" + items.joined(separator: ",") + "]").utf8)
        let put = try service.request("PUT", entryPath(namespace, "big"), token: token,
                                      headers: [("Content-Type", "application/json")], body: json)
        #expect(put.status == 201)
        #expect(try object(put)["encoding"] as? String == "gzip")
        return "big"
    }

    /// One request with `name: value` added (or replacing the default of that name).
    private func send(_ method: String, _ path: String, body: [UInt8], _ name: String, _ value: [UInt8])
        throws -> RawClient.Response {
        let client = try RawClient(port: service.port, timeout: 10)
        var defaults: [(String, String)] = [("Host", "test"), ("Authorization", "Bearer \(token)"),
                                            ("Content-Type", "application/json")]
        defaults.removeAll { $0.0.lowercased() == name.lowercased() }
        var head = Array("\(method) \(path) HTTP/1.1\r\n".utf8)
        for (field, text) in defaults { head += Array("\(field): \(text)\r\n".utf8) }
        head += Array("\(name): ".utf8) + value + Array("\r\n".utf8)
        head += Array("Content-Length: \(body.count)\r\nConnection: close\r\n\r\n".utf8)
        try client.send(head + body)
        return try client.readResponse(head: method == "HEAD")
    }

    @Test func theTwoOneByteHeadersThatKilledTheServerAreAnswered() throws {
        let key = try gzipEntry()
        let control = try send("GET", entryPath(namespace, key), body: [], "Cache-Control", Array("=".utf8))
        #expect(control.status == 200)
        let encoding = try send("GET", entryPath(namespace, key), body: [], "Accept-Encoding", Array(";".utf8))
        #expect(encoding.status == 200)
        #expect(encoding.header("Content-Encoding") == nil)
        #expect(try service.request("GET", "/healthz").status == 200)
    }

    @Test func everyReadHeaderWithEveryNastyValueIsAnsweredWithoutA5xx() throws {
        let key = try gzipEntry()
        let putBody = Array("{\"v\":1}".utf8)
        let lookup = Array("{\"model\":\"m\",\"prompt\":\"p\"}".utf8)
        var answered = 0
        var failures: [String] = []
        for name in Self.headerNames {
            for value in Self.values {
                let requests: [(String, String, [UInt8])] = [
                    ("GET", entryPath(namespace, key), []),
                    ("HEAD", entryPath(namespace, key), []),
                    ("PUT", entryPath(namespace, "put-target"), putBody),
                    ("POST", "/v1/caches/\(namespace)/lookup", lookup),
                ]
                for (method, path, body) in requests {
                    let label = "\(method) \(name): \(String(decoding: value.prefix(40), as: UTF8.self))"
                    do {
                        let response = try send(method, path, body: body, name, value)
                        if response.status >= 500 || response.status < 100 { failures.append("\(label) → \(response.status)") }
                        if response.status >= 400 && method != "HEAD" && response.header("Content-Type") != "application/problem+json" {
                            failures.append("\(label) → \(response.status) without a problem body")
                        }
                        answered += 1
                    } catch {
                        failures.append("\(label) → \(error)")
                    }
                }
            }
        }
        #expect(failures.isEmpty, "\(failures.prefix(20))")
        #expect(answered == Self.headerNames.count * Self.values.count * 4)
        // Still serving, and the entry is intact.
        let after = try service.request("GET", entryPath(namespace, key), token: token)
        #expect(after.status == 200)
        #expect(try service.request("GET", "/healthz").status == 200)
    }
}
