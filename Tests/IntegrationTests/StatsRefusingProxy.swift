import Foundation
import Locking
import TestSupport

/// A TCP proxy to a local service that, while `refusing` is set, hangs up on any request for
/// a namespace's stats (`GET /v1/caches/…/stats`) instead of passing it on: a service whose
/// stats route fails while the rest answers. A request is recognised by the start of the
/// bytes read at once from the client (a client sends a GET's head in one write).
final class StatsRefusingProxy: @unchecked Sendable {
    // @unchecked: `listening` and `port` are set in init; the rest is locked.
    let port: Int
    let refusing = Locked(false)
    let refused = Locked(0)
    private let listening: Int32

    init(to target: Int) throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        _ = Loopback.bind(fd, port: 0)
        listen(fd, 64)
        listening = fd
        port = Loopback.boundPort(fd)
        Thread.detachNewThread { [self] in
            while true {
                let client = accept(fd, nil, nil)
                guard client >= 0 else { return }  // shut down
                let upstream = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
                guard Loopback.connect(upstream, port: target) else {
                    close(client)
                    close(upstream)
                    continue
                }
                // Both ends are closed by the pump that finishes last (a descriptor closed while the
                // other still wrote to it could be reused by the next connection meanwhile).
                let running = Locked(2)
                let done: @Sendable () -> Void = {
                    guard running.withLock({ $0 -= 1; return $0 }) == 0 else { return }
                    close(client)
                    close(upstream)
                }
                Thread.detachNewThread { self.pump(from: client, to: upstream, inspecting: true); done() }
                Thread.detachNewThread { self.pump(from: upstream, to: client, inspecting: false); done() }
            }
        }
    }

    deinit {
        shutdown(listening, Int32(SHUT_RDWR))
        close(listening)
    }

    /// Copies bytes until either side closes, then shuts both down (so the other pump ends too).
    private func pump(from source: Int32, to sink: Int32, inspecting: Bool) {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = read(source, &buffer, buffer.count)
            guard count > 0 else { break }
            if inspecting, refusing.value, Self.asksForStats(buffer.prefix(count)) {
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
