import Foundation
import Locking
import TestSupport

/// A stand-in for a service numbering a backlog: every request (a GET, no body) is answered
/// at once with an empty change page that says more may follow (`more: true`, `next: "7"`),
/// as `/changes` answers while the feed's sequencer is busy; `asked` counts the requests that
/// followed from that cursor. (The same document answers the tier's stats call, which reads
/// it as "not encrypted".)
final class BusyFeedServer: @unchecked Sendable {
    // @unchecked: immutable after init; the count is locked.
    let port: Int
    let asked: Locked<Int>
    private let listening: Int32

    init() throws {
        let asked = Locked(0)
        self.asked = asked
        (listening, port) = try Loopback.serve { client in Self.answer(client, counting: asked) }
    }

    deinit { shutdown(listening, Int32(SHUT_RDWR)) }  // the accept loop closes it

    /// Answers each request head read on `client` until it closes.
    private static func answer(_ client: Int32, counting asked: Locked<Int>) {
        let body = #"{"changes":[],"next":"7","more":true}"#
        let response = Array(("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)"
            + "\r\n\r\n" + body).utf8)
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var pending = ""
        while true {
            let count = read(client, &buffer, buffer.count)
            guard count > 0 else { break }
            pending += String(decoding: buffer.prefix(count), as: UTF8.self)
            while let end = pending.range(of: "\r\n\r\n") {
                if pending[..<end.lowerBound].contains("since=7") { asked.withLock { $0 += 1 } }
                pending.removeSubrange(..<end.upperBound)
                guard response.withUnsafeBytes({ write(client, $0.baseAddress, $0.count) }) == response.count else {
                    close(client)
                    return
                }
            }
        }
        close(client)
    }
}
