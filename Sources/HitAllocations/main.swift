// Heap allocations the service makes per near-cache hit: a real server (auth on, the access
// line written as in production, PostgreSQL behind it) in this process, one kept-alive
// connection asking for the same ~2 KB JSON entry, and the allocator's entry points counting
// (CAllocationCount). The client below allocates nothing per request (fixed buffers, a
// response read by scanning bytes), so the count is the server's, plus whatever its
// background timers do meanwhile (spread over thousands of hits, well under one a hit).
//
//   HitAllocations [HITS]   prints `identity <per hit> <allocations> <hits>` and the same for gzip
//
// Run by scripts/hit-allocations.sh (release build), which CI runs with a ceiling.
import CAllocationCount
import CacheCore
import Foundation
import Glibc
import Observability
import TeamCache
import TestSupport

let hits = max(1, CommandLine.arguments.dropFirst().first.flatMap(Int.init) ?? 5_000)

// The access line is written for every request in production (level info): counted too.
LogSink.shared.configure(level: .info, fd: open("/dev/null", O_WRONLY))
let namespace = "alloc"
let path = "/v1/caches/\(namespace)/entries/answer"
let body = Array(("{\"answer\":\"" + String(repeating: "forty-two ", count: 200) + "\"}").utf8)

/// One kept-alive connection, its request written once and its responses read into one buffer.
final class Connection {
    let socket: Int32
    let request: [UInt8]
    var buffer = [UInt8](repeating: 0, count: 1 << 16)

    init(port: Int, request: String) throws {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0, Loopback.connect(socket, port: port) else {
            if socket >= 0 { close(socket) }
            throw Failure("cannot connect to the service on port \(port)")
        }
        self.socket = socket
        self.request = Array(request.utf8)
    }

    /// Sends the request and reads one whole response; its status. No allocation.
    func exchange() -> Int {
        let sent = request.withUnsafeBytes { send(socket, $0.baseAddress, $0.count, 0) }
        guard sent == request.count else { return -1 }
        var filled = 0
        var total = -1
        return buffer.withUnsafeMutableBytes { bytes -> Int in
            while total < 0 || filled < total {
                let count = recv(socket, bytes.baseAddress! + filled, bytes.count - filled, 0)
                if count <= 0 { return -1 }
                filled += count
                if total < 0, let headEnd = Self.headEnd(bytes, filled) {
                    total = headEnd + Self.contentLength(bytes, headEnd)
                }
            }
            // "HTTP/1.1 200"
            return (Int(bytes[9]) - 48) * 100 + (Int(bytes[10]) - 48) * 10 + Int(bytes[11]) - 48
        }
    }

    /// Where the body starts (after CR LF CR LF), if the head is complete.
    static func headEnd(_ bytes: UnsafeMutableRawBufferPointer, _ filled: Int) -> Int? {
        var index = 3
        while index < filled {
            if bytes[index] == 10 && bytes[index - 1] == 13 && bytes[index - 2] == 10 && bytes[index - 3] == 13 {
                return index + 1
            }
            index += 1
        }
        return nil
    }

    /// The Content-Length header's value (names compared without case), 0 without one.
    static func contentLength(_ bytes: UnsafeMutableRawBufferPointer, _ headEnd: Int) -> Int {
        let name: StaticString = "\ncontent-length:"
        let nameBytes = UnsafeRawBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount)
        var start = 0
        while start + nameBytes.count < headEnd {
            var matches = true
            for offset in 0..<nameBytes.count where bytes[start + offset] | 0x20 != nameBytes[offset] | 0x20 {
                matches = false
                break
            }
            if matches {
                var index = start + nameBytes.count
                var value = 0
                while index < headEnd && bytes[index] == 32 { index += 1 }
                while index < headEnd && bytes[index] >= 48 && bytes[index] <= 57 {
                    value = value * 10 + Int(bytes[index]) - 48
                    index += 1
                }
                return value
            }
            start += 1
        }
        return 0
    }
}

/// Why a run could not measure (it exits 1 with this on standard error).
struct Failure: Error {
    let reason: String
    init(_ reason: String) { self.reason = reason }
}

/// The service on a database of its own, auth on.
func start() throws -> (Application, String) {
    var configuration = Configuration()
    let database = try TestDatabase.shared.migratedDatabase(prefix: "alloc")
    configuration.databaseURL = TestDatabase.shared.url + (TestDatabase.shared.url.contains("?") ? "&" : "?")
        + "dbname=\(database)"
    configuration.migrationsDirectory = TestPaths.migrations
    configuration.http.port = 0
    configuration.accessFlushInterval = 3600
    configuration.evictionInterval = 3600
    let app = try Application(configuration: configuration)
    try app.start()
    let token = try app.tokens.create(name: "alloc", namespacePattern: namespace, scopes: [.read, .write], expiresAt: nil).1
    return (app, token)
}

func put(encoding: String, port: Int, token: String) throws {
    let client = try RawClient(port: port, timeout: 30)
    let stored = encoding == "gzip" ? (Gzip.compress(body, level: 6) ?? body) : body
    var head = "PUT \(path)-\(encoding) HTTP/1.1\r\nHost: alloc\r\nConnection: close\r\nAuthorization: Bearer \(token)\r\n"
    head += "Content-Type: application/json\r\nContent-Length: \(stored.count)\r\n"
    if encoding == "gzip" { head += "Content-Encoding: gzip\r\n" }
    try client.send(Array((head + "\r\n").utf8) + stored)
    let answer = try client.readResponse(head: false)
    guard answer.status == 201 || answer.status == 200 else { throw Failure("PUT answered \(answer.status)") }
}

/// `encoding allocations-per-hit allocations hits`, a line per encoding.
func measure() throws {
    let (app, token) = try start()
    defer { app.stop() }
    for encoding in ["identity", "gzip"] {
        try put(encoding: encoding, port: app.server.port, token: token)
        let connection = try Connection(port: app.server.port, request: """
            GET \(path)-\(encoding) HTTP/1.1\r\nHost: alloc\r\nAuthorization: Bearer \(token)\r\nAccept-Encoding: \(encoding)\r\n\r\n
            """)
        // Warm: the token's identity remembered, the entry in the near-cache (read twice), the
        // connection's credential kept, buffers grown to size.
        for _ in 0..<500 where connection.exchange() != 200 { throw Failure("a warm-up read was not a hit") }
        tc_allocations_start()
        var failed = 0
        for _ in 0..<hits where connection.exchange() != 200 { failed += 1 }
        let allocations = tc_allocations_stop()
        guard failed == 0 else { throw Failure("\(failed) reads were not hits") }
        print(encoding, String(format: "%.2f", Double(allocations) / Double(hits)), allocations, hits)
    }
}

do {
    try measure()
} catch {
    FileHandle.standardError.write(Data("HitAllocations: \((error as? Failure)?.reason ?? String(describing: error))\n".utf8))
    exit(1)
}
