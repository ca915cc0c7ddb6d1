import Foundation
import TestSupport

/// A stand-in for a sick TeamCache: each request (head and `Content-Length` body read) is
/// answered by `answer(requestLine)` with a whole HTTP response, after `delay(requestLine)`
/// seconds; connections are kept alive. What a client does against a service that answers
/// some routes and stalls or refuses others is the subject.
final class CannedService: @unchecked Sendable {
    // @unchecked: immutable after init.
    let port: Int
    private let listening: Int32

    init(answer: @escaping @Sendable (String) -> String, delay: @escaping @Sendable (String) -> Double = { _ in 0 })
        throws {
        (listening, port) = try Loopback.serve { client in Self.serve(client, answer, delay) }
    }

    deinit { shutdown(listening, Int32(SHUT_RDWR)) }  // the accept loop closes it

    /// A JSON answer with `status` and `body`, and `extra` header lines.
    static func json(_ status: Int, _ body: String, extra: String = "") -> String {
        "HTTP/1.1 \(status) X\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n\(extra)\r\n"
            + body
    }

    private static func serve(_ client: Int32, _ answer: (String) -> String, _ delay: (String) -> Double) {
        defer { close(client) }
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var pending: [UInt8] = []
        while true {
            guard let end = pending.firstRange(of: Array("\r\n\r\n".utf8)) else {
                let count = read(client, &buffer, buffer.count)
                guard count > 0 else { return }
                pending += buffer[0..<count]
                continue
            }
            let head = String(decoding: pending[..<end.lowerBound], as: UTF8.self)
            let length = head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
                .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? 0
            while pending.count < end.upperBound + length {
                let count = read(client, &buffer, buffer.count)
                guard count > 0 else { return }
                pending += buffer[0..<count]
            }
            pending.removeFirst(end.upperBound + length)
            let line = String(head.prefix { $0 != "\r" })
            Thread.sleep(forTimeInterval: delay(line))
            let bytes = Array(answer(line).utf8)
            guard bytes.withUnsafeBytes({ write(client, $0.baseAddress, $0.count) }) == bytes.count else { return }
        }
    }
}
