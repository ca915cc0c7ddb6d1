import Foundation
import Locking
import TestSupport

/// A TCP proxy to a local service that, while `refusing` is set, hangs up on any request for
/// a namespace's stats (`GET /v1/caches/…/stats`) instead of passing it on: a service whose
/// stats route fails while the rest answers. A request is recognised by the start of the
/// bytes read at once from the client (a client sends a GET's head in one write).
final class StatsRefusingProxy: @unchecked Sendable {
    // @unchecked: immutable after init; the rest is locked.
    let port: Int
    let refusing: Locked<Bool>
    let refused: Locked<Int>
    private let listening: Int32

    init(to target: Int) throws {
        let (refusing, refused) = (Locked(false), Locked(0))
        (self.refusing, self.refused) = (refusing, refused)
        (listening, port) = try Loopback.serve { client in
            let upstream = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard Loopback.connect(upstream, port: target) else {
                close(client)
                close(upstream)
                return
            }
            // Both ends are closed by the pump that finishes last (a descriptor closed while the
            // other still wrote to it could be reused by the next connection meanwhile).
            let running = Locked(2)
            let done: @Sendable () -> Void = {
                guard running.withLock({ $0 -= 1; return $0 }) == 0 else { return }
                close(client)
                close(upstream)
            }
            Thread.detachNewThread {
                Self.pump(from: client, to: upstream, refusing: refusing, refused: refused)
                done()
            }
            Self.pump(from: upstream, to: client, refusing: nil, refused: refused)
            done()
        }
    }

    deinit { shutdown(listening, Int32(SHUT_RDWR)) }  // the accept loop closes it

    /// Copies bytes until either side closes, then shuts both down (so the other pump ends too).
    /// `refusing`: this pump reads the client's requests (nil: the service's answers).
    private static func pump(from source: Int32, to sink: Int32, refusing: Locked<Bool>?, refused: Locked<Int>) {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = read(source, &buffer, buffer.count)
            guard count > 0 else { break }
            if let refusing, refusing.value, Self.asksForStats(buffer.prefix(count)) {
                refused.withLock { $0 += 1 }
                break
            }
            var sent = 0
            while sent < count {
                let written = buffer[sent..<count].withUnsafeBytes { write(sink, $0.baseAddress, $0.count) }
                guard written > 0 else { break }
                sent += written
            }
            guard sent == count else { break }
        }
        shutdown(source, Int32(SHUT_RDWR))
        shutdown(sink, Int32(SHUT_RDWR))
    }

    static func asksForStats(_ bytes: ArraySlice<UInt8>) -> Bool {
        let line = String(decoding: bytes.prefix(256), as: UTF8.self).split(separator: "\r\n").first ?? ""
        return line.hasPrefix("GET /v1/caches/") && line.contains("/stats")
    }
}
