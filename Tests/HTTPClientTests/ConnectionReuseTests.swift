import Foundation
import Glibc
import HTTPClient
import Locking
import Testing
import TestSupport

/// A kept-alive upstream connection is reused only when it is in step: an answer that came
/// before its request was written, or bytes that came after an answer ended, would be read
/// as the next call's answer, which may be another tenant's.
@Suite struct ConnectionReuseTests {
    /// An upstream that refuses a POST as soon as it has the head (413, kept alive) and then
    /// drains the body; whatever it drains that holds `GET /second` gets "stolen" back, as an
    /// upstream that took the next request for the rest of the body would answer. On its own
    /// connection, `GET /second` gets "right".
    static func refusingUpstream() throws -> Int {
        try Loopback.serve { fd in
            defer { close(fd) }
            var seen: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 65536)
            func readMore() -> Bool {
                let count = read(fd, &buffer, buffer.count)
                guard count > 0 else { return false }
                seen += buffer[0..<count]
                return true
            }
            while !seen.contains(subsequence: Array("\r\n\r\n".utf8)) { guard readMore() else { return } }
            guard seen.starts(with: Array("POST".utf8)) else {
                _ = write(fd, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nright", 43)
                return
            }
            _ = write(fd, "HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\n\r\n", 53)
            seen = []
            while readMore() {
                if seen.contains(subsequence: Array("GET /second".utf8)) {
                    _ = write(fd, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nstolen", 44)
                    return
                }
                seen = Array(seen.suffix(64))
            }
        }.port
    }

    @Test func anAnswerBeforeTheWholeRequestWasWrittenLeavesTheConnectionUnused() throws {
        let port = try Self.refusingUpstream()
        let harness = try ClientHarness()
        // Larger than loopback's socket buffers: the 413 comes while most of it is unsent.
        let post = ClientRequest(method: "POST", path: "/first", body: [UInt8](repeating: 0x61, count: 32 << 20))
        let refused = try harness.start(post, to: "http://127.0.0.1:\(port)")
        #expect(refused.wait())
        #expect(refused.status == 413 && refused.finished)
        let second = try harness.start(ClientRequest(method: "GET", path: "/second"), to: "http://127.0.0.1:\(port)")
        #expect(second.wait())
        #expect(String(decoding: second.body, as: UTF8.self) == "right")
        #expect(harness.client.socketsOpened == 2)
    }

    /// A stand-in upstream: `GET /second` gets "right" on whatever connection asks for it, and
    /// any other request what `first` writes.
    static func upstream(_ first: @escaping @Sendable (Int32) -> Void) throws -> Int {
        try Loopback.serve { fd in
            defer { close(fd) }
            var buffer = [UInt8](repeating: 0, count: 4096)
            let count = read(fd, &buffer, buffer.count)
            guard count > 0 else { return }
            if buffer[0..<count].starts(with: Array("GET /second".utf8)) {
                _ = write(fd, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nright", 43)
                return
            }
            first(fd)
            _ = read(fd, &buffer, buffer.count)
        }.port
    }

    /// Its answer to `GET /first` says 2 bytes and sends them, then, 30 ms later, a whole second
    /// answer nobody asked for.
    static func overtalkingUpstream() throws -> Int {
        try upstream { fd in
            _ = write(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 40)
            usleep(30_000)
            _ = write(fd, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nstolen", 44)
        }
    }

    @Test func bytesAfterAnAnswerEndedLeaveTheConnectionUnused() throws {
        let port = try Self.overtalkingUpstream()
        let harness = try ClientHarness()
        let first = try harness.start(ClientRequest(method: "GET", path: "/first"), to: "http://127.0.0.1:\(port)")
        #expect(first.wait())
        #expect(String(decoding: first.body, as: UTF8.self) == "ok")
        // The next call starts in the same loop turn as the wait for the stray bytes, so the
        // loop never sees the idle connection turn readable first (as under a burst of calls).
        let second = Recorder(), client = harness.client, loop = harness.loop!
        let origin = try Origin(parsing: "http://127.0.0.1:\(port)")
        loop.execute {
            usleep(150_000)
            _ = client.call(ClientRequest(method: "GET", path: "/second"), to: origin, tls: nil, on: loop,
                            delegate: second.delegate(on: loop))
        }
        #expect(second.wait())
        #expect(String(decoding: second.body, as: UTF8.self) == "right")
        #expect(harness.client.socketsOpened == 2)
    }

    /// Its answer to `GET /first` is exactly 64 KiB (the client's read buffer), and at once a
    /// second answer nobody asked for.
    static func bufferFillingUpstream() throws -> Int {
        try upstream { fd in
            let head = Array("HTTP/1.1 200 OK\r\nContent-Length: 65494\r\n\r\n".utf8)
            let answer = head + [UInt8](repeating: 0x61, count: 65536 - head.count)
                + Array("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nstolen".utf8)
            _ = answer.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        }
    }

    /// A connection handed straight to a call waiting for one (the origin at its cap) is quiet
    /// too: the first call's answer fills one read exactly, so the stray answer after it is
    /// still in the socket when the connection is released.
    @Test func bytesAfterAnAnswerEndedKeepTheConnectionFromAWaitingCall() throws {
        let port = try Self.bufferFillingUpstream()
        var configuration = HTTPClient.Configuration()
        configuration.maxConnectionsPerOrigin = 1
        let harness = try ClientHarness(configuration)
        let paused = Locked<LoopBound<HTTPCall>?>(nil)
        // Paused until every byte is in the socket, so one read takes exactly the first answer.
        let first = try harness.start(ClientRequest(method: "GET", path: "/first"), to: "http://127.0.0.1:\(port)") {
            call, _ in
            call.value.pause()
            paused.withLock { $0 = call }
        }
        let second = try harness.start(ClientRequest(method: "GET", path: "/second"), to: "http://127.0.0.1:\(port)")
        Thread.sleep(forTimeInterval: 0.3)
        harness.onLoop { paused.withLock { $0 }?.value.resume() }
        #expect(first.wait() && second.wait())
        #expect(first.body.count == 65494)
        #expect(String(decoding: second.body, as: UTF8.self) == "right")
        #expect(harness.client.socketsOpened == 2)
    }
}

extension Array where Element == UInt8 {
    func contains(subsequence: [UInt8]) -> Bool {
        guard subsequence.count <= count else { return false }
        return (0...(count - subsequence.count)).contains {
            self[$0..<($0 + subsequence.count)].elementsEqual(subsequence)
        }
    }
}
